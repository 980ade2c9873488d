"""A job's status from its event list and its queue entry (pure), and job states."""

from __future__ import annotations

import pytest

from ti_slurm.backends.base import JobInfo
from ti_slurm.core.events import parse_events
from ti_slurm.core.states import JobState
from ti_slurm.follow.status import format_status, job_status, progress_line

JOB = JobInfo("12", "demo", "slurm", "/jobs/12", submission="s1")
START = {"event": "start", "submission": "s1", "mode": "ps-worker", "components": [
    {"name": "ps", "nodes": ["n1"]}, {"name": "worker", "nodes": ["n2", "n3"]}]}  # fmt: skip
WORKER_FAILED = {"event": "step-exit", "submission": "s1", "component": "worker", "exit_code": 3, "stopped": False,
                 "records": [{"index": 1, "node": "n3", "exit_code": 3}]}  # fmt: skip
END_FAILED = {"event": "end", "submission": "s1", "state": "FAILED", "reason": "worker node n3 (index 1) exited 3",
              "failed": {"component": "worker", "node": "n3", "index": 1, "exit_code": 3}}  # fmt: skip


def queued(state: str, reason: str = "") -> JobInfo:
    return JobInfo("12", state=JobState.from_slurm(state), reason=reason)


def test_pending_in_the_queue_and_no_record_yet() -> None:
    status = job_status(JOB, [], queued("PENDING", "Resources"))
    assert (status.state, status.reason, status.settled) == (JobState.PENDING, "Resources", False)


def test_running_shows_each_component() -> None:
    status = job_status(JOB, [START], queued("RUNNING"))
    assert status.state is JobState.RUNNING and [c.nodes for c in status.components] == [["n1"], ["n2", "n3"]]
    assert progress_line(status) == "RUNNING on ps: running; worker: running"


def test_the_end_record_decides_and_names_the_failed_node() -> None:
    status = job_status(JOB, [START, WORKER_FAILED, END_FAILED], None)
    assert status.state is JobState.FAILED and status.settled
    assert status.failed["node"] == "n3" and status.components[1].state == "FAILED"
    assert "node n3 (index 1) exited 3; its log: ti-slurm logs 12 --node worker-1" in format_status(status)
    assert status.as_dict()["state"] == "FAILED"


def test_a_job_that_left_the_queue_without_an_end_record_failed() -> None:
    status = job_status(JOB, [START], None)
    assert status.state is JobState.FAILED and "without a final record" in status.reason


def test_events_of_an_earlier_job_with_the_same_id_are_ignored() -> None:
    old = [{**START, "submission": "old"}, {**END_FAILED, "submission": "old"}]
    assert job_status(JOB, old, queued("PENDING")).state is JobState.PENDING


def test_unknown_when_neither_queued_nor_recorded() -> None:
    status = job_status(JOB, [], None)
    assert status.state is JobState.UNKNOWN and status.settled


def test_broken_lines_are_skipped() -> None:
    text = '{"event": "start"\n[1, 2]\n"text"\n{"event": "end", "state": "COMPLETED"}\n'
    assert parse_events(text) == [{"event": "end", "state": "COMPLETED"}]


@pytest.mark.parametrize(
    "text,state,terminal",
    [
        ("PENDING", JobState.PENDING, False),
        ("RUNNING", JobState.RUNNING, False),
        ("COMPLETING", JobState.RUNNING, False),
        ("COMPLETED", JobState.COMPLETED, True),
        ("CANCELLED by 0", JobState.CANCELLED, True),
        ("TIMEOUT", JobState.TIMEOUT, True),
        ("NODE_FAIL", JobState.NODE_FAIL, True),
        ("BOOT_FAIL", JobState.NODE_FAIL, True),
        ("REQUEUE_HOLD", JobState.PENDING, False),
        ("SOMETHING_NEW", JobState.UNKNOWN, False),
    ],
)
def test_slurm_states(text: str, state: JobState, terminal: bool) -> None:
    assert JobState.from_slurm(text) is state and state.is_terminal is terminal


def test_a_restart_in_place_is_running_and_shows_as_an_attempt() -> None:
    start = {"event": "start", "submission": "s1", "attempt": 0, "time": 1.0, "mode": "ddp",
             "components": [{"name": "ddp", "nodes": ["n1", "n2"]}]}  # fmt: skip
    end = {"event": "end", "submission": "s1", "attempt": 0, "time": 2.0, "state": "FAILED",
           "reason": "ddp node n2 (index 1) exited 3", "cause": "failure",
           "requeue": True, "in_place": True}  # fmt: skip
    between = job_status(JOB, [start, end], queued("RUNNING"))
    assert between.state is JobState.RUNNING and not between.settled
    assert between.reason == "restarting in place after FAILED: ddp node n2 (index 1) exited 3"
    status = job_status(JOB, [start, end, {**start, "attempt": 1}], queued("RUNNING"))
    assert status.state is JobState.RUNNING
    assert [(a.attempt, a.in_place) for a in status.attempts] == [(0, True), (1, False)]
    assert "FAILED -> restarted in place ddp node n2 (index 1) exited 3" in format_status(status)


def test_spare_nodes_held_idle_show_what_they_cost() -> None:
    """3 nodes and a spare for an hour, the spare then takes a lost node's place for half an hour more."""
    start = {"event": "start", "submission": "s1", "attempt": 0, "time": 0.0, "mode": "ddp",
             "components": [{"name": "ddp", "nodes": ["n1", "n2", "n3"]}], "idle": ["n4"]}  # fmt: skip
    end = {"event": "end", "submission": "s1", "attempt": 0, "time": 3600.0, "state": "NODE_FAIL",
           "cause": "node_fail", "requeue": True, "in_place": True}  # fmt: skip
    again = {**start, "attempt": 1, "time": 3600.0, "replaced": {"n2": "n4"}, "idle": [],
             "components": [{"name": "ddp", "nodes": ["n1", "n4", "n3"]}]}  # fmt: skip
    done = {**end, "attempt": 1, "time": 5400.0, "state": "COMPLETED", "requeue": False, "in_place": False}
    status = job_status(JOB, [start, end, again, done], None)
    assert [a.idle for a in status.attempts] == [["n4"], []]
    # idle: 1 node x 1 h; the job's: 4 nodes x 1 h + 3 x 0.5 h
    assert "  spare nodes: up to 1 held idle, 1.00 node-hours (18% of the job's 5.50)" in format_status(status)
    assert "spare nodes" not in format_status(job_status(JOB, [START, END_FAILED], None))
