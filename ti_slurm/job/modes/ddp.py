"""PyTorch DDP: one component; node 0 is the master (RANK=0).

The command runs on every node. ``WORLD_SIZE`` is the number of *nodes* and
``RANK`` the node rank, as the TI platform defines them (torchrun's own
WORLD_SIZE counts processes); the seed's launch line maps them to
``--nnodes`` and ``--node_rank``. Workers wait for the master
(``MASTER_ADDR:MASTER_PORT``), bounded by the rendezvous timeout.
"""

from __future__ import annotations

import sys

from ti_slurm.job.modes import Mode

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from ti_slurm.job.contract import NodeContext
    from ti_slurm.job.node import NodeRun

RENDEZVOUS_EXIT = 124  # like timeout(1)


class DDP(Mode):
    name = "ddp"

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

    def run_node(self, run: NodeRun) -> int:
        if run.contract.role != "master":
            from ti_slurm.job.node import wait_for_port

            addr, port, timeout = run.env["MASTER_ADDR"], int(run.env["MASTER_PORT"]), run.plan.rendezvous_timeout
            if not wait_for_port(addr, port, timeout):
                print(
                    f"ti-slurm: rendezvous timeout: master {addr}:{port} did not come up within {timeout}s",
                    file=sys.stderr,
                )
                run.record(RENDEZVOUS_EXIT)
                return RENDEZVOUS_EXIT
        return run.run_command()


MODE = DDP()
