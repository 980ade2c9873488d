"""MindSpore on the real test cluster, with real MindSpore (its CPU build): the dynamic cluster ti-slurm
builds (MS_* on every node, the scheduler on node 0), and msrun fed from the same variables.

The jobs run with the Python environment ``ci/mindspore-env`` makes (MindSpore beside NumPy 1, which its
wheel is built for), as a user names a framework's environment: the spec's ``python:`` and PATH."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from tests.cluster.test_modes_on_slurm import Job
from tests.conftest import ROOT

pytestmark = pytest.mark.usefixtures("cluster")
MSRUN = (
    "msrun --worker_num=$MS_WORKER_NUM --local_worker_num=1 --master_addr=$MS_SCHED_HOST "
    "--master_port=$MS_SCHED_PORT --node_rank=$MS_NODE_ID --join=True --log_dir=msrun-logs train.py"
)


VENV = Path(os.environ.get("TI_SLURM_MINDSPORE_VENV", "/opt/ti-slurm-mindspore"))


@pytest.fixture
def ms_dir(tmp_path: Path) -> Path:
    if not (VENV / "bin" / "msrun").exists():
        if os.environ.get("TI_SLURM_REQUIRE_CLUSTER"):
            pytest.fail(f"no MindSpore environment at {VENV}: run ci/mindspore-env")
        pytest.skip(f"no MindSpore environment at {VENV}: run ci/mindspore-env")
    shutil.copy(ROOT / "examples" / "mindspore" / "train.py", tmp_path / "train.py")
    return tmp_path


def spec(command: str, extra: str = "") -> str:
    """A 2-node MindSpore job run with the MindSpore environment's Python (and its commands first on PATH)."""
    path = f"{VENV}/bin:{os.environ['PATH']}"
    return f"mode: mindspore\nnodes: 2\npython: {VENV}/bin/python\nenv: {{PATH: '{path}'}}\n{extra}command: '{command}'"


def ranks_in(text: str) -> dict[str, str]:
    return dict(re.findall(r"rank (\d)/2 on (node\d\d) loss=\S+ in_sync=True", text))


def test_a_mindspore_job_trains_data_parallel_across_two_nodes(ms_dir: Path) -> None:
    cmd = 'echo "node rank $RANK: MS_NODE_ID=$MS_NODE_ID $MS_ROLE"; python train.py --epochs 10'
    job = Job(ms_dir, spec(cmd))
    assert job.result.returncode == 0, job.result.stderr + job.logs()
    status = job.status()
    nodes = status["components"][0]["nodes"]
    assert status["state"] == "COMPLETED" and ranks_in(job.logs()) == {"0": nodes[0], "1": nodes[1]}
    for n in (0, 1):  # MindSpore's rank is the node rank: MS_NODE_ID
        log = (job.job_dir / "logs" / f"mindspore-{n}.log").read_text()
        assert f"node rank {n}: MS_NODE_ID={n} MS_WORKER\n" in log and f"rank {n}/2 on {nodes[n]}" in log


def test_msrun_fed_from_the_variables_trains_too(ms_dir: Path) -> None:
    job = Job(ms_dir, spec(f"{MSRUN} --epochs 10"))
    logs = "".join(p.read_text() for p in sorted((ms_dir / "msrun-logs").glob("worker_*.log")))
    assert job.result.returncode == 0, job.result.stderr + job.logs() + logs
    assert sorted(ranks_in(logs)) == ["0", "1"] and len(set(ranks_in(logs).values())) == 2


def test_a_failing_mindspore_worker_fails_the_job_naming_it(ms_dir: Path) -> None:
    cmd = 'if [ "$RANK" = 1 ]; then echo worker 1 gives up; exit 3; fi; python train.py --epochs 10'
    job = Job(ms_dir, spec(cmd, "rendezvous_timeout: 30\n"))
    assert job.result.returncode == 1
    assert re.search(r"FAILED: mindspore node node\d\d \(index 1\) exited 3", job.result.stderr), job.result.stderr
