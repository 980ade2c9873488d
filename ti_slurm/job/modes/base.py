"""What a mode is (:class:`Mode`, its success :class:`Rule`) and the two views a mode gets of a node.

- :class:`NodeContext`: the node's place in the job, when its variables are computed (pure);
- :class:`NodeRunView`: the node's step, when it runs (its environment, its image, its exit record).

Modes and the code that calls them both import this module; it imports neither, so a mode
never reaches into :mod:`ti_slurm.job.contract`, :mod:`ti_slurm.job.node` or the spec.
The spec's side is typed by protocols too (:class:`SpecView`): a mode reads the spec's
fields, the spec asks :func:`~ti_slurm.job.modes.get_mode` for its mode.
"""

from __future__ import annotations

from ti_slurm.core.plan import Component, Container
from ti_slurm.core.record import Record

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import ClassVar, Protocol

    from ti_slurm.core.plan import JobPlan

    class ContainerSpecView(Protocol):
        """A ``container:`` section as a mode reads it."""

        @property
        def image(self) -> str: ...
        @property
        def runtime(self) -> str | None: ...
        @property
        def mounts(self) -> Sequence[str]: ...
        @property
        def workdir(self) -> str | None: ...

    class NodeRangeView(Protocol):
        """``nodes: {min, max}``: elastic size."""

        @property
        def min(self) -> int: ...
        @property
        def max(self) -> int: ...

    class PlacementView(Protocol):
        """Where a part of the spec runs: what the whole spec and each role field both say."""

        @property
        def mem(self) -> str | None: ...
        @property
        def partition(self) -> str | None: ...
        @property
        def container(self) -> ContainerSpecView | None: ...

    class RoleSpecView(PlacementView, Protocol):
        """One role field's part of the spec (``ps``, ``worker``, ``head``, a worker group): None where the
        spec's top level decides."""

        @property
        def nodes(self) -> int | NodeRangeView: ...
        @property
        def gpus_per_node(self) -> int | None: ...
        @property
        def npus_per_node(self) -> int | None: ...
        @property
        def cpus_per_node(self) -> float | None: ...

    class SpecView(PlacementView, Protocol):
        """The user's spec as a mode reads it (:class:`ti_slurm.submitting.spec.JobSpec` is one)."""

        @property
        def command(self) -> str: ...
        @property
        def nodes(self) -> int | NodeRangeView | None: ...
        @property
        def gpus_per_node(self) -> int: ...
        @property
        def npus_per_node(self) -> int: ...
        @property
        def cpus_per_node(self) -> float: ...
        @property
        def head(self) -> RoleSpecView | None: ...
        @property
        def worker_groups(self) -> Sequence[RoleSpecView] | None: ...
        def cpu_counts(self) -> list[tuple[str, float]]: ...

    class ContractView(Protocol):
        """What a running node's contract tells its mode."""

        @property
        def node(self) -> str: ...
        @property
        def index(self) -> int: ...
        @property
        def role(self) -> str: ...
        @property
        def runs_command(self) -> bool: ...

    class ImageView(Protocol):
        def argv(self, command: str) -> list[str]: ...

    class NodeRunView(Protocol):
        """A node's step as its mode runs it (:class:`ti_slurm.job.node.NodeRun` is one)."""

        @property
        def plan(self) -> JobPlan: ...
        @property
        def component(self) -> int: ...
        @property
        def contract(self) -> ContractView: ...
        @property
        def env(self) -> dict[str, str]: ...
        @property
        def job_dir(self) -> str: ...
        @property
        def image(self) -> ImageView | None: ...
        def argv(self, command: str) -> list[str]: ...
        def record(self, code: int, error: str = "") -> None: ...
        def run_command(
            self, command: str | None = None, guard: Callable[[], int | None] | None = None, record: bool = True
        ) -> int: ...


class JobLayout(Record):
    """What every node of one job sees alike."""

    job_id: int
    nodes: tuple[tuple[str, ...], ...]  # node names per component, in rank order
    ports: tuple[tuple[int, ...], ...]  # a port per node, per component
    partitions: tuple[str, ...]
    addr: Callable[[str], str]

    def global_index(self, component: int, index: int) -> int:
        return sum(len(names) for names in self.nodes[:component]) + index


class NodeContext(Record):
    """One node's place in a job: what a mode needs to compute its variables."""

    plan: JobPlan
    layout: JobLayout
    component: int  # the component's index
    index: int  # node index within the component (SLURM_NODEID)
    job_dir: str

    @property
    def global_index(self) -> int:
        return self.layout.global_index(self.component, self.index)

    @property
    def name(self) -> str:
        return self.layout.nodes[self.component][self.index]

    def port(self, component: int, index: int = 0) -> int:
        return self.layout.ports[component][index]


class Rule(Record):
    """The success rule of a mode.

    - ``required``: components whose every node must exit 0 (``None``: all of
      them); the job ends when they all have.
    - Every other component is *background*: it serves the required ones and
      never ends by itself (parameter servers, Ray workers). It is stopped once
      the required ones finish; one that exits before then fails the job.
    - ``launcher_only``: the command runs on node 0 only; the other nodes stay
      allocated and reachable, and are not steps that can fail (Horovod).
    - ``runtime_background``: the background components run the mode's runtime
      (Ray's daemons), not the start command: what fails there is never the
      user's own bug.
    """

    required: tuple[str, ...] | None = None
    launcher_only: bool = False
    runtime_background: bool = False

    def is_required(self, component: str) -> bool:
        return self.required is None or component in self.required

    def runs_runtime_only(self, component: str) -> bool:
        """Whether ``component``'s nodes run the mode's runtime only (none of the user's command)."""
        return self.runtime_background and not self.is_required(component)


class Mode:
    """A training mode. Subclasses set ``name`` and implement :meth:`role` and :meth:`node_env`."""

    name: ClassVar[str]
    rule: ClassVar[Rule] = Rule()
    # the spec fields that give each role its own resources; () means one component sized by `nodes`
    role_fields: ClassVar[tuple[str, ...]] = ()
    # the variables node_env sets (on some node at least): a spec's `env:` may not set them (ti-slurm would
    # override them); tests/unit/test_contract.py checks them against what node_env returns
    env_names: ClassVar[frozenset[str]] = frozenset()
    ports_per_node: ClassVar[int] = 1  # ports one node takes (one block per node in the local runner)
    ports_per_job: ClassVar[int] = 8  # the job's port block on a node: one per component, at most 8

    # -- at submit: the spec's side (pure) -------------------------------------
    def check_spec(self, spec: SpecView) -> None:
        """Rules of this mode beyond the spec's own; raise :class:`~ti_slurm.core.errors.SpecError`."""

    def components(self, spec: SpecView) -> tuple[Component, ...]:
        """The components a valid spec becomes, in heterogeneous-job order."""
        return (component(self.name, None, spec),)

    def component_names(self, count: int) -> list[str]:
        """Names of the components of a hand-written job with ``count`` of them (``ti-slurm exec``)."""
        return [self.name]

    def resizable_component(self, components: Sequence[Component]) -> int | None:
        """The component whose number of nodes may change: spare nodes join it (``spare_nodes``: they take the
        places of its lost nodes), and it may be given a range (``nodes: {min, max}``). None: no component."""
        return 0 if len(components) == 1 else None

    # why resizable_component named none (the spec's one line)
    fixed_size: ClassVar[str] = "this mode's nodes are fixed in number: it takes no spare nodes and no range of nodes"

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

    def run_node(self, run: NodeRunView) -> int:
        """Serve this node once its contract is ready: by default, run the command and record its exit."""
        return run.run_command()


def component(name: str, part: RoleSpecView | None, spec: SpecView, command: str = "") -> Component:
    """A component from a role's part of the spec; the spec's top level fills in what the role leaves out."""
    if part is None:
        nodes, gpus, npus, cpus, mem, partition = spec.nodes or 1, None, None, None, None, None
    else:
        nodes, gpus, npus = part.nodes, part.gpus_per_node, part.npus_per_node
        cpus, mem, partition = part.cpus_per_node, part.mem, part.partition
    most, fewest = (nodes, 0) if isinstance(nodes, int) else (nodes.max, nodes.min)
    return Component(
        name=name,
        nodes=most,
        min_nodes=fewest,
        gpus_per_node=spec.gpus_per_node if gpus is None else gpus,
        npus_per_node=spec.npus_per_node if npus is None else npus,
        cpus_per_node=int(spec.cpus_per_node if cpus is None else cpus),
        mem=spec.mem if mem is None else mem,
        partition=spec.partition if partition is None else partition,
        command=command,
        container=container_of(part.container if part is not None and part.container else spec.container),
    )


def container_of(spec: ContainerSpecView | None) -> Container | None:
    """The plan's record of a ``container:`` section."""
    if spec is None:
        return None
    return Container(spec.image, spec.runtime or "", tuple(spec.mounts), spec.workdir or "")
