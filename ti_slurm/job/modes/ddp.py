"""PyTorch DDP: one component; node 0 is the master (RANK=0).

The command runs on every node. ``WORLD_SIZE`` is the number of *nodes* and
``RANK`` the node rank, as the TI platform defines them (torchrun's own
WORLD_SIZE counts processes); the seed's launch line maps them to
``--nnodes`` and ``--node_rank``.

Every node's command starts at once (the workers' setup overlaps the
master's). Beside each worker's command a watch keeps the platform's promise
that workers wait for the master: if ``MASTER_ADDR:MASTER_PORT`` has not
accepted a connection within the rendezvous timeout while the command still
runs, the command is stopped with a one-line error (exit 124). The watch ends
as soon as the port accepts once, or the master's node has exited.
"""

from __future__ import annotations

import os
import sys
import time

from ti_slurm.core.paths import JobPaths
from ti_slurm.job.modes.base import Mode

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from ti_slurm.job.modes.base import NodeContext, NodeRunView

RENDEZVOUS_EXIT = 124  # like timeout(1)


class MasterWatch:
    """A guard for a worker's command: ends it if the master never comes up (see the module's text)."""

    def __init__(self, addr: str, port: int, timeout: float, master_record: str) -> None:
        self.addr, self.port, self.timeout, self.master_record = addr, port, timeout, master_record
        self.deadline = time.monotonic() + timeout
        self.done = False

    def __call__(self) -> int | None:
        from ti_slurm.job.net import port_accepts

        if self.done:
            return None
        if os.path.exists(self.master_record) or port_accepts(self.addr, self.port, 0.25):
            self.done = True  # the master came up (or already finished): nothing left to watch
            return None
        if time.monotonic() < self.deadline:
            return None
        print(
            f"ti-slurm: rendezvous timeout: master {self.addr}:{self.port} did not come up within {self.timeout}s",
            file=sys.stderr,
            flush=True,
        )
        return RENDEZVOUS_EXIT


class DDP(Mode):
    name = "ddp"
    env_names = frozenset({"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"})

    def role(self, ctx: NodeContext) -> str:
        return "master" if ctx.global_index == 0 else "worker"

    def node_env(self, ctx: NodeContext) -> dict[str, str]:
        master = ctx.layout.nodes[0][0]
        return {
            "MASTER_ADDR": ctx.layout.addr(master),
            "MASTER_PORT": str(ctx.plan.master_port or ctx.port(0)),
            "WORLD_SIZE": str(ctx.plan.total_nodes),
            "RANK": str(ctx.global_index),
        }

    def listen_ports(self, ctx: NodeContext) -> list[tuple[int, str]]:
        return [(int(self.node_env(ctx)["MASTER_PORT"]), "MASTER_PORT")] if ctx.global_index == 0 else []

    def run_node(self, run: NodeRunView) -> int:
        if run.contract.role == "master":
            return run.run_command()
        env, plan = run.env, run.plan
        master_record = JobPaths(run.job_dir).node_record(plan.components[0].name, 0)
        watch = MasterWatch(env["MASTER_ADDR"], int(env["MASTER_PORT"]), plan.rendezvous_timeout, master_record)
        return run.run_command(guard=watch)


MODE = DDP()
