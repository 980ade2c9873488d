"""The controller's load: partitions that can never run a job, and one shared queue query for all followers."""

from __future__ import annotations

from pathlib import Path

import pytest

from ti_slurm.backends.base import JobInfo
from ti_slurm.backends.slurm import SlurmBackend
from ti_slurm.core.plan import Component, JobPlan
from ti_slurm.core.states import JobState
from ti_slurm.follow.queue import SharedQueue
from ti_slurm.follow.status import JobStatus, progress_line
from ti_slurm.slurm.request import unfit_reason
from ti_slurm.slurm.text import parse_partitions

SINFO = "debug*|4|gpu:8|infinite\nrdma|2|gpu:8(S:0-1)|2-00:00:00\nsmall|3|(null)|30:00\nsmall|1|gpu:a100:2|30:00\n"
SINFO += "ascend|2|gpu:8,npu:8(S:0-1)|infinite\n"


def plan(*components: Component, **fields: object) -> JobPlan:
    return JobPlan("t", "ddp", "x", components, **fields)  # type: ignore[arg-type]


ONE = Component("ddp", 1, 0, 1)
UNFIT = [
    (plan(Component("ddp", 4, 8, 1)), None),
    (plan(Component("ddp", 128, 0, 1)), "128 nodes asked, partition debug has 4"),
    (plan(Component("ddp", 1, 16, 1)), "16 GPUs per node asked, no node of partition debug has more than 8"),
    (plan(ONE, partition="gpu"), "partition 'gpu' does not exist (partitions: ascend, debug, rdma, small)"),
    (plan(Component("ddp", 2, 0, 1, npus_per_node=8), partition="ascend"), None),
    (
        plan(Component("ddp", 1, 0, 1, npus_per_node=8)),
        "8 NPUs per node asked, no node of partition debug has NPUs (GRES npu)",
    ),
    (
        plan(Component("ddp", 1, 0, 1, npus_per_node=16), partition="ascend"),
        "16 NPUs per node asked, no node of partition ascend has more than 8",
    ),
    (plan(ONE, partition="small", time="1:00:00"), "time 1:00:00 is above partition small's maximum of 30 minutes"),
    (
        plan(Component("ps", 1, 0, 1), Component("worker", 3, 8, 1, partition="rdma")),
        "worker: 3 nodes asked, partition rdma has 2",
    ),
]


@pytest.mark.parametrize("job,reason", UNFIT)
def test_jobs_that_can_never_start_are_named(job: JobPlan, reason: str | None) -> None:
    assert unfit_reason(job, parse_partitions(SINFO)) == reason


def test_pending_forever_says_so() -> None:
    status = JobStatus("7", "t", JobState.PENDING, reason="PartitionConfig")
    assert progress_line(status) == (
        "PENDING (PartitionConfig): the job asks for more than the partition has; "
        "it cannot start as the partition stands"
    )


class CountingSlurm(SlurmBackend):
    """The Slurm backend with its queue answers counted (each would be a query to the controller)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.jobs = {"1": JobInfo("1", state=JobState.RUNNING), "2": JobInfo("2", state=JobState.PENDING)}

    def user_queue(self) -> dict[str, JobInfo]:
        self.calls += 1
        return dict(self.jobs)

    def queue_states(self, jobs: list[JobInfo]) -> dict[str, JobInfo]:
        raise AssertionError("followers ask through the shared user queue")


def test_followers_share_one_query_per_interval(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    backend = CountingSlurm()
    followers = [SharedQueue(backend) for _ in range(20)]  # twenty processes, as far as the cache goes
    for i, follower in enumerate(followers):
        states = follower.states([JobInfo("1"), JobInfo("2"), JobInfo("9")], max_age=60)
        assert {k: v.state for k, v in states.items()} == {"1": JobState.RUNNING, "2": JobState.PENDING}, i
    assert backend.calls == 1
    followers[0].states([JobInfo("1")], max_age=0)  # an answer this fresh cannot be shared
    assert backend.calls == 2


def test_a_list_every_10_s_asks_the_controller_once_per_30_s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One-shot ``list``/``status`` (``statuses_of`` with its default age) in a ``watch -n 10``: over two minutes
    the controller is asked at most once per 30 s, and a pending job cancelled meanwhile shows it within 30 s."""
    from ti_slurm.follow import queue
    from ti_slurm.follow.follower import statuses_of

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    clock = [1000.0]
    monkeypatch.setattr(queue.time, "time", lambda: clock[0])
    backend = CountingSlurm()
    jobs = [JobInfo("1", "a", "slurm"), JobInfo("2", "b", "slurm")]
    seen = []
    for _ in range(13):  # 0, 10, ... 120 s
        seen.append(statuses_of(backend, "", jobs)[1].state)
        if clock[0] == 1040.0:
            del backend.jobs["2"]  # the pending job cancelled by hand: it left the queue
        clock[0] += 10
    assert backend.calls == 4  # at 0, 40, 80, 120 s: an answer is taken until it is 30 s old
    assert seen[4] is JobState.PENDING and seen[8] is not JobState.PENDING  # asked at 80 s: gone


def test_a_job_submitted_after_the_shared_answer_is_asked_about(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    backend = CountingSlurm()
    SharedQueue(backend).states([JobInfo("1")], max_age=60)
    backend.jobs["3"] = JobInfo("3", state=JobState.PENDING)
    new = JobInfo("3", submitted=time.time())
    assert SharedQueue(backend).states([new], max_age=60)["3"].state is JobState.PENDING
    assert backend.calls == 2


def test_a_follower_asks_nobody_while_the_jobs_record_keeps_growing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Running: the supervisor's lines say it is alive. Silent for RECORD_STALE: the controller is asked."""
    import json

    from ti_slurm import client
    from ti_slurm.follow import follower as following
    from ti_slurm.follow import queue

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    clock = [1000.0]
    monkeypatch.setattr(following.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(queue.time, "time", lambda: clock[0])  # the shared answer ages with it
    monkeypatch.setattr(following.time, "sleep", lambda s: None)
    record = tmp_path / "job" / "status.jsonl"
    record.parent.mkdir()
    start = {"event": "start", "submission": "s", "mode": "mpi", "components": [{"name": "mpi", "nodes": ["n1"]}]}
    record.write_text(json.dumps(start) + "\n")

    class Backend(CountingSlurm):
        def read_text(self, path: str) -> str | None:
            return Path(path).read_text() if Path(path).exists() else None  # as the backends answer

        def read_end(self, path: str, size: int) -> tuple[int, bytes] | None:
            return None  # no batch output (the job ended without a record: ti-slurm looks for one)

    backend = Backend()
    backend.jobs = {"5": JobInfo("5", state=JobState.RUNNING)}
    job = client.Job(JobInfo("5", "t", "slurm", str(record.parent), submission="s"), backend)  # type: ignore[arg-type]
    follower = job.follower()
    assert follower.status().state is JobState.RUNNING and backend.calls == 1  # asked once: not just submitted
    for _ in range(10):  # ten minutes of a healthy job: a line a minute, no query
        clock[0] += 60
        with record.open("a") as fh:
            fh.write(json.dumps({"event": "alive", "submission": "s"}) + "\n")
        assert follower.status().state is JobState.RUNNING
    assert backend.calls == 1
    clock[0] += queue.RECORD_STALE + 1  # silence: the supervisor died with its node
    backend.jobs = {"5": JobInfo("5", state=JobState.NODE_FAIL)}
    status = follower.status()
    assert backend.calls == 2 and status.state is JobState.NODE_FAIL
    assert status.reason == "the job ended without a final record (Slurm: NODE_FAIL)"


def test_a_job_is_pending_when_another_process_asked_the_queue_while_it_was_being_submitted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen on the test cluster: a queue answer asked while sbatch ran (without the new job) was taken for the
    job's own, so ``cancel`` said it had already ended. The job counts as submitted once Slurm holds it."""
    from ti_slurm import client, routing

    class SubmittedMeanwhile(CountingSlurm):
        def submit(self, plan: JobPlan, script: str, check_fit: bool = True) -> JobInfo:
            SharedQueue(self).states([JobInfo("1")], max_age=60)  # another process follows its job meanwhile
            self.jobs["3"] = JobInfo("3", state=JobState.PENDING)  # ... and then Slurm takes this one
            return JobInfo("3", plan.name, self.name, str(tmp_path / "out" / "3"), JobState.PENDING)

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    backend = SubmittedMeanwhile()
    monkeypatch.setattr(routing, "open_backend", lambda *args, **kwargs: backend)
    job = client.submit({"mode": "ddp", "nodes": 1, "command": "true", "output_dir": str(tmp_path / "out")})
    assert job.status().state is JobState.PENDING
    assert backend.calls == 2  # the answer asked during the submit was asked again


def test_a_job_on_a_named_cluster_is_found_in_its_queue_by_slurms_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``gpu:2`` is job 2 to that cluster's queue: pending there, not "gone" (its record does not exist yet)."""
    from ti_slurm.client import Job

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    job = Job(JobInfo("2", job_dir=str(tmp_path / "2"), cluster="gpu"), CountingSlurm())
    assert job.id == "gpu:2"
    assert job.status().state is JobState.PENDING
