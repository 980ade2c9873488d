"""Sweeps on the real cluster, through the CLI and YAML files on disk: a job array kept to --max-parallel,
each point's values reaching its training, a failed point shown as such, a restart that requeues one point
only, a heterogeneous mode's sweep as throttled jobs and its cancel, a pipeline after a whole sweep, and a
grid too large for the cluster's MaxArraySize."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import ti_slurm
from tests.cluster.conftest import Island
from tests.conftest import run_cli
from tests.docs import doc_block
from ti_slurm import JobState

pytestmark = pytest.mark.usefixtures("cluster", "own_registry")  # ids may repeat across test clusters

TRAIN = """\
import json, os, sys, time
import torch
import torch.distributed as dist
lr = sys.argv[sys.argv.index("--lr") + 1]
point, rank = os.environ["TI_SLURM_SWEEP_POINT"], os.environ["RANK"]
start = time.time()
dist.init_process_group("gloo")  # a real DDP rendezvous per point: MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK
total = torch.tensor([len(lr) + int(rank)])
dist.all_reduce(total)  # both ranks of the point agree on what they were given
dist.destroy_process_group()
time.sleep(3)
with open(f"marks/{point}-{rank}.json", "w") as out:
    json.dump({"lr": lr, "env": os.environ["TI_SLURM_PARAM_LR"], "params": json.loads(os.environ["TI_SLURM_PARAMS"]),
               "world": os.environ["WORLD_SIZE"], "sum": int(total), "start": start, "end": time.time()}, out)
fail_once = lr == "flaky" and os.environ["TI_SLURM_RESTART_COUNT"] == "0"
if (lr == "bad" and rank == "1") or fail_once:
    time.sleep(1)  # after the other rank's mark is written: a failed rank stops the others
    sys.exit(3)
"""


def write_job(folder: Path, partition: str, nodes: int = 2, extra: str = "") -> None:
    (folder / "marks").mkdir()
    (folder / "train.py").write_text(TRAIN)
    (folder / "job.yaml").write_text(
        f"name: lr-sweep\nmode: ddp\nnodes: {nodes}\npartition: {partition}\n"
        f"command: python3 train.py --lr {{lr}} --batch {{batch}}\n{extra}"
    )


def most_at_once(marks: list[dict[str, float]]) -> int:
    return max(sum(1 for m in marks if m["start"] <= t < m["end"]) for t in (m["start"] for m in marks))


def test_a_six_point_sweep_of_a_two_node_ddp_job_keeps_to_max_parallel(tmp_path: Path, island: Island) -> None:
    write_job(tmp_path, island.name)  # the island's 4 nodes of 4 CPUs could run all 6 points at once
    args = ("--param", "lr=0.1,bad,0.001", "--param", "batch=32,64", "--max-parallel", "2", "--wait")
    res = run_cli("sweep", "job.yaml", *args, cwd=tmp_path)
    assert res.returncode == 1, res.stderr  # points failed: the sweep did not succeed
    sweep = res.stdout.strip()
    assert sweep.isdigit() and "6 points as one job array" in res.stderr, res.stderr
    marks = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "marks").iterdir()}
    assert len(marks) == 12  # 6 points x 2 nodes
    lrs = ["0.1", "0.1", "bad", "bad", "0.001", "0.001"]
    for k, lr in enumerate(lrs):
        for rank in "01":
            mark = marks[f"{k}-{rank}"]
            assert (mark["lr"], mark["env"], mark["world"]) == (lr, lr, "2"), mark
            assert mark["params"] == {"lr": lr, "batch": ("32", "64")[k % 2]}
            assert mark["sum"] == 2 * len(lr) + 1  # the all-reduce over the point's own two ranks
    assert most_at_once([m for name, m in marks.items() if name.endswith("-0")]) == 2
    table = run_cli("status", sweep, cwd=tmp_path).stdout
    assert table.splitlines()[0] == f"sweep {sweep}  lr-sweep  6 points: 4 COMPLETED, 2 FAILED", table
    for line in table.splitlines()[2:]:
        point, job, lr, _batch, state, *why = line.split()
        assert job == f"{sweep}_{point}" and lr == lrs[int(point)]
        if lr == "bad":
            assert state == "FAILED" and " ".join(why).startswith("ddp node node") and "(index 1) exited 3" in line
        else:
            assert state == "COMPLETED", line
    listed = [line for line in run_cli("list", cwd=tmp_path).stdout.splitlines() if line.startswith(sweep)]
    assert [line.split(None, 3) for line in listed] == [[sweep, "lr-sweep", "SWEEP", "6 points: 4 COMPLETED, 2 FAILED"]]
    logs = run_cli("logs", f"{sweep}_2", "--node", "1", cwd=tmp_path)
    assert logs.returncode == 0 and (tmp_path / "ti-slurm-jobs" / f"slurm-{sweep}_2.out").exists()


def test_a_restart_requeues_only_the_point_that_failed(tmp_path: Path, island: Island) -> None:
    write_job(tmp_path, island.name, nodes=1, extra="restart: {max: 1, on: [failure]}\n")
    res = run_cli("sweep", "job.yaml", "--param", "lr=1,flaky,3", "--param", "batch=8", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    sweep = ti_slurm.get_sweep(res.stdout.strip())
    assert sweep is not None
    final = sweep.wait(timeout=240)
    assert [p.status.state for p in final.points] == [JobState.COMPLETED] * 3
    attempts = [len(p.status.attempts) for p in final.points]
    assert attempts == [1, 2, 1], final.points  # the flaky point's task alone went through the queue again
    assert "requeued" in final.points[1].status.attempts[0].reason or final.points[1].status.attempts[0].requeued


def test_a_ps_worker_sweep_is_a_chain_of_jobs_and_cancel_stops_them_all(tmp_path: Path, island: Island) -> None:
    (tmp_path / "ps.yaml").write_text(
        f"name: ps-sweep\nmode: ps-worker\npartition: {island.name}\nps: {{nodes: 1}}\nworker: {{nodes: 1}}\n"
        "command: 'sleep 120  # lr={lr}'\n"
    )
    res = run_cli("sweep", "ps.yaml", "--param", "lr=1,2,3", "--max-parallel", "1", cwd=tmp_path)
    assert res.returncode == 0 and "3 points as a job per point" in res.stderr, res.stderr
    sweep_id = res.stdout.strip()
    sweep = ti_slurm.get_sweep(sweep_id)
    assert sweep_id.startswith("sweep-") and sweep is not None
    jobs = [job.id for job in sweep.jobs()]
    queue = subprocess.run(["squeue", "-h", "-o", "%i %E", "-j", ",".join(jobs)], capture_output=True, text=True)
    waits = dict(line.split(" ", 1) for line in queue.stdout.splitlines() if line.endswith(")") or "null" in line)
    assert waits[f"{jobs[1]}+0"].startswith(f"afterany:{jobs[0]}") and waits[f"{jobs[2]}+0"].startswith(
        f"afterany:{jobs[1]}"
    ), queue.stdout
    assert run_cli("cancel", sweep_id).returncode == 0
    final = sweep.wait(timeout=120)
    assert [p.status.state for p in final.points] == [JobState.CANCELLED] * 3, [p.status.reason for p in final.points]


def test_the_readmes_sweep_and_an_eval_after_it_that_waits_for_every_point(tmp_path: Path) -> None:
    write_job(tmp_path, "debug", nodes=1)
    (tmp_path / "eval.yaml").write_text("name: eval\nmode: ddp\nnodes: 1\ncommand: 'ls marks > seen'\n")
    shell = doc_block("sweep-example") + 'echo "$sweep"\n'
    res = subprocess.run(["bash", "-euc", shell], cwd=tmp_path, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    evaluate, sweep = res.stdout.split()[-2:]
    assert res.stdout.startswith(f"sweep {sweep}  lr-sweep  6 points: "), res.stdout
    assert f"waits for afterok:{sweep}" in run_cli("status", evaluate).stdout
    assert ti_slurm.get_job(evaluate).wait(timeout=240).state is JobState.COMPLETED
    seen = (tmp_path / "seen").read_text().split()
    assert seen == [f"{k}-0.json" for k in range(6)]  # every point had ended


def test_a_grid_over_max_array_size_is_one_line_and_nothing_is_submitted(tmp_path: Path) -> None:
    write_job(tmp_path, "debug", nodes=1)
    res = run_cli("sweep", "job.yaml", "--param", "lr=" + ",".join(map(str, range(1002))), cwd=tmp_path)
    assert res.returncode == 2 and not res.stdout, res
    assert res.stderr == (
        "ti-slurm: error: sweep: '1002 points': over this cluster's MaxArraySize of 1001 (array indices 0-1000); "
        "nothing was submitted\n"
    )
    assert not (tmp_path / "ti-slurm-jobs").exists()
