"""ModelArts' training-job environment (``platform: modelarts``), against Huawei's documented examples."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.factories import het, plan_from, single
from ti_slurm.core.errors import SpecError
from ti_slurm.job.contract import node_contract
from ti_slurm.submitting.spec import parse_spec

pytestmark = pytest.mark.usefixtures("fake_dns")


def ddp_envs(tmp_path: Path, nodes: int = 3, **doc: object) -> list[dict[str, str]]:
    plan = plan_from({"mode": "ddp", "nodes": nodes, "platform": "modelarts", "workdir": str(tmp_path / "code"), **doc})
    nodelist = f"gpu[009-{8 + nodes:03d}]"
    return [node_contract(plan, single(nodelist, i, HOME="/home/alice"), 0, "/jd/4242").env for i in range(nodes)]


def test_every_node_of_a_pytorch_job_gets_modelarts_variables(tmp_path: Path) -> None:
    envs = ddp_envs(tmp_path, gpus_per_node=8)
    for index, env in enumerate(envs):
        assert env["MA_CURRENT_IP"] == f"10.1.0.{9 + index}"
        assert env["MA_NUM_GPUS"] == "8" and env["MA_NUM_HOSTS"] == "3"
        assert env["MA_TASK_NAME"] == "worker"  # "MindSpore, PyTorch: worker"
        assert env["VC_TASK_INDEX"] == env["VK_TASK_INDEX"] == env["RANK"] == str(index)
        assert env["VC_WORKER_NUM"] == "3"
        assert env["VC_WORKER_HOSTS"] == "10.1.0.9,10.1.0.10,10.1.0.11"
        assert env["MA_VJ_NAME"].endswith("-4242")
        # the code folder sits in MA_JOB_DIR, as ModelArts places it: ${MA_JOB_DIR}/code/train.py
        assert env["MA_JOB_DIR"] == str(tmp_path)
        assert (env["MA_MOUNT_PATH"], env["MA_LOG_DIR"], env["MA_HOME"]) == ("/jd/4242", "/jd/4242/logs", "/home/alice")
        assert "MASTER_ADDR" in env and "NODE_IP_SLOT_LIST" not in env  # TI's names stay beside ModelArts'


def test_the_documented_master_line_names_rank_0(tmp_path: Path) -> None:
    """ModelArts' example: MASTER_ADDR="${VC_WORKER_HOSTS%%,*}" (run by bash, as the start script is)."""
    for env in ddp_envs(tmp_path):
        script = 'MASTER_ADDR="${VC_WORKER_HOSTS%%,*}"; echo "$MASTER_ADDR $MA_NUM_HOSTS $VC_TASK_INDEX"'
        out = subprocess.run(["bash", "-c", script], env={**os.environ, **env}, capture_output=True, text=True)
        assert out.stdout.split() == [env["MASTER_ADDR"], "3", env["RANK"]]


def test_a_ps_worker_job_has_a_task_each_for_ps_and_worker() -> None:
    doc: dict[str, object] = {
        "mode": "ps-worker",
        "platform": "modelarts",
        "ps": {"nodes": 1},
        "worker": {"nodes": 2, "gpus_per_node": 1},
    }
    plan = plan_from(doc)
    lists = ["gpu001", "gpu[003-004]"]
    seen = []
    for group, count in ((0, 1), (1, 2)):
        for i in range(count):
            env = node_contract(plan, het(lists, i), group, "/jd").env
            seen.append((env["MA_TASK_NAME"], env["VC_TASK_INDEX"], env["MA_NUM_GPUS"]))
            assert (env["VC_PS_NUM"], env["VC_PS_HOSTS"]) == ("1", "10.1.0.1")
            assert (env["VC_WORKER_NUM"], env["VC_WORKER_HOSTS"]) == ("2", "10.1.0.3,10.1.0.4")
            assert env["MA_NUM_HOSTS"] == "3"
    assert seen == [("ps", "0", "0"), ("worker", "0", "1"), ("worker", "1", "1")]
    assert [plan.command_of(c) for c in (0, 1)] == ["train --task_name=ps", "train --task_name=worker"]


def test_the_ti_platform_adds_none_of_them(tmp_path: Path) -> None:
    plan = plan_from({"mode": "ddp", "nodes": 2})
    env = node_contract(plan, single("gpu[009-010]", 0), 0, "/jd").env
    assert not [name for name in env if name.startswith(("MA_", "VC_", "VK_"))]


@pytest.mark.parametrize("name", ["MA_NUM_HOSTS", "MA_MY_SETTING", "VC_WORKER_HOSTS", "VK_TASK_INDEX"])
def test_a_spec_may_not_set_modelarts_own_variables(name: str) -> None:
    doc = {"mode": "ddp", "nodes": 2, "command": "train", "platform": "modelarts", "env": {name: "x"}}
    with pytest.raises(SpecError) as err:
        parse_spec(doc)
    assert str(err.value).startswith(f"env.{name}: ") and "set by platform modelarts" in str(err.value)
    assert parse_spec({**doc, "platform": "ti"}).env == {name: "x"}  # on TI they are the user's own
