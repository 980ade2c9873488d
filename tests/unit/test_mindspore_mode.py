"""The MindSpore mode's contract: MindSpore's dynamic-cluster variables on every node."""

from __future__ import annotations

import pytest

from tests.factories import plan_from, single
from ti_slurm.job.contract import node_contract
from ti_slurm.job.modes.mindspore import runs_msrun

pytestmark = pytest.mark.usefixtures("fake_dns")


def test_every_node_is_a_worker_of_the_scheduler_on_node_0() -> None:
    plan = plan_from({"mode": "mindspore", "nodes": 3, "command": "python train.py"})
    contracts = [node_contract(plan, single("gpu[009-011]", i), 0, "/jd") for i in range(3)]
    for rank, c in enumerate(contracts):
        env = c.env
        assert (env["MS_ROLE"], env["MS_WORKER_NUM"], env["MS_NODE_ID"]) == ("MS_WORKER", "3", str(rank))
        assert env["MS_SCHED_HOST"] == env["MASTER_ADDR"] == "10.1.0.9"
        assert env["MS_SCHED_PORT"] == env["MASTER_PORT"] and 61000 <= int(env["MS_SCHED_PORT"]) <= 65535
        assert (env["RANK"], env["WORLD_SIZE"]) == (str(rank), "3")
    assert [c.role for c in contracts] == ["master", "worker", "worker"]
    assert contracts[0].listen_ports == ((int(contracts[0].env["MS_SCHED_PORT"]), "MS_SCHED_PORT"),)
    assert contracts[1].listen_ports == ()


@pytest.mark.parametrize(
    "command,brings_its_own",
    [
        ("msrun --worker_num=$MS_WORKER_NUM --node_rank=$MS_NODE_ID train.py", True),
        ("cd src && msrun --join=True train.py", True),
        ("/opt/ms/bin/msrun train.py", True),
        ("python train.py", False),
        ("python msrun_helper.py", False),
    ],
)
def test_a_command_running_msrun_gets_no_second_scheduler(command: str, brings_its_own: bool) -> None:
    plan = plan_from({"mode": "mindspore", "nodes": 2, "command": command})
    assert runs_msrun(plan, 0) is brings_its_own
