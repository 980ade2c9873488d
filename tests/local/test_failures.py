"""A failure named by its cause, through the CLI as users run it (the local backend: every node a process here):
the evidence line with its log and line number, the root among several failed ranks, a user's own bug retried at
most once, a failure nothing explains called unknown; and the nodes a user's jobs avoid (``ti-slurm nodes``)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has 3.19 GiB free."
NCCL = "[rank0]:[E1206 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL"


def submit(tmp_path: Path, command: str, extra: str = "") -> tuple[int, str, dict]:  # type: ignore[type-arg]
    spec = tmp_path / "job.yaml"
    spec.write_text(f"mode: ddp\nnodes: 2\ncommand: {json.dumps(command)}\noutput_dir: {tmp_path / 'out'}\n{extra}")
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    res = run_cli("submit", "--local", "--wait", str(spec), env=env, timeout=180)
    job_id = res.stdout.split()[0]
    status = json.loads(run_cli("status", job_id, "--json", env=env).stdout)
    table = run_cli("status", job_id, env=env).stdout
    return res.returncode, table, status


def test_the_root_cause_is_named_with_its_line_and_the_other_ranks_errors_are_its_consequences(
    tmp_path: Path,
) -> None:
    """Rank 0 prints an NCCL timeout first; rank 1 then runs out of GPU memory and exits: the NCCL error is a
    consequence, the GPU's OOM the cause, on rank 1's node, at the line it printed."""
    command = (
        f'if [ "$INDEX" = 1 ]; then sleep 1; echo step 1; echo step 2; echo "{OOM}"; exit 1; fi; '
        f'echo "{NCCL}"; sleep 30'
    )
    code, table, status = submit(tmp_path, command)
    assert code == 1
    attempt = status["attempts"][-1]
    assert attempt["cause"] == "gpu_oom", attempt
    evidence = attempt["evidence"]
    assert (evidence["log"], evidence["line"], evidence["text"]) == ("logs/ddp-1.log", 3, OOM)
    log = (Path(status["job_dir"]) / "logs" / "ddp-1.log").read_text().splitlines()
    assert log[evidence["line"] - 1] == OOM  # the number points at the line itself
    assert f"  cause: gpu_oom on {evidence['node']}: logs/ddp-1.log:3: {OOM[:60]}" in table, table


def test_a_bug_of_the_users_own_is_retried_once_and_then_stops_saying_so(tmp_path: Path) -> None:
    """``restart: {in_place: 3, on: [failure]}``: a typo fails the same way each time; it runs twice, not four
    times."""
    marker = tmp_path / "runs"
    command = f'echo run >> {marker}.$INDEX; python3 -c "import no_such_module_here"'
    code, table, status = submit(tmp_path, command, "restart: {in_place: 3, on: [failure]}\n")
    assert code == 1
    assert [a["cause"] for a in status["attempts"]] == ["user_error", "user_error"]
    assert status["attempts"][0]["evidence"]["text"] == "ModuleNotFoundError: No module named 'no_such_module_here'"
    assert "user_error twice in a row" in status["reason"]
    assert Path(f"{marker}.0").read_text().count("run") == 2
    assert "  cause: user_error on " in table and ": ModuleNotFoundError: No module named" in table


def test_an_infrastructure_cause_restarts_as_restart_allows(tmp_path: Path) -> None:
    """A GPU fault is no bug of the command: with in-place restarts it is tried again, up to the limit."""
    command = 'echo "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."; exit 1'
    code, _, status = submit(tmp_path, command, "restart: {in_place: 2, on: [failure]}\n")
    assert code == 1 and [a["cause"] for a in status["attempts"]] == ["gpu_fault"] * 3


def test_a_failure_nothing_explains_is_unknown(tmp_path: Path) -> None:
    code, table, status = submit(tmp_path, 'echo "epoch 1 done"; exit 3')
    assert code == 1 and status["attempts"][-1]["cause"] == "unknown" and status["attempts"][-1]["evidence"] == {}
    assert "  cause: unknown" in table


def test_nodes_lists_what_your_jobs_avoid_and_release_ends_one(tmp_path: Path) -> None:
    """The list a job's failure fills (here written as ti-slurm writes it), shown and released by the CLI."""
    state = tmp_path / "state"
    (state / "ti-slurm" / "avoided").mkdir(parents=True, mode=0o700)
    now = time.time()
    entries = [
        {"node": "node07", "cause": "gpu_fault", "job": "4242", "cluster": "", "key": "4242/0/node07",
         "since": now - 7200, "until": now + 3600, "line": "gpu_fault in job 4242"},
        {"node": "node09", "cause": "launch", "job": "4243", "cluster": "", "key": "4243/0/node09",
         "since": now - 90000, "until": now - 3600, "line": "launch in job 4243"},  # expired
    ]  # fmt: skip
    (state / "ti-slurm" / "avoided" / "nodes.json").write_text(json.dumps(entries))
    env = {"XDG_STATE_HOME": str(state)}
    shown = run_cli("nodes", env=env)
    assert shown.returncode == 0 and shown.stdout.splitlines()[0].split() == ["NODE", "CLUSTER", "CAUSE", "JOB",
                                                                             "AVOIDED", "UNTIL"]  # fmt: skip
    assert shown.stdout.splitlines()[1].split()[:4] == ["node07", "-", "gpu_fault", "4242"]
    assert "node09" not in shown.stdout
    assert [e["node"] for e in json.loads(run_cli("nodes", "--json", env=env).stdout)] == ["node07"]
    refused = run_cli("nodes", "--release", "node09", env=env)
    assert refused.returncode == 2 and "--release: 'node09': your jobs do not avoid this node" in refused.stderr
    released = run_cli("nodes", "--release", "node07", env=env)
    assert released.returncode == 0 and "may use node07 again" in released.stderr
    assert "avoid no node" in run_cli("nodes", env=env).stderr


@pytest.mark.parametrize("partition_nodes", [4, 8, None])
def test_never_more_than_a_quarter_of_a_partition_is_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, partition_nodes: int | None
) -> None:
    from ti_slurm.follow.status import AttemptStatus
    from ti_slurm.submitting.avoided import note_blamed, read_avoided, to_avoid

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    now = time.time()
    attempts = [AttemptStatus(k, ended=now - 60 + k, cause="gpu_fault", evidence={"node": f"n{k}"}) for k in range(3)]
    note_blamed("77", "gpu", attempts, now)
    note_blamed("77", "gpu", attempts, now)  # read again: remembered once
    assert [e["node"] for e in read_avoided(now)] == ["n2", "n1", "n0"]  # newest first
    most = {4: 1, 8: 2, None: 3}[partition_nodes]
    assert [e["node"] for e in to_avoid("gpu", partition_nodes, now)] == ["n2", "n1", "n0"][:most]
    assert to_avoid("other", partition_nodes, now) == []  # another cluster's nodes are not this one's
    assert read_avoided(now + 25 * 3600) == []  # a day later: expired


def test_a_rank_that_stops_stepping_while_it_prints_is_hung_a_minute_later(tmp_path: Path) -> None:
    """``watchdog: {progress: true}``: rank 1 steps every half second, then stops while it keeps printing (a
    collective that never returns): called hung about 60 s after its last step (not after NCCL's 30 minutes),
    that rank named, its stacks in its log."""
    command = "python3 -m ti_slurm.admin.rehearse stall --rank 1 --after 5 --every 0.5"
    started = time.monotonic()
    code, table, status = submit(tmp_path, command, "watchdog: {progress: true}\n")
    took = time.monotonic() - started
    attempt = status["attempts"][-1]
    assert code == 1 and attempt["cause"] == "hang", status["reason"]
    assert attempt["evidence"]["node"] == status["components"][0]["nodes"][1]
    assert "no step for 6" in status["reason"] and "after step 10" in status["reason"], status["reason"]
    assert 60 < took < 90, took
    log = (Path(status["job_dir"]) / "logs" / "ddp-1.log").read_text()
    assert "waiting for the allreduce" in log and ("Current thread" in log or "Thread 0x" in log)
    assert "  cause: hang on " in table
    # every node's stacks, grouped: the hung rank's stands out (its own group, first, named)
    said = (Path(status["job_dir"]) / "supervisor.log").read_text()
    block = said[said.index("the Python stacks of 2 node(s) at the hang, grouped (2 different)") :]
    groups = [line for line in block.splitlines() if " node(s): " in line]
    assert groups[0].endswith("(ddp 1) (stopped stepping first)") and groups[1].endswith("(ddp 0)"), block
    assert "rehearse.py" in block and " in fail" in block and " in main" in block, block


def test_where_a_jobs_time_went_is_in_status_and_list_goodput(tmp_path: Path) -> None:
    """A job that reports its steps, restarted in place once after a GPU fault: its time splits into queued,
    starting, productive, lost and recomputed in ``status``, ``--json`` and ``list --goodput``."""
    command = (
        'if [ "$TI_SLURM_RESTART_COUNT" = 0 ]; then exec python3 -m ti_slurm.admin.rehearse gpu_fault --rank 1'
        " --after 3 --every 0.5; fi; python3 -m ti_slurm.admin.rehearse exit --rank 9 --steps 2 --every 0.5"
    )
    code, table, status = submit(tmp_path, command, "restart: {in_place: 1, on: [failure]}\n")
    assert code == 0, status["reason"]
    spent = status["goodput"]
    assert spent["productive"] > 1.0 and spent["lost"] > 0.0 and spent["starting"] > 0.0, spent
    buckets = sum(spent[k] for k in ("queued", "starting", "productive", "lost", "recomputed"))
    assert abs(buckets - spent["wall"]) < 2.0 and 0 < spent["effective"] <= 1, spent
    assert status["attempts"][0]["progress"]["last"] >= "5" and status["attempts"][1]["progress"]["first"] == "1"
    assert "  time: " in table and "productive" in table and "effective" in table
    listed = run_cli("list", "--goodput", env={"XDG_STATE_HOME": str(tmp_path / "state")}).stdout
    assert "1 job(s): time: " in listed and ", lost " in listed, listed


def test_attempts_that_get_no_further_stop_after_three(tmp_path: Path) -> None:
    """Each attempt steps to 4 and fails the same way: with five restarts allowed, the fourth attempt (the third
    that got no further than the first) is the last, saying so."""
    command = "python3 -m ti_slurm.admin.rehearse gpu_fault --rank 1 --after 2 --steps 2 --every 0.5"
    code, _, status = submit(tmp_path, command, "restart: {in_place: 5, on: [failure]}\n")
    assert code == 1 and len(status["attempts"]) == 4, [a["progress"] for a in status["attempts"]]
    last = status["attempts"][0]["progress"]["last"]
    assert f"not restarted: no progress in 3 attempts (last step {last})" in status["reason"], status["reason"]


def test_a_rank_stepping_40_percent_slower_for_the_window_is_a_straggler_warning(tmp_path: Path) -> None:
    """``watchdog: {progress: true, straggler: 15}``: rank 1 steps 40% slower after 2 s; once it has been slower
    for the whole window it is named in one warning event (status, --json), and the job goes on to its end."""
    command = "python3 -m ti_slurm.admin.rehearse slow --rank 1 --after 2 --steps 30 --every 0.5 --slower 0.4"
    code, table, status = submit(tmp_path, command, "watchdog: {progress: true, straggler: 15}\n")
    assert code == 0 and status["state"] == "COMPLETED", status["reason"]
    node = status["components"][0]["nodes"][1]
    [slow] = status["stragglers"]
    assert slow["node"] == f"{node} (ddp 1)" and slow["attempt"] == 0 and slow["window"] == 15
    assert 1.25 < slow["seconds_a_step"] / slow["others"] < 1.6, slow
    assert f"  straggler: node {node} (ddp 1) took " in table


def test_a_training_that_reports_only_tensorboard_steps_is_hung_a_minute_after_its_last(tmp_path: Path) -> None:
    """``watchdog: {progress: true}`` and a command that writes its step and loss only as TensorBoard scalars (no
    progress file): its steps stop while it prints on, and the supervisor calls the job hung 60-90 s after the last
    one, every node's stacks grouped in its log. (The supervisor looks at the files every 5 s: 16 s of steps let it
    learn their pace.)"""
    command = "python3 -m ti_slurm.admin.rehearse stall --rank 0 --after 16 --every 0.5 --report tensorboard"
    started = time.monotonic()
    code, table, status = submit(tmp_path, command, "watchdog: {progress: true}\n")
    took = time.monotonic() - started
    attempt = status["attempts"][-1]
    assert code == 1 and attempt["cause"] == "hang" and "  cause: hang" in table, status["reason"]
    assert "no TensorBoard step for 6" in status["reason"] and "after step 3" in status["reason"], status["reason"]
    assert 16 + 60 < took < 16 + 90, took
    said = (Path(status["job_dir"]) / "supervisor.log").read_text()
    assert "the Python stacks of 2 node(s) at the hang, grouped (2 different)" in said, said
    assert not list((Path(status["job_dir"]) / "heartbeat").glob("*.progress"))  # TensorBoard alone told


def test_a_nan_loss_in_tensorboard_stops_the_job_with_nan_and_its_step(tmp_path: Path) -> None:
    """A training that writes a NaN loss to TensorBoard and goes on (it checks nothing): stopped within seconds,
    ``nan`` with the step and the tag; a user's own cause, so ``restart: {in_place: 2, on: [failure]}`` runs it
    twice (the second attempt's watchdog reads the first's NaN as history, not as its own)."""
    command = "python3 -m ti_slurm.admin.rehearse nan --rank 0 --after 3 --every 0.5 --report tensorboard"
    policy = "watchdog: {progress: true}\nrestart: {in_place: 2, on: [failure]}\n"
    code, table, status = submit(tmp_path, command, policy)
    assert code == 1 and [a["cause"] for a in status["attempts"]] == ["nan", "nan"], status["reason"]
    assert "the loss is nan at step " in status["reason"] and "(TensorBoard tag train/loss)" in status["reason"]
    assert "cause: nan" in table
