"""ModelArts jobs unchanged on the real test cluster: the start scripts of ModelArts' DDP guide, which read
only ModelArts' variables, train across two nodes with real PyTorch."""

from __future__ import annotations

import re
import shutil
import uuid
from pathlib import Path

import pytest

from tests.cluster.test_modes_on_slurm import Job
from tests.conftest import ROOT

pytestmark = pytest.mark.usefixtures("cluster")
SPAWN = 'python ${MA_JOB_DIR}/code/main.py --init_method "tcp://${VC_WORKER_HOSTS%%,*}:$PORT" '
SPAWN += "--rank $VC_TASK_INDEX --world_size $MA_NUM_HOSTS"
WAYS = {
    "torch.multiprocessing.spawn": SPAWN,
    "torch.distributed.launch": "bash ${MA_JOB_DIR}/code/launch.sh",
    "torchrun": "bash ${MA_JOB_DIR}/code/torchrun.sh",
}


@pytest.mark.parametrize("way", sorted(WAYS))
def test_modelarts_ddp_start_scripts_train_across_two_nodes(tmp_path: Path, way: str) -> None:
    shutil.copytree(ROOT / "examples" / "modelarts" / "code", tmp_path / "code")
    port = 20000 + uuid.uuid4().int % 20000  # the script's own master port: unlikely to meet another test's
    body = (
        f"mode: ddp\nplatform: modelarts\nnodes: 2\ngpus_per_node: 2\nenv: {{PORT: '{port}'}}\n"
        f"workdir: {tmp_path / 'code'}\ncommand: '{WAYS[way]} --epochs 5'"
    )
    job = Job(tmp_path, body)
    assert job.result.returncode == 0, job.result.stderr + job.logs()
    lines = re.findall(r"rank (\d)/4 on (node\d\d) task=(worker-\d) in_sync=True", job.logs())
    assert sorted(rank for rank, _, _ in lines) == ["0", "1", "2", "3"]
    tasks = {node: task for _, node, task in lines}  # VC_TASK_INDEX: one per node, the node's rank
    assert sorted(tasks.values()) == ["worker-0", "worker-1"] and len(tasks) == 2
    status = job.status()
    assert status["state"] == "COMPLETED" and status["components"][0]["nodes"] == sorted(tasks)
