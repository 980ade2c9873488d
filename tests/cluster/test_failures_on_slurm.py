"""Failures named by their cause on the test cluster: each fault injected on one rank of a 2-node job
(``python3 -m ti_slurm.admin.rehearse``, or a node's slurmd refused), read back through the CLI as users read it;
the decision that follows the cause, and the blamed node left out of the next attempt and of the user's next
jobs until released."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli, slurm_version

pytestmark = pytest.mark.usefixtures("cluster")
CLUSTER = Path(__file__).resolve().parents[2] / "ci" / "slurm-cluster"


def submit(tmp_path: Path, command: str, *extra: str, nodes: int = 2, wait: bool = True) -> tuple[str, dict]:  # type: ignore[type-arg]
    """Submit a DDP job through the CLI (with ``--wait``); its id and its ``status --json``."""
    spec = tmp_path / "job.yaml"
    lines = [f"mode: ddp\nnodes: {nodes}\ncommand: {json.dumps(command)}\noutput_dir: {tmp_path / 'out'}", *extra]
    spec.write_text("\n".join(lines) + "\n")
    res = run_cli("submit", *(["--wait"] if wait else []), str(spec), env=state(tmp_path), timeout=300)
    job_id = res.stdout.split()[0]
    return job_id, status_of(tmp_path, job_id)


def state(tmp_path: Path) -> dict[str, str]:
    return {"XDG_STATE_HOME": str(tmp_path / "state")}  # the user's registry and avoided nodes: this test's own


def status_of(tmp_path: Path, job_id: str) -> dict:  # type: ignore[type-arg]
    return json.loads(run_cli("status", job_id, "--json", env=state(tmp_path)).stdout)


def rehearse(fault: str, *more: str) -> str:
    return f"python3 -m ti_slurm.admin.rehearse {fault} --rank 1 --after 2 {' '.join(more)}".strip()


@pytest.mark.parametrize(
    ("fault", "cause", "said"),
    [
        ("user_error", "user_error", "ModuleNotFoundError: No module named 'ti_slurm_rehearsal_no_such_module'"),
        ("filesystem", "filesystem", "OSError: [Errno 28] No space left on device"),
        ("nan", "nan", "step 1: loss nan"),
        ("gpu_fault", "gpu_fault", "GPU has fallen off the bus."),
        ("gpu_oom", "gpu_oom", "torch.OutOfMemoryError: CUDA out of memory."),
        ("nccl", "nccl", "Watchdog caught collective operation timeout"),
        ("host_oom", "host_oom", "Some of the step tasks have been OOM Killed."),
        ("exit", "unknown", ""),
    ],
)
def test_each_injected_fault_is_named_with_the_node_and_line_that_show_it(
    tmp_path: Path, fault: str, cause: str, said: str
) -> None:
    job_id, status = submit(tmp_path, rehearse(fault))
    attempt = status["attempts"][-1]
    assert status["state"] == "FAILED" and attempt["cause"] == cause, (attempt, status["reason"])
    rank1 = status["components"][0]["nodes"][1]
    table = run_cli("status", job_id, env=state(tmp_path)).stdout
    if cause == "unknown":
        assert attempt["evidence"] == {} and "  cause: unknown" in table
        return
    evidence = attempt["evidence"]
    assert evidence["node"] == rank1 and evidence["log"] == "logs/ddp-1.log" and said in evidence["text"], evidence
    log = (Path(status["job_dir"]) / evidence["log"]).read_text().splitlines()
    assert said in log[evidence["line"] - 1]  # the line number points at it
    assert f"  cause: {cause} on {rank1}: logs/ddp-1.log:{evidence['line']}: " in table, table


def test_a_hang_is_named_with_the_silent_node(tmp_path: Path) -> None:
    _, status = submit(tmp_path, rehearse("hang"), "watchdog: {silence: 10}")
    attempt = status["attempts"][-1]
    assert attempt["cause"] == "hang" and status["components"][0]["nodes"][1] in status["reason"], status["reason"]


def test_a_users_own_bug_with_three_restarts_runs_twice(tmp_path: Path) -> None:
    _, status = submit(tmp_path, rehearse("user_error", "--after 0"), "restart: {max: 3, on: [failure]}")
    assert [a["cause"] for a in status["attempts"]] == ["user_error", "user_error"], status["attempts"]
    assert status["state"] == "FAILED" and "user_error twice in a row" in status["reason"]


def test_a_gpu_fault_keeps_its_node_out_of_the_next_attempt_and_of_the_users_next_jobs(tmp_path: Path) -> None:
    """Rank 1's GPU falls off the bus in the first attempt: the requeued attempt runs without that node; so do
    the user's next three jobs (each says so); ``nodes`` lists it; once released, a job may use it again."""
    command = '[ "$TI_SLURM_RESTART_COUNT" = 0 ] && exec ' + rehearse("gpu_fault") + "; echo second attempt"
    job_id, status = submit(tmp_path, command, "restart: {max: 1, on: [failure]}")
    first, second = status["attempts"]
    bad = first["evidence"]["node"]
    assert (first["cause"], status["state"]) == ("gpu_fault", "COMPLETED") and bad == first["nodes"][1]
    assert bad not in second["nodes"], (bad, second["nodes"])
    listed = run_cli("nodes", "--json", env=state(tmp_path)).stdout
    assert [(e["node"], e["cause"], e["job"]) for e in json.loads(listed)] == [(bad, "gpu_fault", job_id)]
    for k in range(3):  # the partition has 4 nodes: a quarter of it (this one) is left out
        (tmp_path / f"next{k}").mkdir()
        spec = tmp_path / f"next{k}" / "job.yaml"
        spec.write_text(f"mode: ddp\nnodes: 3\ncommand: hostname\noutput_dir: {tmp_path / f'next{k}'}\n")
        res = run_cli("submit", "--wait", str(spec), env=state(tmp_path), timeout=300)
        assert res.returncode == 0 and f"ti-slurm: leaving out {bad}: gpu_fault in job {job_id}" in res.stderr
        nodes = status_of(tmp_path, res.stdout.split()[0])["components"][0]["nodes"]
        assert bad not in nodes and len(nodes) == 3
    assert run_cli("nodes", "--release", bad, env=state(tmp_path)).returncode == 0
    spec = tmp_path / "next0" / "job.yaml"
    res = run_cli("submit", str(spec), env=state(tmp_path))
    shown = subprocess.run(["scontrol", "-o", "show", "job", res.stdout.split()[0]], capture_output=True, text=True)
    assert "leaving out" not in res.stderr and f"ExcNodeList={bad}" not in shown.stdout


def one_version() -> None:
    """The watchdog's job path is the same on both versions: shown once, on 22.05 (25.11's tier is the long pole
    of CI; the injected faults above run on both)."""
    if slurm_version() >= (25, 11):
        pytest.skip("shown on Slurm 22.05: the same job path, and 25.11's tier is CI's long pole")


def test_a_rank_that_stops_stepping_is_hung_within_90_s_and_every_ranks_stacks_are_grouped(tmp_path: Path) -> None:
    """A 2-node job stepping every 2 s (rank 0's steps also as TensorBoard scalars) whose rank 1 stops stepping
    while alive and printing: called hung within 90 s of its last step, rank 1's node named, and the stacks of both
    ranks grouped in the job's log, rank 1's apart and first."""
    one_version()
    command = rehearse("stall", "--every 2 --report both").replace("--after 2", "--after 9")
    job_id, status = submit(tmp_path, command, "watchdog: {progress: true}")
    attempt = status["attempts"][-1]
    rank1 = status["components"][0]["nodes"][1]
    assert attempt["cause"] == "hang" and attempt["evidence"]["node"] == rank1, status["reason"]
    last_step = (Path(status["job_dir"]) / "heartbeat" / "ddp-1.progress").stat().st_mtime
    assert 60 <= attempt["ended"] - last_step <= 90, attempt["ended"] - last_step
    said = (tmp_path / "out" / f"slurm-{job_id}.out").read_text()
    block = said[said.index("the Python stacks of 2 node(s) at the hang, grouped (2 different)") :]
    groups = [line for line in block.splitlines() if " node(s): " in line]
    assert groups[0].endswith(f"{rank1} (ddp 1) (stopped stepping first)") and "(ddp 0)" in groups[1], block


def test_a_rank_40_percent_slower_for_the_window_is_a_straggler_and_the_job_goes_on(tmp_path: Path) -> None:
    one_version()
    command = rehearse("slow", "--steps 36 --every 0.5 --slower 0.4")
    job_id, status = submit(tmp_path, command, "watchdog: {progress: true, straggler: 20}")
    rank1 = status["components"][0]["nodes"][1]
    assert status["state"] == "COMPLETED" and [s["node"] for s in status["stragglers"]] == [f"{rank1} (ddp 1)"]
    assert f"  straggler: node {rank1} (ddp 1) took " in run_cli("status", job_id, env=state(tmp_path)).stdout


def test_a_nan_loss_written_to_tensorboard_stops_the_job_with_nan_and_its_step(tmp_path: Path) -> None:
    one_version()
    command = rehearse("nan", "--report tensorboard").replace("--rank 1", "--rank 0")
    _, status = submit(tmp_path, command, "watchdog: {progress: true}")
    attempt = status["attempts"][-1]
    assert (status["state"], attempt["cause"]) == ("FAILED", "nan"), status["reason"]
    assert "the loss is nan at step " in status["reason"] and "TensorBoard tag train/loss" in status["reason"]


def rank1_node_faulted(
    tmp_path: Path, job_id: str, fault: str, watched: Path, text: str = "step 3 "
) -> tuple[subprocess.CompletedProcess[str], str]:
    """Once ``watched`` holds ``text``, ``ci/slurm-cluster/node FAULT`` rank 1's node, follow the job to its end
    (``ti-slurm wait``) and bring the node back; wait's answer and the node."""
    deadline = time.monotonic() + 120
    while not (watched.exists() and text in watched.read_text()) and time.monotonic() < deadline:
        time.sleep(0.25)
    node = status_of(tmp_path, job_id)["components"][0]["nodes"][1]
    subprocess.run([str(CLUSTER / "node"), fault, node], check=True)
    try:
        return run_cli("wait", job_id, env=state(tmp_path), timeout=600), node
    finally:
        subprocess.run([str(CLUSTER / "node"), "revive", node], check=True)


TRAINING = """\
import os, signal, sys, time
folder, total = sys.argv[1], int(sys.argv[2])
rank, attempt = int(os.environ["RANK"]), os.environ["TI_SLURM_RESTART_COUNT"]
saved = os.path.join(os.environ["TI_SLURM_CHECKPOINT_DIR"], "step")
marks = open(os.path.join(folder, f"marks-{rank}"), "a")
marks.write(f"start {attempt} {time.time():.3f}\\n")
step = int(open(saved).read()) if os.path.exists(saved) else 0
total = step + 10 if attempt == "2" else total  # the third attempt finishes the run
stop = []
signal.signal(signal.SIGUSR2, lambda *_: stop.append(1))
while step < total and not stop:
    time.sleep(0.5)
    step += 1
    with open(os.environ["TI_SLURM_PROGRESS_FILE"], "w") as fh:
        fh.write(f"{step}\\n")
    if rank == 0:
        with open(saved + ".new", "w") as fh:
            fh.write(str(step))
        os.replace(saved + ".new", saved)
    marks.write(f"step {attempt} {step} {time.time():.3f}\\n")
    marks.flush()
marks.write(f"end {attempt} {time.time():.3f}\\n")
"""


def timeline(folder: Path) -> dict[str, dict[str, float]]:
    """Per attempt, from the command's own marks on every rank: its start, first step, last step and end (times),
    and its first and last step's numbers."""
    seen: dict[str, dict[str, float]] = {}
    for path in folder.glob("marks-*"):
        for line in path.read_text().splitlines():
            kind, attempt, *rest = line.split()
            at, got = float(rest[-1]), seen.setdefault(attempt, {})
            for key, keep in {"start": min, "end": max}.items():
                if kind == key:
                    got[key] = keep(got.get(key, at), at)
            if kind == "step":
                got["first"], got["last"] = min(got.get("first", at), at), max(got.get("last", at), at)
                step = float(rest[0])
                got["first_step"] = min(got.get("first_step", step), step)
                got["last_step"] = max(got.get("last_step", step), step)
    return seen


def test_the_time_of_a_job_that_lost_a_node_and_met_its_time_limit_is_split_as_it_went(
    tmp_path: Path, island: object
) -> None:
    """A 2-node job whose rank 1's node is killed in its first attempt (Slurm declares it down after
    SlurmdTimeout) and whose second attempt meets its 2-minute time limit (it saves on the signal), then completes:
    each bucket of ``status``'s time line (queued, starting, productive, lost, recomputed) against the timeline
    the command itself wrote (its steps, its end) and each attempt's start, within 2 s."""
    one_version()
    (tmp_path / "train.py").write_text(TRAINING)
    lines = [f"partition: {island.name}", "time: 2", "signal: {name: USR2, before: 30}",  # type: ignore[attr-defined]
             "restart: {max: 3}", f"workdir: {tmp_path}"]  # fmt: skip
    submitted = time.time()
    job_id, status = submit(tmp_path, f"python3 train.py {tmp_path} 100000", *lines, wait=False)
    accepted = time.time()  # Slurm took it while the CLI ran (seconds on a loaded machine): between the two
    res, _ = rank1_node_faulted(tmp_path, job_id, "kill", tmp_path / "marks-1", "step 0 8 ")
    status = status_of(tmp_path, job_id)
    shown = [(a["state"], a["cause"]) for a in status["attempts"]]
    assert res.returncode == 0 and shown == [("NODE_FAIL", "node_fail"), ("TIMEOUT", "timeout"), ("COMPLETED", "")]
    went, marked = status["goodput"], timeline(tmp_path)
    a0, a1, a2 = (marked[k] for k in ("0", "1", "2"))
    # each attempt began when Slurm started it (its record's start: the command starts after its step launched
    # and passed its preflight, seconds later on a loaded machine); its steps and end are the command's own
    s0, s1, s2 = (float(a["started"]) for a in status["attempts"])
    # steps done again: an attempt resumes from the last step saved, which may be behind the last step done
    redone = sum(max(0.0, b["last_step"] - a["first_step"] + 1) * 0.5 for b, a in ((a0, a1), (a1, a2)))
    expected = {
        "queued": min(max(went["queued"], s0 - accepted), s0 - submitted),
        "starting": sum(a["first"] - s for a, s in ((a0, s0), (a1, s1), (a2, s2))),
        "productive": (a0["last"] - a0["first"]) + (a1["last"] - a1["first"]) + (a2["end"] - a2["first"]) - redone,
        "lost": (s1 - a0["last"]) + (s2 - a1["last"]),
        "recomputed": redone,
    }
    off = {k: round(went[k] - v, 2) for k, v in expected.items()}
    print(f"goodput against the command's own timeline (s): {off}")
    assert all(abs(d) <= 2 for d in off.values()), (off, went, expected)
    assert "time: " in run_cli("status", job_id, env=state(tmp_path)).stdout


def test_a_frozen_node_is_a_node_fail_left_out_of_the_next_attempt(tmp_path: Path, island: object) -> None:
    """Every process of rank 1's node stopped (its slurmd too: alive, answering nothing): Slurm declares it down,
    the attempt ends ``node_fail`` naming it, and the requeued attempt runs without it."""
    one_version()
    command = "python3 -m ti_slurm.admin.rehearse exit --rank 9 --steps 20"  # both ranks step 20 s and end well
    lines = [f"partition: {island.name}", "restart: {max: 1}"]  # type: ignore[attr-defined]
    job_id, _ = submit(tmp_path, command, *lines, wait=False)
    res, frozen = rank1_node_faulted(tmp_path, job_id, "freeze", tmp_path / "out" / job_id / "logs" / "ddp-1.log")
    first, second = status_of(tmp_path, job_id)["attempts"]
    assert res.returncode == 0 and (first["cause"], first["lost_nodes"]) == ("node_fail", [frozen]), first
    assert frozen not in second["nodes"] and second["state"] == "COMPLETED"
