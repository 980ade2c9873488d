"""The preflight checks, one by one, on this machine (the cluster tier injects the faults for real)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tests.conftest import fake_sysfs
from ti_slurm.core.environ import job_environment
from ti_slurm.core.plan import Component, JobPlan
from ti_slurm.job.contract import NodeContract
from ti_slurm.job.preflight import gpus_match, names_agree, ports_free, problems, rdma_ports_active
from ti_slurm.job.rdma import nccl_devices

PLAN = JobPlan("t", "ddp", "x", (Component("ddp", 2, 8, 1),))


def contract(**fields: object) -> NodeContract:
    values: dict[str, object] = {
        "env": {},
        "defaults": {},
        "hostfile": None,
        "node": "localhost",
        "index": 0,
        "role": "master",
        "runs_command": True,
        "first_node": "localhost",
    }
    return NodeContract(**(values | fields))  # type: ignore[arg-type]


def test_a_node_that_resolves_a_name_elsewhere_is_named() -> None:
    wrong = contract(addresses={"localhost": "10.9.9.9"})
    assert names_agree(PLAN, 0, wrong, {}) == (
        "resolves localhost to 127.0.0.1, but the job uses 10.9.9.9 for it (check /etc/hosts or DNS on this node)"
    )
    assert names_agree(PLAN, 0, contract(addresses={"localhost": "127.0.0.1"}), {}) is None
    assert names_agree(PLAN, 0, wrong, {"TI_SLURM_NODE_ADDR": "127.0.0.1"}) is None  # the local runner pins them


def test_a_taken_port_is_named() -> None:
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        port = holder.getsockname()[1]
        found = ports_free(PLAN, 0, contract(listen_ports=((port, "MASTER_PORT"),)), {})
    assert found == f"port {port} (MASTER_PORT) is taken on this node; another program holds it"
    assert ports_free(PLAN, 0, contract(listen_ports=((port, "MASTER_PORT"),)), {}) is None  # free again


def test_fewer_gpus_than_asked_is_named() -> None:
    assert gpus_match(PLAN, 0, contract(), {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6"}) == (
        "sees 7 GPU(s) (CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6), the job asked for 8 per node"
    )
    assert gpus_match(PLAN, 0, contract(), {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}) is None


def test_rdma_devices_as_nccl_selects_them(tmp_path: Path) -> None:
    fake_sysfs(tmp_path, {"mlx5_bond_0": "4: ACTIVE", "mlx5_bond_1": "1: DOWN", "mlx5_0": "4: ACTIVE"})
    assert nccl_devices("mlx5_bond", str(tmp_path)) == (["mlx5_bond_0", "mlx5_bond_1"], [])
    assert nccl_devices("=mlx5_0,mlx5_9:1", str(tmp_path)) == (["mlx5_0"], ["mlx5_9"])
    assert nccl_devices("^mlx5_0", str(tmp_path)) == ([], [])
    plan = PLAN.replace(sysfs_root=str(tmp_path))
    rdma = contract(defaults={"NCCL_IB_HCA": "mlx5_bond"})
    assert rdma_ports_active(plan, 0, rdma, {"NCCL_IB_HCA": "mlx5_bond"}) == (
        "RDMA mlx5_bond_1 port 1 DOWN (NCCL_IB_HCA=mlx5_bond)"
    )
    assert rdma_ports_active(plan, 0, rdma, {"NCCL_IB_HCA": "mlx5_bond", "NCCL_IB_DISABLE": "1"}) is None
    assert rdma_ports_active(plan, 0, contract(), {"NCCL_IB_HCA": "mlx5_bond"}) is None  # no RDMA job
    assert "no RDMA device matches mlx5_x" in str(rdma_ports_active(plan, 0, rdma, {"NCCL_IB_HCA": "mlx5_x"}))


def test_the_first_problem_names_the_node() -> None:
    found = problems(PLAN, 0, contract(addresses={"localhost": "10.9.9.9"}), {})
    assert str(found).startswith("preflight on localhost: resolves localhost to 127.0.0.1")


@pytest.mark.parametrize(
    "name,kept",
    [("SLURM_CPU_BIND", False), ("SLURM_MEM_PER_CPU", False), ("SBATCH_PARTITION", False),
     ("SRUN_CPUS_PER_TASK", False), ("PMIX_RANK", False), ("SLURM_JOB_ID", False), ("SLURM_CONF", True),
     ("MY_TOKEN", True), ("PATH", True)],
)  # fmt: skip
def test_what_the_submitting_shell_may_hand_the_job(name: str, kept: bool) -> None:
    assert (name in job_environment({name: "x"})) is kept


@pytest.mark.parametrize(
    "command,missing",
    [
        ("mpirun -np 2 python train.py", "mpirun"),
        ("cd src && exec horovodrun -np 2 python train.py", "horovodrun"),
        ("msrun --worker_num=2 train.py", "msrun"),
        ("torchrun --nnodes 2 train.py", "torchrun"),
        ("python train.py --note 'no mpirun here'", None),  # a word in an argument, not a command
        ("python -m torch.distributed.run train.py", None),
    ],
)
def test_a_launcher_missing_from_the_commands_path_stops_the_node_before_its_command(
    command: str, missing: str | None
) -> None:
    from ti_slurm.job.preflight import launcher_found

    plan = JobPlan("t", "mpi", command, (Component("mpi", 2, 0, 1),))
    found = launcher_found(plan, 0, contract(), {"PATH": "/nowhere"})
    if missing is None:
        assert found is None
    else:
        assert found is not None and found.startswith(f"{missing} (the start command's launcher) is not on this")
        assert "install " in found
    if missing == "mpirun":  # Open MPI is installed where the tests run: found on the PATH as it is
        assert launcher_found(plan, 0, contract(), {"PATH": os.environ["PATH"]}) is None


@pytest.mark.parametrize(
    ("command", "program"),
    [
        ("python3 train.py", "python3"),
        ("cd src && OMP_NUM_THREADS=4 python -u train.py", "python"),
        ("if [ -e x ]; then exec python3.11 t.py; fi", "python3.11"),
        ("echo python; bash run.sh", None),
        ("mpirun -np 2 hostname", None),
    ],
)
def test_the_python_a_start_command_runs_first_is_found_on_its_path(
    tmp_path: Path, command: str, program: str | None
) -> None:
    from ti_slurm.job.preflight import command_python

    for name in ("python", "python3", "python3.11"):
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    assert command_python(command, str(tmp_path)) == (str(tmp_path / program) if program else None)


def test_a_launchers_python_is_the_one_its_script_names(tmp_path: Path) -> None:
    from ti_slurm.job.preflight import command_python

    (tmp_path / "python3").write_text("#!/bin/sh\n")
    (tmp_path / "python3").chmod(0o755)
    (tmp_path / "torchrun").write_text("#!/usr/bin/env python3\nimport torch.distributed.run\n")
    (tmp_path / "torchrun").chmod(0o755)
    (tmp_path / "msrun").write_text("#!/opt/ms/bin/python3.9\n")
    (tmp_path / "msrun").chmod(0o755)
    assert command_python("torchrun --nproc_per_node 8 train.py", str(tmp_path)) == str(tmp_path / "python3")
    assert command_python("msrun --worker_num 8 train.py", str(tmp_path)) == "/opt/ms/bin/python3.9"
    assert command_python("torchrun train.py", "/nonexistent") is None


def test_a_missing_system_library_names_its_debian_package() -> None:
    from ti_slurm.job.preflight import import_hint

    said = "OSError: libgomp.so.1: cannot open shared object file: No such file or directory"
    assert import_hint(said, "MindSpore") == "install libgomp1 (Debian: apt install libgomp1)"
    assert import_hint("ModuleNotFoundError: No module named 'torch'", "PyTorch") == "install PyTorch"
