"""Horovod: like MPI, but the command runs on the launcher (node 0) only.

The workers stay allocated and reachable (through the launch agent, as in
MPI mode) until the launcher ends; the job's result is the launcher's.
"""

from __future__ import annotations

from ti_slurm.job.modes.base import Rule
from ti_slurm.job.modes.mpi import MPI

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from collections.abc import Sequence

    from ti_slurm.core.plan import Component
    from ti_slurm.job.modes.base import NodeContext, NodeRunView


class Horovod(MPI):
    name = "horovod"
    rule = Rule(launcher_only=True)

    def resizable_component(self, components: Sequence[Component]) -> int | None:
        return None

    # the workers run no step of their own (mpirun starts their processes), so no beat says one is lost
    fixed_size = (
        "horovod's workers run no step of their own until mpirun starts them: a lost one cannot be told "
        "in seconds, so horovod takes no spare nodes and no range of nodes (mode mpi takes both)"
    )

    def runs_command(self, ctx: NodeContext) -> bool:
        return ctx.global_index == 0

    def run_node(self, run: NodeRunView) -> int:
        if run.contract.runs_command:
            return run.run_command()
        # A worker of a hand-written script (ti-slurm exec on every node): stay allocated until stopped.
        import signal

        signal.sigwait({signal.SIGTERM, signal.SIGINT})
        return 0


MODE = Horovod()
