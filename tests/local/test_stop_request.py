"""Stopping a component's steps without signalling srun: the supervisor's stop file, each node step's watcher.

Real processes stand in for srun and for a node's step; the cluster tier shows it on Slurm (PS-Worker's
parameter servers stopped on 22.05 and 25.11, where a SIGTERM to one srun of a heterogeneous job
cancels the whole job).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

from ti_slurm.core.paths import JobPaths
from ti_slurm.job.supervisor.launchers import Launch, SlurmLauncher

# a node's step: watches for its stop request, stops "its command" on SIGTERM taking GRACE seconds,
# then ends as run_node does: 0 when it was stopped on request
NODE_STEP = textwrap.dedent(
    """
    import signal, sys, time
    from ti_slurm.job.watch import watch_stop_request
    path, attempt, grace, out = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    stopped = []
    signal.signal(signal.SIGTERM, lambda *a: stopped.append(time.time()))
    requested = watch_stop_request(path, attempt)
    open(out, "w").write("ready\\n")
    while not stopped:
        time.sleep(0.05)
    time.sleep(grace)  # the command saving, within its grace
    open(out, "a").write("stopped\\n")
    sys.exit(0 if requested.is_set() else 143)
    """
)


def start_step(tmp_path: Path, attempt: str, grace: float = 0.5) -> tuple[subprocess.Popen[bytes], Path]:
    out = tmp_path / f"out-{attempt}"
    stop = JobPaths(str(tmp_path)).stop_request("ps")
    proc = subprocess.Popen([sys.executable, "-c", NODE_STEP, stop, attempt, str(grace), str(out)])
    deadline = time.monotonic() + 20
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc, out


def test_a_stop_request_reaches_the_step_which_ends_0_after_its_grace(tmp_path: Path) -> None:
    step, out = start_step(tmp_path, "0", grace=1.0)
    launcher = SlurmLauncher(str(tmp_path), {"SLURM_RESTART_COUNT": "0"})
    began = time.monotonic()
    launcher.stop(Launch(0, "ps", [0], step), grace=1.0)
    assert step.returncode == 0  # it ended by itself, within its grace: not killed
    assert time.monotonic() - began >= 1.0
    assert out.read_text() == "ready\nstopped\n"
    assert Path(JobPaths(str(tmp_path)).stop_request("ps")).read_text() == "0\n"


def test_an_earlier_attempts_request_stops_nothing(tmp_path: Path) -> None:
    Path(JobPaths(str(tmp_path)).stop_request("ps")).write_text("0\n")
    step, out = start_step(tmp_path, "1")
    time.sleep(0.8)  # several looks at the file
    assert step.poll() is None and out.read_text() == "ready\n"
    SlurmLauncher(str(tmp_path), {"SLURM_RESTART_COUNT": "1"}).stop(Launch(0, "ps", [0], step), grace=0.5)
    assert step.returncode == 0 and out.read_text() == "ready\nstopped\n"


def test_a_step_that_does_not_answer_is_killed_after_the_grace_and_the_margin(tmp_path: Path) -> None:
    deaf = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    launcher = SlurmLauncher(str(tmp_path), {"SLURM_RESTART_COUNT": "0"})
    began = time.monotonic()
    launcher.stop(Launch(0, "ps", [0], deaf), grace=0.5)
    assert deaf.returncode == -9 and 5.0 <= time.monotonic() - began < 15


# srun as Slurm writes it: a shepherd child that, when srun dies without telling it, asks slurmctld to kill
# the step (here: writes the request to a file). On Slurm 25.11 that kill, for a step of a heterogeneous
# job's first component, cancels the whole job.
SRUN_WITH_SHEPHERD = textwrap.dedent(
    """
    import os, sys, time
    asked = sys.argv[1]
    r, w = os.pipe()
    if os.fork() == 0:  # the shepherd
        os.close(w)
        if os.read(r, 1) == b"":  # EOF: srun died unannounced
            time.sleep(0.2)  # the RPC's way to the controller
            open(asked, "w").write("SIGKILL the step\\n")
        os._exit(0)
    os.close(r)
    open(asked + ".ready", "w").write("ready\\n")
    time.sleep(60)  # waiting for a lost node's task
    """
)


def test_an_srun_killed_for_a_lost_node_takes_its_shepherd_first_so_no_step_kill_reaches_slurm(
    tmp_path: Path,
) -> None:
    asked = tmp_path / "step-kill"
    srun = subprocess.Popen([sys.executable, "-c", SRUN_WITH_SHEPHERD, str(asked)])
    deadline = time.monotonic() + 20
    while not Path(f"{asked}.ready").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    launcher = SlurmLauncher(str(tmp_path), {"SLURM_RESTART_COUNT": "0"})
    launcher.stop(Launch(0, "ps", [0, 1], srun), grace=5.0, ended=lambda: True)  # node 1 lost, node 0 done
    assert srun.returncode == -9
    time.sleep(1.0)  # longer than the shepherd takes to ask
    assert not asked.exists()
