"""A toy mode, as a newcomer would write one: ``test_extending.py`` drops this file into a copy of
``ti_slurm/job/modes/`` and runs a job with ``mode: toy``. Each node is a ``runner`` and learns its
place in the relay; only the last runner's command counts (the others are background: they hand
on and wait)."""

from __future__ import annotations

from ti_slurm.core.plan import Component
from ti_slurm.job.modes.base import Mode, Rule, component

TYPE_CHECKING = False  # as every mode: typing is not imported on the job path
if TYPE_CHECKING:
    from ti_slurm.job.modes.base import NodeContext, SpecView


class Toy(Mode):
    name = "toy"
    rule = Rule(required=("anchor",))
    role_fields = ()
    env_names = frozenset({"TOY_PLACE", "TOY_ROLE"})  # a spec's env: may not set them

    def components(self, spec: SpecView) -> tuple[Component, ...]:
        nodes = spec.nodes or 1
        runners = component("runners", None, spec).replace(nodes=nodes - 1)
        anchor = component("anchor", None, spec).replace(nodes=1)
        return (runners, anchor) if nodes > 1 else (anchor,)

    def component_names(self, count: int) -> list[str]:
        return ["runners", "anchor"][-count:]

    def role(self, ctx: NodeContext) -> str:
        return "anchor" if ctx.plan.components[ctx.component].name == "anchor" else "runner"

    def node_env(self, ctx: NodeContext) -> dict[str, str]:
        return {"TOY_PLACE": f"{ctx.global_index + 1} of {ctx.plan.total_nodes}", "TOY_ROLE": self.role(ctx)}


MODE = Toy()
