"""PS-Worker (real TensorFlow) and Ray (a real Ray cluster) as heterogeneous Slurm jobs."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.cluster.conftest import Island
from tests.cluster.test_modes_on_slurm import Job
from tests.conftest import ROOT, processes_matching, ray_processes

pytestmark = pytest.mark.usefixtures("cluster")


@pytest.fixture
def ps_dir(tmp_path: Path) -> Path:
    pytest.importorskip("tensorflow", reason="tensorflow-cpu is not installed")
    shutil.copy(ROOT / "examples" / "ps-worker" / "train.py", tmp_path / "train.py")
    return tmp_path


def test_ps_worker_trains_through_parameter_servers(ps_dir: Path) -> None:
    job = Job(ps_dir, "mode: ps-worker\ncommand: python train.py\nps: {nodes: 2}\nworker: {nodes: 2}")
    assert job.result.returncode == 0, job.result.stderr + job.logs()
    logs = job.logs()
    workers = re.findall(
        r"worker (\d) on (node\d\d) loss=([\d.]+) w on /job:ps/task:0 b on /job:ps/task:1 global_step=(\d+)", logs
    )
    assert sorted(w[0] for w in workers) == ["0", "1"]
    assert max(int(w[3]) for w in workers) == 60  # both workers' 30 steps went through the same ps variables
    assert all(float(w[2]) < 0.1 for w in workers)
    status = job.status()
    assert status["state"] == "COMPLETED"
    states = {c["name"]: c["state"] for c in status["components"]}
    assert states == {"ps": "STOPPED", "worker": "COMPLETED"}
    time.sleep(1)
    assert processes_matching(f"{ps_dir}") == []  # no ps (or anything else) of the job is left


def test_an_elastic_ps_worker_job_trains_with_the_workers_slurm_gave(ps_dir: Path, island: Island) -> None:
    """``worker: {nodes: {min: 2, max: n+1}}`` on an island of n nodes, one of them the ps: a heterogeneous job
    whose worker component Slurm gives what is left (n-1), and every task's TF_CONFIG lists those workers."""
    n = len(island.nodes)
    body = (
        f"mode: ps-worker\ncommand: python train.py\npartition: {island.name}\n"
        f"ps: {{nodes: 1}}\nworker: {{nodes: {{min: 2, max: {n + 1}}}}}"
    )
    job = Job(ps_dir, body)
    assert job.result.returncode == 0, job.result.stderr + job.logs()
    workers = re.findall(r"worker (\d) on (node\d\d) loss=([\d.]+) .* global_step=(\d+)", job.logs())
    assert sorted({w[0] for w in workers}) == [str(i) for i in range(n - 1)]
    assert max(int(w[3]) for w in workers) == 30 * (n - 1)  # every worker's 30 steps through the one ps
    components = {c["name"]: c["nodes"] for c in job.status()["components"]}
    assert len(components["worker"]) == n - 1 and set(components["worker"]) | set(components["ps"]) == set(island.nodes)


def test_modelarts_style_script_gets_its_task_name_on_slurm(ps_dir: Path) -> None:
    # ModelArts scripts read the role from the --task_name hyperparameter the platform appends, or from
    # MA_TASK_NAME and VC_TASK_INDEX (the node's index within its task)
    (ps_dir / "ma_train.py").write_text(
        "import argparse, os, runpy, sys\n"
        "parser = argparse.ArgumentParser()\n"
        "parser.add_argument('--task_name', choices=['ps', 'worker'], required=True)\n"
        "print('task_name', parser.parse_args().task_name, flush=True)\n"
        "print('MA_TASK_NAME', os.environ['MA_TASK_NAME'], os.environ['VC_TASK_INDEX'], flush=True)\n"
        "sys.argv = ['train.py']\n"
        "runpy.run_path('train.py', run_name='__main__')\n"
    )
    body = "mode: ps-worker\nplatform: modelarts\ncommand: python ma_train.py\nps: {nodes: 1}\nworker: {nodes: 2}"
    job = Job(ps_dir, body)
    assert job.result.returncode == 0, job.result.stderr + job.logs()
    logs = {p.stem: p.read_text() for p in (job.job_dir / "logs").glob("*.log")}
    assert "task_name ps\n" in logs["ps-0"] and "MA_TASK_NAME ps 0\n" in logs["ps-0"]
    for index, name in enumerate(("worker-0", "worker-1")):
        assert "task_name worker\n" in logs[name] and "global_step=" in logs[name]
        assert f"MA_TASK_NAME worker {index}\n" in logs[name]


def test_a_failing_worker_fails_the_job_and_stops_the_ps(ps_dir: Path) -> None:
    cmd = "if [ $TI_SLURM_ROLE = worker ] && [ $INDEX = 2 ]; then echo worker 2 gives up; exit 4; fi; "
    cmd += "exec python train.py"
    job = Job(ps_dir, f"mode: ps-worker\ncommand: '{cmd}'\nps: {{nodes: 1}}\nworker: {{nodes: 2}}")
    assert job.result.returncode == 1
    assert re.search(r"FAILED: worker node node\d\d \(index 1\) exited 4", job.result.stderr), job.result.stderr
    assert "ti-slurm logs" in job.result.stderr and "--node worker-1)" in job.result.stderr
    assert "  | worker 2 gives up\n" in job.result.stderr
    time.sleep(1)
    assert processes_matching(f"{ps_dir}") == []


@pytest.fixture
def ray_dir(tmp_path: Path) -> Path:
    pytest.importorskip("ray", reason="ray is not installed")
    for name in ("job.py", "rank.py"):
        shutil.copy(ROOT / "examples" / "ray" / name, tmp_path / name)
    return tmp_path


RAY_SPEC = """\
mode: ray
command: {command}
rendezvous_timeout: 120
head: {{cpus_per_node: 1}}
worker_groups:
  - {{nodes: 1, cpus_per_node: 1}}
  - {{nodes: 1, cpus_per_node: 2, gpus_per_node: 1}}
"""


def test_ray_seed_example_and_rank_placement(ray_dir: Path) -> None:
    job = Job(ray_dir, RAY_SPEC.format(command="python job.py && python rank.py"))
    assert job.result.returncode == 0, job.result.stderr + job.logs()
    head_log = (job.job_dir / "logs" / "head-0.log").read_text()
    assert "计数器结果: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]" in head_log
    components = {c["name"]: c for c in job.status()["components"]}
    rank1_node = components["worker1"]["nodes"][0]  # RANK 1 is the first node after the head
    assert f"f(1, 2, 3) = 6 on {rank1_node} (RANK=1)" in head_log
    assert len(re.search(r"nodes: (\[.*\])", head_log).group(1).split("),")) == 3
    assert components["head"]["state"] == "COMPLETED"
    time.sleep(1)
    assert ray_processes(job.id) == []


def test_a_ray_worker_dying_while_the_command_runs_fails_the_job(ray_dir: Path) -> None:
    job = Job(ray_dir, RAY_SPEC.format(command="python -c 'import time; time.sleep(120)'"), wait=False)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not processes_matching("time.sleep.120"):
        time.sleep(0.5)
    assert processes_matching("time.sleep.120"), "the head command never started"
    # the node of worker group 2 dies: its raylet, the one process of this job's Ray with that resource
    assert ray_processes(job.id), "the job's Ray never started"
    subprocess.run(["pkill", "-KILL", "-f", f'ti-ray-{job.id}-.*Rank:2": 1|Rank:2": 1.*ti-ray-{job.id}-'], check=False)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and job.status()["state"] not in ("FAILED", "COMPLETED"):
        time.sleep(0.5)
    status = job.status()
    assert status["state"] == "FAILED"
    assert "worker2" in status["reason"] and "while the job was still running" in status["reason"]
    time.sleep(1)
    assert processes_matching("time.sleep.120") == [] and ray_processes(job.id) == []
