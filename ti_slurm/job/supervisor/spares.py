"""Which allocated nodes an attempt runs on: each component's own, its spares (``spare_nodes``), and how
many of them when its size is elastic (``nodes: {min, max}``).

A component with spares is allocated more nodes than it runs on; the others wait idle. When a node is
lost, a restart in place gives its place (and its rank) to a spare; with no spare left, an elastic
component goes on without it, down to its ``min``. A lost node is never used again in this allocation
(a requeue excludes it too, as every lost node). Pure: the supervisor asks, the launcher is told.
"""

from __future__ import annotations

from collections.abc import Callable

from ti_slurm.core.plan import Component, JobPlan
from ti_slurm.job.supervisor.judge import NodeNames, Outcome
from ti_slurm.job.supervisor.launchers import Launcher

# a lost node -> the spare that takes its place, or None: the component goes on without it (elastic size)
Replacements = dict[str, str | None]


class NodeSet:
    """The allocation's nodes per component, the ones the current attempt runs on, and those taken out."""

    def __init__(self, plan: JobPlan, launcher: Launcher) -> None:
        self.asked = plan  # the plan as submitted: each component's most (and fewest) nodes
        self.allocated = [launcher.node_names(c) for c in range(len(plan.components))]
        # a requeued job's allocation holds no lost node; each component runs on its first nodes
        self.running = [
            names[: first_size(comp, len(names))] for comp, names in zip(plan.components, self.allocated, strict=True)
        ]
        self.taken_out: list[str] = []
        # a component goes on with fewer nodes only where nodes have names of their own (not the local runner's)
        self.may_shrink = launcher.resolves_names
        launcher.assign(self.running)

    @property
    def names(self) -> NodeNames:
        return NodeNames(self.running)

    @property
    def plan(self) -> JobPlan:
        """The attempt's plan: the submitted one, sized to the nodes it runs on."""
        return self.asked.sized([len(names) for names in self.running])

    def spares(self, component: int) -> list[str]:
        """The component's idle nodes that may still take a place."""
        busy = set(self.running[component]) | set(self.taken_out)
        return [name for name in self.allocated[component] if name not in busy]

    def start_fields(self, replaced: Replacements | None) -> dict[str, object]:
        """The attempt's start record's: each lost node -> the spare in its place (None: none), and the spares it
        holds idle (what holding them costs, in status)."""
        fields: dict[str, object] = {"replaced": replaced} if replaced else {}
        idle = [name for c in range(len(self.allocated)) for name in self.spares(c)]
        return fields | ({"idle": idle} if idle else {})

    def outlives_a_loss(self) -> bool:
        """Could the job go on in place after losing a node: a spare is left, or a component may shrink."""
        return any(self.spares(c) or self.shrinkable(c) for c in range(len(self.allocated)))

    def shrinkable(self, component: int, by: int = 1) -> bool:
        return self.may_shrink and len(self.running[component]) - by >= self.asked.components[component].fewest

    def replacements(self, outcome: Outcome) -> Replacements | None:
        """What becomes of each of the attempt's lost nodes: a spare takes its place, or (none left, the size
        elastic) its component goes on without it. None when it lost none, or the job cannot go on here."""
        lost = outcome.lost_nodes
        if not lost:
            return None
        out: Replacements = {}
        for c, names in enumerate(self.running):
            gone = [name for name in names if name in lost]
            spares = self.spares(c)
            left_out = gone[len(spares) :]
            if left_out and not self.shrinkable(c, len(left_out)):
                return None
            out.update(zip(gone, spares, strict=False))
            out.update(dict.fromkeys(left_out))
        return out if set(out) == set(lost) else None

    def can_replace(self, outcome: Outcome) -> bool:
        """Whether the attempt could go on in place without the outcome's lost (or bad) nodes."""
        return self.replacements(outcome) is not None

    def swap(self, replaced: Replacements, launcher: Launcher, say: Callable[[str], None]) -> NodeNames:
        """Each lost node's place goes to its spare, or is given up, from the launcher's next start; the lost
        nodes are out for good. The new attempt's names."""
        self.running = [
            [new for name in names if (new := replaced.get(name, name)) is not None] for names in self.running
        ]
        self.taken_out.extend(name for name in replaced if name not in self.taken_out)
        launcher.assign(self.running)
        swapped = [f"{lost} -> {spare}" for lost, spare in replaced.items() if spare is not None]
        if swapped:
            say("in place of the lost node(s): " + ", ".join(swapped))
        left_out = [lost for lost, spare in replaced.items() if spare is None]
        if left_out:
            comps = zip(self.asked.components, self.running, strict=True)
            sizes = ", ".join(f"{c.name} {len(names)} of {c.nodes}" for c, names in comps)
            say(f"going on without the lost node(s) {', '.join(left_out)}, on fewer nodes: {sizes}")
        return self.names


def first_size(comp: Component, given: int) -> int:
    """How many of the nodes Slurm gave a component its first attempt runs on: all but its spares, at most
    its ``nodes`` (an elastic component got what Slurm had in its range)."""
    return min(comp.nodes, max(comp.fewest, given - comp.spares))
