"""The supervisor's rule, through a fake launcher: no processes, no Slurm."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any, cast

import pytest
from supervisor_fakes import FakeLauncher, FakeProcess, events

from tests.factories import job_plan
from ti_slurm.core.paths import JobPaths
from ti_slurm.core.plan import JobPlan
from ti_slurm.core.states import JobState
from ti_slurm.job.supervisor.launchers import Launch
from ti_slurm.job.supervisor.loop import Supervisor


def run(plan: JobPlan, tmp_path: Path, script: dict[str, tuple[int | None, int]]) -> tuple[Any, FakeLauncher]:
    launcher = FakeLauncher(plan, tmp_path, script)
    outcome = Supervisor(plan, str(tmp_path), launcher, say=lambda text: None).run()
    return outcome, launcher


def test_every_node_exiting_0_completes_the_job(tmp_path: Path) -> None:
    outcome, _ = run(job_plan("ddp", ("ddp", 3)), tmp_path, {})
    assert outcome.state is JobState.COMPLETED and outcome.exit_code == 0
    assert [e["event"] for e in events(tmp_path)] == ["start", "step-exit", "step-exit", "step-exit", "end"]
    assert events(tmp_path)[0]["components"] == [{"name": "ddp", "nodes": ["ddp-host0", "ddp-host1", "ddp-host2"]}]


def test_the_first_failing_node_fails_the_job_and_the_rest_are_stopped(tmp_path: Path) -> None:
    outcome, launcher = run(job_plan("mpi", ("mpi", 3)), tmp_path, {"mpi-1": (3, 2), "mpi-2": (None, 0)})
    assert outcome.state is JobState.FAILED and outcome.exit_code == 3
    assert outcome.failed == {"component": "mpi", "node": "mpi-host1", "index": 1, "exit_code": 3}
    assert launcher.stopped == ["mpi-2"]
    assert events(tmp_path)[-1]["state"] == "FAILED"


def test_parameter_servers_are_stopped_once_every_worker_succeeded(tmp_path: Path) -> None:
    plan = job_plan("ps-worker", ("ps", 2), ("worker", 2))
    outcome, launcher = run(plan, tmp_path, {"ps-0": (None, 0), "ps-1": (None, 0), "worker-1": (0, 3)})
    assert outcome.state is JobState.COMPLETED
    assert sorted(launcher.stopped) == ["ps-0", "ps-1"]
    stopped = [e for e in events(tmp_path) if e["event"] == "step-exit" and e["stopped"]]
    assert [e["component"] for e in stopped] == ["ps", "ps"]


def test_a_parameter_server_exiting_while_workers_run_fails_the_job(tmp_path: Path) -> None:
    plan = job_plan("ps-worker", ("ps", 1), ("worker", 1))
    outcome, _ = run(plan, tmp_path, {"ps-0": (0, 1), "worker-0": (None, 0)})
    assert outcome.state is JobState.FAILED
    assert outcome.reason == "ps node ps-host0 (index 0) exited 0 while the job was still running"


def test_a_step_that_exits_0_without_its_node_records_fails_the_job(tmp_path: Path) -> None:
    class NoRecords(FakeLauncher):
        def start(self, plan: JobPlan, component: int, nodes: list[int]) -> list[Launch]:
            return [Launch(component, plan.components[component].name, nodes, cast(Any, FakeProcess(0)))]

    plan = job_plan("ddp", ("ddp", 2))
    launcher = NoRecords(plan, tmp_path, {})
    outcome = Supervisor(plan, str(tmp_path), launcher, say=lambda text: None).run()
    assert outcome.state is JobState.FAILED
    assert outcome.reason.startswith("ddp step exited 0 but node(s) ddp-host0,ddp-host1 left no exit record")


def test_horovod_launches_the_launcher_only(tmp_path: Path) -> None:
    plan = job_plan("horovod", ("horovod", 4))
    outcome, _ = run(plan, tmp_path, {})
    assert outcome.state is JobState.COMPLETED
    assert [e["nodes"] for e in events(tmp_path) if e["event"] == "step-exit"] == [[0]]


@pytest.mark.parametrize("record_first", [True, False])
def test_a_cancelled_job_records_cancelled_in_the_order_its_launcher_needs(tmp_path: Path, record_first: bool) -> None:
    plan = job_plan("ddp", ("ddp", 1))
    launcher = FakeLauncher(plan, tmp_path, {"ddp-0": (None, 0)})
    launcher.record_before_stop_on_cancel = record_first
    supervisor = Supervisor(plan, str(tmp_path), launcher, say=lambda text: None)
    supervisor._cancel_signal = 15  # as the SIGTERM handler sets it
    outcome = supervisor.run()
    assert outcome.state is JobState.CANCELLED and outcome.reason == "received signal SIGTERM"
    kinds = [e["event"] for e in events(tmp_path)]
    assert kinds == (["start", "end", "step-exit"] if record_first else ["start", "step-exit", "end"])


def test_a_step_killed_while_its_node_starts_is_a_cancel_when_the_supervisors_signal_follows(tmp_path: Path) -> None:
    """scancel signals the steps and the batch script in no set order: a step that ends (srun's exit 1) before its
    node recorded anything is the cancel's first sign, not a failure, once the supervisor's SIGTERM comes."""
    import threading

    class KilledStarting(FakeLauncher):
        def start(self, plan: JobPlan, component: int, nodes: list[int]) -> list[Launch]:
            return [Launch(component, plan.components[component].name, nodes, cast(Any, FakeProcess(1)))]

    plan = job_plan("ddp", ("ddp", 1))
    supervisor = Supervisor(plan, str(tmp_path), KilledStarting(plan, tmp_path, {}), say=lambda text: None)
    threading.Timer(0.5, lambda: setattr(supervisor, "_cancel_signal", 15)).start()
    outcome = supervisor.run()
    assert outcome.state is JobState.CANCELLED and outcome.reason == "received signal SIGTERM"


def test_a_step_killed_while_its_node_starts_is_a_cancel_when_slurm_says_so_before_the_signal_comes(
    tmp_path: Path,
) -> None:
    """On a loaded machine the batch step's SIGTERM may come after the settle time, or never (cancelled as its
    batch script started): the job Slurm shows CANCELLED, or COMPLETING with no reason (what a cancelled job
    shows while its batch script runs), is a cancel all the same; one Slurm still shows RUNNING, or COMPLETING
    for a lost node, is the step's failure."""

    class KilledStarting(FakeLauncher):
        def start(self, plan: JobPlan, component: int, nodes: list[int]) -> list[Launch]:
            return [Launch(component, plan.components[component].name, nodes, cast(Any, FakeProcess(1)))]

    class Shows:
        def __init__(self, state: str, reason: str) -> None:
            self.state, self.reason = state, reason

        def show_job(self) -> dict[str, str]:
            return {"JobState": self.state, "Reason": self.reason}

    plan = job_plan("ddp", ("ddp", 1))
    shown = [("CANCELLED", "None", JobState.CANCELLED), ("COMPLETING", "None", JobState.CANCELLED),
             ("RUNNING", "None", JobState.FAILED), ("COMPLETING", "NodeDown", JobState.FAILED)]  # fmt: skip
    for state, reason, expected in shown:
        folder = tmp_path / f"{state}-{reason}"
        launcher = KilledStarting(plan, folder, {}, control=Shows(state, reason))
        outcome = Supervisor(plan, str(folder), launcher, say=lambda text: None).run()
        assert outcome.state is expected, (state, reason, outcome)


def test_a_supervisor_that_cannot_write_its_record_stops_every_launch(tmp_path: Path) -> None:
    """Out of disk at the first event: nothing keeps running behind a broken supervisor."""
    plan = job_plan("mpi", ("mpi", 2))
    launcher = FakeLauncher(plan, tmp_path, {"mpi-0": (None, 0), "mpi-1": (None, 0)})
    supervisor = Supervisor(plan, str(tmp_path), launcher, say=lambda text: None)

    def full_disk(kind: str, **data: object) -> None:
        raise OSError(28, "No space left on device")

    supervisor.event = full_disk  # type: ignore[method-assign]
    outcome = supervisor.run()
    assert outcome.state is JobState.FAILED and "No space left on device" in outcome.reason
    assert sorted(launcher.stopped) == ["mpi-0", "mpi-1"]


def test_two_local_submits_in_the_same_millisecond_get_different_jobs(tmp_path: Path) -> None:
    from ti_slurm.backends.local import local_job_number

    plan = job_plan("mpi", ("mpi", 1))
    first, second = (local_job_number(plan, str(tmp_path), 424242) for _ in range(2))
    assert first != second and (tmp_path / f"local-{first}").is_dir() and (tmp_path / f"local-{second}").is_dir()


def in_place(plan: JobPlan, times: int, on: tuple[str, ...] = ("failure", "hang")) -> JobPlan:
    return plan.replace(restart_in_place=times, restart_on=on, checkpoint_signal="USR2", stop_grace=1)


def test_a_failure_restarts_the_commands_in_place_as_the_next_attempt(tmp_path: Path) -> None:
    plan = in_place(job_plan("ddp", ("ddp", 2)), 2)
    outcome, launcher = run(plan, tmp_path, {"ddp-1@0": (3, 1), "ddp-0@0": (None, 0)})
    assert outcome.state is JobState.COMPLETED and launcher.attempt == 1
    ends = [e for e in events(tmp_path) if e["event"] == "end"]
    seen = [(e["attempt"], e["state"], e.get("in_place")) for e in ends]
    assert seen == [(0, "FAILED", True), (1, "COMPLETED", None)]
    assert ends[0]["cause"] == "unknown" and ends[0]["requeue"] is True
    # the node still running got the checkpoint signal before it was stopped; the first attempt's files are aside
    assert launcher.signalled == [("ddp-0", signal.SIGUSR2)] and launcher.stopped == ["ddp-0"]
    assert (tmp_path / "attempts" / "0" / "nodes" / "ddp.1.json").exists()


def test_in_place_restarts_stop_at_their_number_and_the_job_fails(tmp_path: Path) -> None:
    outcome, launcher = run(in_place(job_plan("mpi", ("mpi", 1)), 2), tmp_path, {"mpi-0": (3, 0)})
    assert outcome.state is JobState.FAILED and launcher.attempt == 2
    assert outcome.reason == "mpi node mpi-host0 (index 0) exited 3"
    assert [e.get("in_place") for e in events(tmp_path) if e["event"] == "end"] == [True, True, None]


def test_a_cause_restart_on_does_not_list_is_not_restarted_in_place(tmp_path: Path) -> None:
    outcome, launcher = run(in_place(job_plan("mpi", ("mpi", 1)), 2, on=("hang",)), tmp_path, {"mpi-0": (3, 0)})
    assert outcome.state is JobState.FAILED and launcher.attempt == 0


def test_parameter_servers_are_stopped_for_a_restart_without_the_checkpoint_signal(tmp_path: Path) -> None:
    plan = in_place(job_plan("ps-worker", ("ps", 1), ("worker", 1)), 1)
    outcome, launcher = run(plan, tmp_path, {"ps-0": (None, 0), "worker-0@0": (4, 1)})
    assert outcome.state is JobState.COMPLETED
    assert launcher.signalled == [] and launcher.stopped == ["ps-0", "ps-0"]  # for the restart, then at the end


def test_a_requeued_job_numbers_its_attempts_after_the_restarts_in_place(tmp_path: Path) -> None:
    log = JobPaths(str(tmp_path)).status
    earlier = [
        {"event": "start", "submission": "", "attempt": 0, "components": []},
        {"event": "end", "submission": "", "attempt": 0, "state": "FAILED", "requeue": True, "in_place": True},
        {"event": "start", "submission": "", "attempt": 1, "components": []},
        {"event": "end", "submission": "", "attempt": 1, "state": "TIMEOUT", "requeue": True, "cause": "timeout"},
    ]
    Path(log).write_text("".join(json.dumps(e) + "\n" for e in earlier))
    launcher = FakeLauncher(job_plan("mpi", ("mpi", 1)), tmp_path, {}, restart_count=1)
    Supervisor(job_plan("mpi", ("mpi", 1)), str(tmp_path), launcher, say=lambda text: None).run()
    assert launcher.attempt == 2 and events(tmp_path)[-1]["attempt"] == 2
    assert (tmp_path / "attempts" / "1").is_dir()


def test_the_nodes_start_notes_become_one_running_event_once_every_node_started(tmp_path: Path) -> None:
    from ti_slurm.job.supervisor.records import StartNotes

    said: list[tuple[str, dict[str, Any]]] = []
    notes = StartNotes(str(tmp_path), ["ps-0", "worker-0", "worker-1"], lambda kind, **data: said.append((kind, data)))
    (tmp_path / "ps.0.started").write_text("100.0 100.5\n")
    (tmp_path / "worker.0.started").write_text("100.1 100.7\n")
    (tmp_path / "worker.1.started.tmp.77.n1").write_text("100.2 ")  # being written: not read
    (tmp_path / "ps.0.json").write_text("{}")  # an exit record: not a note
    notes.note(now=False)
    assert said == []  # worker-1 has not started yet
    (tmp_path / "worker.1.started").write_text("100.2 100.6\n")
    notes.looked = 0.0  # as START_LOOK_EVERY later
    notes.note()
    notes.note(now=True)  # once only
    assert said == [("running", {"steps": [100.0, 100.2], "commands": [100.5, 100.7], "last": "worker-0", "all": True})]


def test_an_attempt_that_ends_first_records_what_started(tmp_path: Path) -> None:
    from ti_slurm.job.supervisor.records import StartNotes

    said: list[tuple[str, dict[str, Any]]] = []
    notes = StartNotes(str(tmp_path), ["ddp-0", "ddp-1"], lambda kind, **data: said.append((kind, data)))
    (tmp_path / "ddp.1.started").write_text("5.0 6.0\n")
    notes.note(now=True)
    assert said == [("running", {"steps": [5.0, 5.0], "commands": [6.0, 6.0], "last": "ddp-1", "all": False})]


def test_slurms_commands_are_found_on_the_node_whatever_the_submitting_hosts_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job from slurmrestd brings its client's PATH (a host without Slurm): the supervisor finds ``srun`` in
    the site config's ``slurm_bin_dir`` (else the usual folders) and puts it first on PATH, or says in one line
    what to set."""
    from ti_slurm.job.supervisor import USUAL_SLURM_DIRS, find_slurm_commands

    slurm_bin = tmp_path / "slurm" / "bin"
    slurm_bin.mkdir(parents=True)
    (slurm_bin / "srun").write_text("#!/bin/sh\n")
    (slurm_bin / "srun").chmod(0o755)
    site = tmp_path / "site.toml"
    site.write_text(f'slurm_bin_dir = "{slurm_bin}"\n')
    monkeypatch.setenv("TI_SLURM_CONFIG", str(site))
    environ = {"PATH": "/laptop/bin"}
    assert find_slurm_commands(environ) == ""
    assert environ["PATH"] == f"{slurm_bin}:/laptop/bin"
    assert find_slurm_commands(environ) == "" and environ["PATH"] == f"{slurm_bin}:/laptop/bin"  # found: as it is
    site.write_text(f'slurm_bin_dir = "{tmp_path / "nowhere"}"\n')
    monkeypatch.setattr("ti_slurm.job.supervisor.USUAL_SLURM_DIRS", (str(tmp_path / "usual"),))
    environ = {"PATH": "/laptop/bin"}
    said = find_slurm_commands(environ)
    assert said.startswith("srun is not on this node's PATH ('/laptop/bin', the submitting host's) nor in ")
    assert said.endswith("set slurm_bin_dir in the site config to the folder of Slurm's commands on the nodes")
    assert environ["PATH"] == "/laptop/bin" and USUAL_SLURM_DIRS
