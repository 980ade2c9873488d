"""The platform contract per mode, from Slurm's variables (pure, no Slurm needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.factories import MODE_SPECS, het, plan_from, single, slurm_env, spec_doc
from ti_slurm.core.errors import ContractError, SpecError
from ti_slurm.core.site import SiteConfig
from ti_slurm.job.contract import COMMON_NAMES, RDMA_ENV, apply, node_contract
from ti_slurm.job.modes import get_mode
from ti_slurm.job.platforms import platform_names
from ti_slurm.submitting.spec import parse_spec

pytestmark = pytest.mark.usefixtures("fake_dns")


def test_ddp_contract_on_every_node() -> None:
    plan = plan_from({"mode": "ddp", "nodes": 3, "gpus_per_node": 8})
    envs = [node_contract(plan, single("gpu[009-011]", i), 0, "/jd").env for i in range(3)]
    for rank, env in enumerate(envs):
        assert env["NODE_LIST"] == "gpu009:8,gpu010:8,gpu011:8"
        assert env["INDEX"] == env["RANK"] == str(rank)
        assert env["MASTER_ADDR"] == "10.1.0.9"  # rank 0's address, not its name
        assert env["WORLD_SIZE"] == "3"  # nodes, as the TI platform defines it
        assert env["GPU_NUM"] == "24" and env["GPU_NUM_PER_NODE"] == "8"
        assert 61000 <= int(env["MASTER_PORT"]) <= 65535
    assert {e["MASTER_PORT"] for e in envs} == {envs[0]["MASTER_PORT"]}
    assert [e["TI_SLURM_ROLE"] for e in envs] == ["master", "worker", "worker"]


def test_rank_comes_from_nodeid_not_from_addresses(fake_dns: dict[str, str]) -> None:
    # Two names sharing one address (containers, several NICs) still get distinct ranks.
    fake_dns["gpu018"] = fake_dns["gpu019"] = "10.9.9.9"
    plan = plan_from({"mode": "ddp", "nodes": 2})
    ranks = [node_contract(plan, single("gpu[018-019]", i), 0, "/jd").env["RANK"] for i in range(2)]
    assert ranks == ["0", "1"]


def test_master_port_override() -> None:
    plan = plan_from({"mode": "ddp", "nodes": 2, "master_port": 23456})
    assert node_contract(plan, single("gpu[001-002]", 1), 0, "/jd").env["MASTER_PORT"] == "23456"


@pytest.mark.parametrize("job_id", [0, 1, 4535, 4536, 99999, 2**31 - 1])
def test_ports_stay_outside_the_ephemeral_range(job_id: int) -> None:
    plan = plan_from({"mode": "ps-worker", "ps": {"nodes": 1}, "worker": {"nodes": 2}})
    cfg = json.loads(node_contract(plan, het(["gpu001", "gpu[002-003]"], 0, job_id), 0, "/jd").env["TF_CONFIG"])
    ports = {int(a.rsplit(":", 1)[1]) for role in cfg["cluster"].values() for a in role}
    assert all(p > 60999 and p <= 65535 for p in ports)
    assert len(ports) == 2  # ps and worker never collide, even if they share a node


def test_mpi_hostfile_and_ip_slot_list() -> None:
    plan = plan_from({"mode": "mpi", "nodes": 2, "gpus_per_node": 4})
    c = node_contract(plan, single("gpu[001-002]", 1), 0, "/jobdir")
    assert c.hostfile == "gpu001 slots=4\ngpu002 slots=4\n"
    assert c.env["NODE_IP_SLOT_LIST"] == "10.1.0.1:4,10.1.0.2:4"
    assert c.env["OMPI_MCA_orte_default_hostfile"] == c.env["PRTE_MCA_prte_default_hostfile"] == "/jobdir/hostfile"
    assert c.env["GPU_NUM"] == "8" and c.env["GPU_NUM_PER_NODE"] == "4"
    assert c.role == "worker" and c.runs_command


def test_mpi_slots_are_one_per_node_without_gpus() -> None:
    plan = plan_from({"mode": "mpi", "nodes": 2})
    assert node_contract(plan, single("gpu[001-002]", 0), 0, "/jd").env["NODE_IP_SLOT_LIST"] == "10.1.0.1:1,10.1.0.2:1"


def test_horovod_runs_the_command_on_the_launcher_only() -> None:
    plan = plan_from({"mode": "horovod", "nodes": 3, "gpus_per_node": 1})
    contracts = [node_contract(plan, single("gpu[001-003]", i), 0, "/jd") for i in range(3)]
    assert [c.runs_command for c in contracts] == [True, False, False]
    assert [c.role for c in contracts] == ["launcher", "worker", "worker"]


def test_ps_worker_tf_config_on_every_task() -> None:
    plan = plan_from({"mode": "ps-worker", "ps": {"nodes": 2}, "worker": {"nodes": 2, "gpus_per_node": 1}})
    lists = ["gpu[001-002]", "gpu[003-004]"]
    seen = []
    for group in (0, 1):
        for i in (0, 1):
            env = node_contract(plan, het(lists, i), group, "/jd").env
            cfg = json.loads(env["TF_CONFIG"])
            seen.append((cfg["task"]["type"], cfg["task"]["index"], env["INDEX"]))
            assert cfg["environment"] == "cloud"
            assert [a.split(":")[0] for a in cfg["cluster"]["ps"]] == ["10.1.0.1", "10.1.0.2"]
            assert [a.split(":")[0] for a in cfg["cluster"]["worker"]] == ["10.1.0.3", "10.1.0.4"]
            assert env["NODE_LIST"] == "gpu001:0,gpu002:0,gpu003:1,gpu004:1"
    assert seen == [("ps", 0, "0"), ("ps", 1, "1"), ("worker", 0, "2"), ("worker", 1, "3")]


def test_ray_head_and_worker_groups() -> None:
    plan = plan_from(
        {"mode": "ray", "head": {"cpus_per_node": 2}, "worker_groups": [{"nodes": 2}, {"nodes": 1, "gpus_per_node": 1}]}
    )
    lists = ["gpu001", "gpu[002-003]", "gpu004"]
    out = []
    for group, count in ((0, 1), (1, 2), (2, 1)):
        for i in range(count):
            c = node_contract(plan, het(lists, i), group, "/jd")
            out.append((c.role, c.env["RANK"], c.env["INDEX"], c.runs_command))
            assert c.env["HEAD_ADDR"] == "10.1.0.1"
            assert ("RAY_ADDRESS" in c.env) == (group == 0)
    assert out == [
        ("head", "0", "0", True),
        ("worker", "1", "1", False),
        ("worker", "2", "2", False),
        ("worker", "3", "3", False),
    ]


def test_two_ray_jobs_get_disjoint_port_blocks() -> None:
    plan = plan_from({"mode": "ray", "worker_groups": [{"nodes": 1}]})

    def block(job_id: int) -> set[int]:
        env = node_contract(plan, het(["gpu001", "gpu002"], 0, job_id), 0, "/jd").env
        base = int(env["TI_SLURM_RAY_PORT_BASE"])
        return set(range(base, base + 16))

    assert not block(1000) & block(1001)


RDMA_SITE = SiteConfig(rdma_partitions=("rdma",), nccl={"rdma": {"NCCL_IB_GID_INDEX": "5"}})


def test_rdma_partition_gets_the_seed_variables() -> None:
    plan = plan_from({"mode": "ddp", "nodes": 2, "gpus_per_node": 8}, RDMA_SITE)
    c = node_contract(plan, single("gpu[001-002]", 0, SLURM_JOB_PARTITION="rdma"), 0, "/jd")
    assert len(RDMA_ENV) == 17
    assert c.defaults == {**RDMA_ENV, "NCCL_IB_GID_INDEX": "5"}  # the site's override wins
    assert c.defaults["NCCL_IB_HCA"] == "mlx5_bond"


@pytest.mark.parametrize(
    "doc,nodelist",
    [
        ({"mode": "ddp", "nodes": 1, "gpus_per_node": 8}, "gpu001"),  # one machine: no RDMA traffic
        ({"mode": "ddp", "nodes": 2, "gpus_per_node": 4}, "gpu[001-002]"),  # not whole 8-GPU machines
        ({"mode": "mpi", "nodes": 2}, "gpu[001-002]"),
    ],
)
def test_auto_rdma_needs_two_nodes_of_eight_gpus(doc: dict[str, object], nodelist: str) -> None:
    """The TI platform turns RDMA on for jobs of >= 2 nodes, each a whole 8-GPU machine."""
    plan = plan_from(doc, RDMA_SITE)
    assert node_contract(plan, single(nodelist, 0, SLURM_JOB_PARTITION="rdma"), 0, "/jd").defaults == {}
    site = SiteConfig(rdma_partitions=("rdma",), rdma_min_nodes=1, rdma_min_gpus_per_node=0)  # a site's own rule
    assert node_contract(plan_from(doc, site), single(nodelist, 0, SLURM_JOB_PARTITION="rdma"), 0, "/jd").defaults


def test_ps_tasks_without_gpus_get_no_rdma() -> None:
    doc = {"mode": "ps-worker", "ps": {"nodes": 1}, "worker": {"nodes": 2, "gpus_per_node": 8}}
    plan = plan_from(doc, RDMA_SITE)
    env = het(["gpu003", "gpu[001-002]"], 0, SLURM_JOB_PARTITION="rdma")
    assert node_contract(plan, env, 0, "/jd").defaults == {}
    assert node_contract(plan, env, 1, "/jd").defaults["NCCL_IB_HCA"] == "mlx5_bond"


def test_other_partitions_and_rdma_off_get_none() -> None:
    plan = plan_from({"mode": "ddp", "nodes": 2, "gpus_per_node": 8}, RDMA_SITE)
    assert node_contract(plan, single("gpu[001-002]", 0, SLURM_JOB_PARTITION="debug"), 0, "/jd").defaults == {}
    off = plan_from({"mode": "ddp", "nodes": 2, "gpus_per_node": 8, "rdma": "off"}, RDMA_SITE)
    assert node_contract(off, single("gpu[001-002]", 0, SLURM_JOB_PARTITION="rdma"), 0, "/jd").defaults == {}
    on = plan_from({"mode": "ddp", "nodes": 2, "rdma": "on"})
    assert node_contract(on, single("gpu[001-002]", 0), 0, "/jd").defaults == RDMA_ENV


def test_user_values_win_over_rdma_defaults_but_not_over_the_contract() -> None:
    plan = plan_from({"mode": "ddp", "nodes": 2, "rdma": "on", "env": {"NCCL_DEBUG": "WARN"}})
    c = node_contract(plan, single("gpu[001-002]", 1), 0, "/jd")
    # a RANK exported in the submitting shell (the spec's env refuses one)
    env = apply(c, {"NCCL_SOCKET_IFNAME": "ib0", "PATH": "/bin", "RANK": "99"}, plan.env)
    assert env["NCCL_DEBUG"] == "WARN"  # the user's spec
    assert env["NCCL_SOCKET_IFNAME"] == "ib0"  # the user's environment
    assert env["NCCL_IB_HCA"] == "mlx5_bond"
    assert env["RANK"] == "1"


@pytest.mark.parametrize(
    "env,needle",
    [
        ({}, "SLURM_JOB_ID"),
        ({"SLURM_JOB_ID": "1", "SLURM_NODEID": "0"}, "SLURM_JOB_NODELIST"),
        ({"SLURM_JOB_ID": "x", "SLURM_JOB_NODELIST": "gpu001", "SLURM_NODEID": "0"}, "SLURM_JOB_ID"),
        ({"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "gpu[001-002]", "SLURM_NODEID": "5"}, "SLURM_NODEID"),
        ({"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "gpu001", "SLURM_NODEID": "0"}, "expects 2 nodes"),
    ],
)
def test_bad_slurm_environment_is_a_clear_error(env: dict[str, str], needle: str) -> None:
    plan = plan_from({"mode": "ddp", "nodes": 2})
    with pytest.raises(ContractError, match=needle):
        node_contract(plan, env, 0, "/jd")


def test_multi_role_mode_outside_a_het_job() -> None:
    plan = plan_from({"mode": "ps-worker", "ps": {}, "worker": {}})
    with pytest.raises(ContractError, match="heterogeneous"):
        node_contract(plan, single("gpu[001-002]", 0), 0, "/jd")


def test_largest_tf_config_that_fits_is_accepted_and_one_more_task_is_refused(write_spec) -> None:
    from tests.conftest import run_cli

    ok = run_cli("render", str(write_spec("mode: ps-worker\ncommand: x\nps: {nodes: 1}\nworker: {nodes: 5456}\n")))
    assert ok.returncode == 0, ok.stderr
    too_big = run_cli("render", str(write_spec("mode: ps-worker\ncommand: x\nps: {nodes: 1}\nworker: {nodes: 5457}\n")))
    assert too_big.returncode == 2
    assert "TF_CONFIG could reach" in too_big.stderr and "131072-byte" in too_big.stderr


def test_node_list_over_the_exec_limit_is_named_before_exec() -> None:
    plan = plan_from({"mode": "ddp", "nodes": 9000})
    env = single("a-very-long-node-name-in-rack[0001-9000]", 5)
    with pytest.raises(ContractError, match=r"NODE_LIST would be \d+ bytes"):
        node_contract(plan, {**env, "TI_SLURM_NODE_ADDR": "10.0.0.1"}, 0, "/jd")


@pytest.mark.parametrize(
    ("workdir", "checkpoint_dir", "expected"),
    [
        ("/work/code", "ckpt", "/work/code/ckpt"),  # a local submission: the workdir is absolute
        ("code", "ckpt", "{cwd}/ckpt"),  # a remote one: the batch script went to code/; the node runs there
        ("code", "/scratch/ckpt", "/scratch/ckpt"),
        (None, None, "/jd/checkpoint"),
    ],
)
def test_the_checkpoint_directory_is_the_same_wherever_the_workdir_was_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workdir: str | None, checkpoint_dir: str | None, expected: str
) -> None:
    monkeypatch.chdir(tmp_path)
    doc: dict[str, object] = {"mode": "ddp", "nodes": 2, "workdir": workdir, "checkpoint_dir": checkpoint_dir}
    plan = plan_from(doc)
    env = node_contract(plan, single("gpu[001-002]", 1), 0, "/jd").env
    assert env["TI_SLURM_CHECKPOINT_DIR"] == expected.format(cwd=tmp_path)


# -- the platform axis -------------------------------------------------------------------
def test_the_platforms_are_the_modules_of_their_folder() -> None:
    from ti_slurm.job.platforms import get_platform, platform_names

    assert platform_names() == ("modelarts", "ti")
    assert [get_platform(name).name for name in platform_names()] == ["modelarts", "ti"]


def test_a_platform_adds_variables_on_every_node_but_never_replaces_the_modes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ti_slurm.job import platforms
    from ti_slurm.job.platforms.base import Platform

    class Added(Platform):
        name = "ti"

        def node_env(self, ctx, contract, env):  # type: ignore[no-untyped-def]
            return {"PLATFORM_RANK": contract["RANK"], "MASTER_ADDR": "elsewhere"}

    monkeypatch.setitem(platforms.PLATFORMS.loaded, "ti", Added())
    plan = plan_from({"mode": "ddp", "nodes": 2})
    envs = [node_contract(plan, single("gpu[009-010]", i), 0, "/jd").env for i in range(2)]
    assert [e["PLATFORM_RANK"] for e in envs] == ["0", "1"]
    assert {e["MASTER_ADDR"] for e in envs} == {"10.1.0.9"}  # the mode's own stays


@pytest.mark.parametrize("platform", platform_names())
@pytest.mark.parametrize("mode", sorted(MODE_SPECS))
def test_env_may_set_nothing_the_contract_sets(mode: str, platform: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What `env:` may not set is derived from what each mode declares, and every variable a node gets from
    the contract is covered: a mode that starts setting a new variable cannot be overridden silently."""
    monkeypatch.setattr("_socket.gethostbyname", lambda name: "10.2.0.1")
    plan = plan_from(spec_doc(mode, platform=platform))
    given: set[str] = set()
    for index, component in enumerate(plan.components):
        for node in range(component.nodes):
            given |= set(node_contract(plan, slurm_env(plan, node), index, "/jd").env)
    assert get_mode(mode).env_names <= given  # each declared name is one the mode's nodes get
    for name in sorted(given | get_mode(mode).env_names | COMMON_NAMES):
        with pytest.raises(SpecError) as err:
            parse_spec(spec_doc(mode, platform=platform, env={name: "5"}))
        assert str(err.value).startswith(f"env.{name}: '5': ") and "on every node" in str(err.value)
    assert parse_spec(spec_doc(mode, platform=platform, env={"MY_SETTING": "5"})).env == {"MY_SETTING": "5"}
