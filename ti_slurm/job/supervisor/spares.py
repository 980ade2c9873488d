"""Which allocated nodes an attempt runs on: each component's own, and its spares (``spare_nodes``).

A component with spares is allocated more nodes than it runs on; the others wait idle. When a node is
lost, a restart in place gives its place (and its rank) to a spare, and the lost node is never used
again in this allocation (a requeue excludes it too, as every lost node). Pure: the supervisor
asks, the launcher is told.
"""

from __future__ import annotations

from collections.abc import Callable

from ti_slurm.core.plan import JobPlan
from ti_slurm.job.supervisor.judge import NodeNames, Outcome
from ti_slurm.job.supervisor.launchers import Launcher


class NodeSet:
    """The allocation's nodes per component, the ones the current attempt runs on, and those taken out."""

    def __init__(self, plan: JobPlan, launcher: Launcher) -> None:
        self.allocated = [launcher.node_names(c) for c in range(len(plan.components))]
        # a requeued job's allocation holds no lost node; each component runs on its first nodes
        self.running = [list(names[: comp.nodes]) for comp, names in zip(plan.components, self.allocated, strict=True)]
        self.taken_out: list[str] = []
        launcher.assign(self.running)

    @property
    def names(self) -> NodeNames:
        return NodeNames(self.running)

    def spares(self, component: int) -> list[str]:
        """The component's idle nodes that may still take a place."""
        busy = set(self.running[component]) | set(self.taken_out)
        return [name for name in self.allocated[component] if name not in busy]

    def any_spare(self) -> bool:
        return any(self.spares(c) for c in range(len(self.allocated)))

    def replacements(self, outcome: Outcome) -> dict[str, str] | None:
        """The attempt's lost nodes -> the spares that take their places; None when it lost none, or some lost
        node has no spare to take its place."""
        lost = outcome.lost_nodes
        if not lost:
            return None
        out: dict[str, str] = {}
        for c, names in enumerate(self.running):
            gone = [name for name in names if name in lost]
            spares = self.spares(c)
            if len(gone) > len(spares):
                return None
            out.update(zip(gone, spares, strict=False))
        return out if set(out) == set(lost) else None

    def swap(self, replaced: dict[str, str], launcher: Launcher, say: Callable[[str], None]) -> NodeNames:
        """Each lost node's place goes to its spare, from the launcher's next start; the lost nodes are out
        for good. The new attempt's names."""
        self.running = [[replaced.get(name, name) for name in names] for names in self.running]
        self.taken_out.extend(name for name in replaced if name not in self.taken_out)
        launcher.assign(self.running)
        say("in place of the lost node(s): " + ", ".join(f"{lost} -> {spare}" for lost, spare in replaced.items()))
        return self.names
