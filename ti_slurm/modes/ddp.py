"""PyTorch DDP: one group of nodes; node 0 is the master (RANK=0).

The command runs on every node. ``WORLD_SIZE`` is the number of *nodes* and
``RANK`` the node rank, as the TI platform defines them (torchrun's own
WORLD_SIZE counts processes); the seed's launch line maps them to
``--nnodes`` and ``--node_rank``.
"""

from __future__ import annotations

from ti_slurm.contract import NodeContext
from ti_slurm.modes import Rule

RULE = Rule()
PORTS_PER_JOB = 8
PORTS_PER_NODE = 1


def role(ctx: NodeContext) -> str:
    return "master" if ctx.global_index == 0 else "worker"


def node_env(ctx: NodeContext) -> dict[str, str]:
    master = ctx.layout.groups[0][0]
    return {
        "MASTER_ADDR": ctx.layout.addr(master),
        "MASTER_PORT": str(ctx.plan.master_port or ctx.port(0)),
        "WORLD_SIZE": str(ctx.plan.total_nodes),
        "RANK": str(ctx.global_index),
    }


def hostfile(ctx: NodeContext) -> str | None:
    return None


def runs_command(ctx: NodeContext) -> bool:
    return True
