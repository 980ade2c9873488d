"""Horovod: like MPI, but the command runs on the launcher (node 0) only.

The workers stay allocated and reachable (through the launch agent, as in
MPI mode) until the launcher ends; the job's result is the launcher's.
"""

from __future__ import annotations

from ti_slurm.contract import NodeContext
from ti_slurm.modes import Rule
from ti_slurm.modes.mpi import PORTS_PER_JOB, PORTS_PER_NODE, hostfile, node_env, role

RULE = Rule(launcher_only=True)

__all__ = ["PORTS_PER_JOB", "PORTS_PER_NODE", "RULE", "hostfile", "node_env", "role", "runs_command"]


def runs_command(ctx: NodeContext) -> bool:
    return ctx.global_index == 0
