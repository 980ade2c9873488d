"""The checkpoint contract and the watchdog on the local runner, with real processes (the cluster tier
shows requeues on real Slurm)."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

import pytest

import ti_slurm
from tests.conftest import api_spec as spec
from tests.conftest import processes_matching, run_cli
from ti_slurm import JobState

pytestmark = pytest.mark.usefixtures("own_registry")


def test_every_node_sees_the_checkpoint_contract(tmp_path: Path) -> None:
    command = (
        'echo "$TI_SLURM_RESTART_COUNT $TI_SLURM_CHECKPOINT_SIGNAL $TI_SLURM_CHECKPOINT_DIR $TI_SLURM_HEARTBEAT_FILE"'
    )
    job = ti_slurm.submit(spec(tmp_path, mode="ddp", nodes=2, command=command, restart={"max": 2}), backend="local")
    assert job.wait(timeout=60).state is JobState.COMPLETED
    for n in (0, 1):
        count, name, folder, heartbeat = next(iter(job.logs(node=str(n)))).split()
        assert (count, name, folder) == ("0", "USR2", f"{job.job_dir}/checkpoint")
        assert heartbeat == f"{job.job_dir}/heartbeat/ddp-{n}" and Path(folder).is_dir()


def test_a_silent_command_is_stopped_as_hung_and_a_heartbeat_keeps_one_alive(tmp_path: Path) -> None:
    marker = f"sleep 6{uuid.uuid4().int % 1000:03d}"
    beating = "for i in $(seq 14); do touch $TI_SLURM_HEARTBEAT_FILE; sleep 1; done; echo done"
    command = f"if [ $RANK = 1 ]; then echo going quiet; {marker}; else {beating}; fi"
    started = time.monotonic()
    job = ti_slurm.submit(
        spec(tmp_path, mode="ddp", nodes=2, command=command, watchdog={"silence": 10}), backend="local"
    )
    final = job.wait(timeout=60)
    said = "HUNG: node(s) localhost printed nothing for 10 s (watchdog silence 10 s)"
    assert final.state is JobState.FAILED and final.reason == said and final.attempts[-1].cause == "hang"
    assert final.failed["index"] == 1 and time.monotonic() - started < 10 + 8
    assert "hung: printed nothing for 10 s" in "\n".join(job.logs(node="1"))
    assert processes_matching(marker) == []
    # the node that touched its heartbeat file was not hung: it ran until the job was stopped
    assert "done" not in list(job.logs(node="0"))


def test_the_signal_reaches_the_whole_process_tree_of_every_node(tmp_path: Path) -> None:
    """Including processes in sessions of their own (torch's launcher starts its workers so)."""
    marker = f"sleep 5{uuid.uuid4().int % 1000:03d}"
    child = f"trap 'echo child saved; exit 0' USR2; {marker} & wait"
    command = f"trap 'echo parent saved' USR2; setsid bash -c \"{child}\" & wait; wait"
    job = ti_slurm.submit(spec(tmp_path, mode="ddp", nodes=2, command=command, restart={"max": 1}), backend="local")
    deadline = time.monotonic() + 30
    # the sleeps themselves (not the shells whose command lines name them): both traps are set by then
    while len(processes_matching(f"^{marker}$")) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    supervisor = int((Path(job.job_dir) / "supervisor.pid").read_text().split()[0])
    os.kill(supervisor, signal.SIGUSR2)  # as Slurm's --signal=B:USR2 does to the batch step
    final = job.wait(timeout=60)
    assert final.state is JobState.TIMEOUT and final.reason.endswith("a local run is not requeued")
    for n in ("0", "1"):
        lines = list(job.logs(node=n))
        assert "child saved" in lines and "parent saved" in lines
    assert processes_matching(marker) == []


def test_logs_of_an_attempt_the_job_never_had_is_one_line(tmp_path: Path) -> None:
    job = ti_slurm.submit(spec(tmp_path, mode="ddp", nodes=1, command="echo hi"), backend="local")
    assert job.wait(timeout=60).state is JobState.COMPLETED
    res = run_cli("logs", job.id, "--attempt", "3")
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr == f"ti-slurm: error: attempt: 3: job {job.id} has no such attempt (attempts: 0)\n"
