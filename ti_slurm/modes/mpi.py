"""MPI: one group of nodes, node 0 the launcher; the command runs on every node.

Each node gets a hostfile of ``<node name> slots=<N>`` lines (named by
``OMPI_MCA_orte_default_hostfile`` and, for Open MPI 5,
``PRTE_MCA_prte_default_hostfile``) and ``NODE_IP_SLOT_LIST`` (``ip:slots,...``).

Inside a Slurm allocation Open MPI maps hosts by Slurm's node names and
rejects the seed's ``-H $NODE_IP_SLOT_LIST``. So Open MPI is told to start
its daemons through ti-slurm's launch agent (``rsh`` launcher, Slurm's host
list ignored): ``ti-slurm-ssh HOST CMD`` maps an address or name of the job
to its node and runs CMD there with ``srun --overlap``. The agent is also
first on PATH as ``ssh``, so ``horovodrun`` and a plain ``ssh <ip> cmd`` reach
the job's nodes the same way.
"""

from __future__ import annotations

import os

from ti_slurm.contract import NodeContext
from ti_slurm.modes import Rule

RULE = Rule()
PORTS_PER_JOB = 8
PORTS_PER_NODE = 1


def role(ctx: NodeContext) -> str:
    return "launcher" if ctx.global_index == 0 else "worker"


def hostfile_path(job_dir: str) -> str:
    return os.path.join(job_dir, "hostfile")


def agent_dir(job_dir: str) -> str:
    return os.path.join(job_dir, "bin")


def node_env(ctx: NodeContext) -> dict[str, str]:
    slots, addr = ctx.plan.components[0].slots, ctx.layout.addr
    path = hostfile_path(ctx.job_dir)
    agent = os.path.join(agent_dir(ctx.job_dir), "ssh")
    return {
        "NODE_IP_SLOT_LIST": ",".join(f"{addr(name)}:{slots}" for name in ctx.layout.groups[0]),
        "OMPI_MCA_orte_default_hostfile": path,
        "PRTE_MCA_prte_default_hostfile": path,
        "OMPI_MCA_plm": "rsh",
        "OMPI_MCA_plm_rsh_agent": agent,
        "OMPI_MCA_ras": "^slurm",
        "PRTE_MCA_plm_ssh_agent": agent,
        "PRTE_MCA_ras": "^slurm",
        "TI_SLURM_AGENT_DIR": agent_dir(ctx.job_dir),  # put first on PATH, so `ssh` is the agent
    }


def hostfile(ctx: NodeContext) -> str | None:
    slots = ctx.plan.components[0].slots
    return "".join(f"{name} slots={slots}\n" for name in ctx.layout.groups[0])


def runs_command(ctx: NodeContext) -> bool:
    return True
