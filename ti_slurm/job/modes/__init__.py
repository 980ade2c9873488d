"""Training modes: each a :class:`Mode` in one module of this package.

A mode says everything that differs between DDP, MPI, Horovod, PS-Worker and
Ray, and nothing else does:

- at submit (pure): which spec fields name its roles, its own spec rules, the
  components (Slurm heterogeneous-job components) a spec becomes, and upper
  bounds of its variables' sizes;
- on every node (the job path): the node's role, its variables, its hostfile,
  whether it runs the start command, and how it runs it (Ray's node runtime,
  DDP's wait for the master);
- for the supervisor: its success :class:`Rule` and how many ports it takes.

Adding a mode is adding one module here whose ``MODE`` is an instance of a
:class:`Mode` subclass; :func:`mode_names` finds it by its file, and
:func:`get_mode` imports only the one a job uses. Standard library only: this
runs in every job step.
"""

from __future__ import annotations

from ti_slurm.job.plan import Component, Container
from ti_slurm.job.record import Record

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from typing import ClassVar

    from ti_slurm.job.contract import NodeContext
    from ti_slurm.job.node import NodeRun
    from ti_slurm.job.plan import JobPlan
    from ti_slurm.spec import ComponentSpec, ContainerSpec, JobSpec


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


class Mode:
    """A training mode. Subclasses set ``name`` and implement :meth:`role` and :meth:`node_env`."""

    name: ClassVar[str]
    rule: ClassVar[Rule] = Rule()
    # the spec fields that give each role its own resources; () means one component sized by `nodes`
    role_fields: ClassVar[tuple[str, ...]] = ()
    ports_per_node: ClassVar[int] = 1  # ports one node takes (one block per node in the local runner)
    ports_per_job: ClassVar[int] = 8  # the job's port block on a node: one per component, at most 8

    # -- at submit: the spec's side (pure) -------------------------------------
    def check_spec(self, spec: JobSpec) -> None:
        """Rules of this mode beyond the spec's own; raise :class:`~ti_slurm.errors.SpecError`."""

    def components(self, spec: JobSpec) -> tuple[Component, ...]:
        """The components a valid spec becomes, in heterogeneous-job order."""
        return (component(self.name, None, spec),)

    def component_names(self, count: int) -> list[str]:
        """Names of the components of a hand-written job with ``count`` of them (``ti-slurm exec``)."""
        return [self.name]

    def env_bounds(self, plan: JobPlan) -> dict[str, int]:
        """Upper bounds, in bytes, of variables whose size grows with the job (checked at submit)."""
        return {}

    # -- on every node -----------------------------------------------------------
    def role(self, ctx: NodeContext) -> str:
        """This node's role (``TI_SLURM_ROLE``): master/worker, launcher/worker, ps/worker, head/worker."""
        raise NotImplementedError

    def node_env(self, ctx: NodeContext) -> dict[str, str]:
        """This node's mode-specific variables."""
        raise NotImplementedError

    def hostfile(self, ctx: NodeContext) -> str | None:
        """The hostfile's text, where the mode has one."""
        return None

    def runs_command(self, ctx: NodeContext) -> bool:
        """Whether this node runs the start command."""
        return True

    def listen_ports(self, ctx: NodeContext) -> list[tuple[int, str]]:
        """(port, what it is for) of each port this node's contract hands out for it to listen on."""
        return []

    def run_node(self, run: NodeRun) -> int:
        """Serve this node once its contract is ready: by default, run the command and record its exit."""
        return run.run_command()


def component(name: str, part: ComponentSpec | None, spec: JobSpec, command: str = "") -> Component:
    """A component from a role's part of the spec; the spec's top level fills in what the role leaves out."""
    if part is None:
        nodes, gpus, cpus, mem, partition = spec.nodes or 1, None, None, None, None
    else:
        nodes, gpus, cpus, mem, partition = part.nodes, part.gpus_per_node, part.cpus_per_node, part.mem, part.partition
    return Component(
        name=name,
        nodes=nodes,
        gpus_per_node=spec.gpus_per_node if gpus is None else gpus,
        cpus_per_node=int(spec.cpus_per_node if cpus is None else cpus),
        mem=spec.mem if mem is None else mem,
        partition=spec.partition if partition is None else partition,
        command=command,
        container=container_of(part.container if part is not None and part.container else spec.container),
    )


def container_of(spec: ContainerSpec | None) -> Container | None:
    """The plan's record of a ``container:`` section."""
    if spec is None:
        return None
    return Container(spec.image, spec.runtime or "", tuple(spec.mounts), spec.workdir or "")


def mode_names() -> tuple[str, ...]:
    """Every mode's name (``ps_worker.py`` is ``ps-worker``), from this package's modules."""
    import os

    folder = os.path.dirname(os.path.abspath(__file__))
    return tuple(
        sorted(
            name[:-3].replace("_", "-")
            for name in os.listdir(folder)
            if name.endswith(".py") and not name.startswith("_")
        )
    )


_LOADED: dict[str, Mode] = {}


def get_mode(name: str) -> Mode:
    """The mode called ``name``; imports its module only (a ValueError for an unknown name)."""
    mode = _LOADED.get(name)
    if mode is None:
        if name not in mode_names():
            raise ValueError(f"unknown mode {name!r}; expected one of: {', '.join(mode_names())}")
        import importlib

        mode = importlib.import_module(f"ti_slurm.job.modes.{name.replace('-', '_')}").MODE
        if not isinstance(mode, Mode) or mode.name != name:
            raise TypeError(f"ti_slurm/job/modes/{name.replace('-', '_')}.py: MODE must be the Mode named {name!r}")
        _LOADED[name] = mode
    return mode
