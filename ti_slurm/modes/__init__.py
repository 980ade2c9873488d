"""Training modes: one module each, all of a mode in one place.

A mode module defines:

- ``role(ctx)``, ``node_env(ctx)``, ``hostfile(ctx)``, ``runs_command(ctx)``:
  its share of the platform contract for one node;
- ``RULE``: how the supervisor decides success (see :class:`Rule`);
- ``PORTS_PER_JOB`` / ``PORTS_PER_NODE``: how many ports it needs.

Light imports only: this runs in every job step.
"""

from __future__ import annotations

from ti_slurm.record import Record

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from types import ModuleType


class Rule(Record):
    """The success rule of a mode.

    - ``required``: components whose every node must exit 0 (``None``: all of
      them); the job ends when they all have.
    - Every other component is *background*: it serves the required ones and
      never ends by itself (parameter servers, Ray workers). It is stopped once
      the required ones finish; one that exits before then fails the job.
    - ``launcher_only``: the command runs on node 0 only; the other nodes stay
      allocated and reachable, and are not steps that can fail (Horovod).
    """

    required: tuple[str, ...] | None = None
    launcher_only: bool = False

    def is_required(self, component: str) -> bool:
        return self.required is None or component in self.required


def _load() -> dict[str, ModuleType]:
    from ti_slurm.modes import ddp, horovod, mpi, ps_worker, ray

    return {"ddp": ddp, "mpi": mpi, "horovod": horovod, "ps-worker": ps_worker, "ray": ray}


MODES: dict[str, ModuleType] = _load()
