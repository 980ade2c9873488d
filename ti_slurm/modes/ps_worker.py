"""TensorFlow PS-Worker: two components, ``ps`` then ``worker``.

Every task gets ``TF_CONFIG`` with the ``ip:port`` of every ps and worker
task and its own ``task.type``/``task.index``. Parameter servers never exit
by themselves: the job is done when every worker has exited 0, then the ps
tasks are stopped and the job succeeds.
"""

from __future__ import annotations

from ti_slurm import lightjson
from ti_slurm.modes import Rule

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from ti_slurm.contract import NodeContext

RULE = Rule(required=("worker",))
PORTS_PER_JOB = 8
PORTS_PER_NODE = 1


def role(ctx: NodeContext) -> str:
    return ctx.plan.components[ctx.group].name


def tf_config(ctx: NodeContext) -> str:
    addr = ctx.layout.addr
    cluster = {
        comp.name: [f"{addr(n)}:{ctx.port(g, i)}" for i, n in enumerate(ctx.layout.groups[g])]
        for g, comp in enumerate(ctx.plan.components)
    }
    return json_config(cluster, {"type": role(ctx), "index": ctx.index})


def json_config(cluster: dict[str, list[str]], task: dict[str, object]) -> str:
    """The TF_CONFIG text, compact (the seed's layout, without the indentation)."""
    return lightjson.dumps({"cluster": cluster, "task": task, "environment": "cloud"})


def node_env(ctx: NodeContext) -> dict[str, str]:
    return {"TF_CONFIG": tf_config(ctx)}


def hostfile(ctx: NodeContext) -> str | None:
    return None


def runs_command(ctx: NodeContext) -> bool:
    return True
