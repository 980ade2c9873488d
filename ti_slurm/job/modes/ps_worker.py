"""TensorFlow PS-Worker: two components, ``ps`` then ``worker``.

Every task gets ``TF_CONFIG`` with the ``ip:port`` of every ps and worker
task and its own ``task.type``/``task.index``. Parameter servers never exit
by themselves: the job is done when every worker has exited 0, then the ps
tasks are stopped and the job succeeds. With ``platform: modelarts`` each
task's command gets ModelArts' ``--task_name=ps|worker`` appended (:mod:`ti_slurm.job.platforms.modelarts`).
"""

from __future__ import annotations

from ti_slurm.core import lightjson
from ti_slurm.job.modes.base import Mode, Rule, component

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from collections.abc import Sequence

    from ti_slurm.core.plan import Component, JobPlan
    from ti_slurm.job.modes.base import NodeContext, SpecView

WORST_ADDR = "255.255.255.255:65535"


def tf_config(cluster: dict[str, list[str]], task: dict[str, object]) -> str:
    """The TF_CONFIG text, compact (the seed's layout, without the indentation)."""
    return lightjson.dumps({"cluster": cluster, "task": task, "environment": "cloud"})


class PSWorker(Mode):
    name = "ps-worker"
    env_names = frozenset({"TF_CONFIG"})
    rule = Rule(required=("worker",))
    role_fields = ("ps", "worker")

    def check_spec(self, spec: SpecView) -> None:
        from ti_slurm.core.errors import SpecError

        for key in self.role_fields:
            if getattr(spec, key) is None:
                raise SpecError(key, None, "mode ps-worker needs both 'ps' and 'worker' (each at least 1 node)")

    def components(self, spec: SpecView) -> tuple[Component, ...]:
        return tuple(component(role, getattr(spec, role), spec) for role in self.role_fields)

    def component_names(self, count: int) -> list[str]:
        return list(self.role_fields)

    def resizable_component(self, components: Sequence[Component]) -> int | None:
        return [c.name for c in components].index("worker")  # a lost parameter server requeues the job

    def env_bounds(self, plan: JobPlan) -> dict[str, int]:
        from ti_slurm.core.environ import env_string_size

        cluster = {c.name: [WORST_ADDR] * c.nodes for c in plan.components}
        worst = tf_config(cluster, {"type": "worker", "index": plan.total_nodes})
        return {"TF_CONFIG": env_string_size("TF_CONFIG", worst)}

    def role(self, ctx: NodeContext) -> str:
        return ctx.plan.components[ctx.component].name

    def listen_ports(self, ctx: NodeContext) -> list[tuple[int, str]]:
        return [(ctx.port(ctx.component, ctx.index), f"this {self.role(ctx)} task's port in TF_CONFIG")]

    def node_env(self, ctx: NodeContext) -> dict[str, str]:
        addr = ctx.layout.addr
        cluster = {
            comp.name: [f"{addr(n)}:{ctx.port(c, i)}" for i, n in enumerate(ctx.layout.nodes[c])]
            for c, comp in enumerate(ctx.plan.components)
        }
        return {"TF_CONFIG": tf_config(cluster, {"type": self.role(ctx), "index": ctx.index})}


MODE = PSWorker()
