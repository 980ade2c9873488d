"""Huawei's ModelArts: its training-job environment and start-command conventions on top of the modes' contract.

Every node gets the variables ModelArts documents for a training job ("training job environment
variables", Huawei Cloud ModelArts developer guide), computed from the job's layout as the TI contract is:

- ``MA_CURRENT_IP`` (this node's address), ``MA_NUM_GPUS`` (its accelerators), ``MA_NUM_HOSTS`` (nodes in
  the job), ``MA_TASK_NAME`` (its role: ``worker``; ``ps``/``worker`` in PS-Worker jobs, each
  component's name in other multi-role jobs), ``MA_VJ_NAME`` (the job's name and Slurm id);
- Volcano's task variables, which ModelArts runs on: ``VC_TASK_INDEX`` and its older spelling
  ``VK_TASK_INDEX`` (the node's index within its task), and for every task ``VC_<TASK>_NUM`` and
  ``VC_<TASK>_HOSTS`` (its nodes' addresses in index order: ``${VC_WORKER_HOSTS%%,*}`` is the master,
  the same address as ``MASTER_ADDR``);
- the directories: ``MA_JOB_DIR`` is the parent of the code folder (ModelArts places the code folder in
  it, so scripts name ``${MA_JOB_DIR}/<code folder>/train.py``): here the parent of the job's code snapshot
  (``code:``), else of its working directory; ``MA_MOUNT_PATH`` the job's directory, ``MA_LOG_DIR`` its
  ``logs``, ``MA_HOME`` the user's home.

PS-Worker: ModelArts also tells each task its role with the hyperparameter ``--task_name=ps|worker``,
appended to the start command of every node of that role.
"""

from __future__ import annotations

import os

from ti_slurm.job.platforms.base import Platform

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from collections.abc import Mapping

    from ti_slurm.job.modes.base import NodeContext

SINGLE_TASK = "worker"  # ModelArts' one task of a PyTorch, MindSpore or MPI job


class ModelArts(Platform):
    name = "modelarts"
    reserved_prefixes = ("MA_", "VC_", "VK_")  # ModelArts' own; a job's `env:` may not set them

    def component_command(self, mode: str, component: str, command: str) -> str:
        return f"{command} --task_name={component}" if mode == "ps-worker" else ""

    def node_env(self, ctx: NodeContext, contract: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
        from ti_slurm.core.paths import JobPaths

        plan, layout = ctx.plan, ctx.layout
        tasks = task_names(ctx)
        own = plan.components[ctx.component]
        out = {
            "MA_CURRENT_IP": layout.addr(ctx.name),
            "MA_NUM_GPUS": str(own.accelerators),
            "MA_NUM_HOSTS": str(plan.total_nodes),
            "MA_TASK_NAME": tasks[ctx.component],
            "MA_VJ_NAME": f"{plan.name}-{layout.job_id}",
            "MA_JOB_DIR": os.path.dirname(plan.code_dir or plan.run_dir()),
            "MA_MOUNT_PATH": ctx.job_dir,
            "MA_LOG_DIR": JobPaths(ctx.job_dir).logs_dir,
            "MA_HOME": env.get("HOME") or os.path.expanduser("~"),
            "VC_TASK_INDEX": str(ctx.index if len(tasks) > 1 else ctx.global_index),
        }
        out["VK_TASK_INDEX"] = out["VC_TASK_INDEX"]
        for task, names in zip(tasks, layout.nodes, strict=True):
            key = task.upper().replace("-", "_")
            out[f"VC_{key}_NUM"] = str(len(names))
            out[f"VC_{key}_HOSTS"] = ",".join(layout.addr(name) for name in names)
        return out


def task_names(ctx: NodeContext) -> list[str]:
    """ModelArts' task of each component: one ``worker`` task for a one-component job, else the components'
    names (``ps`` and ``worker`` for PS-Worker)."""
    components = ctx.plan.components
    return [SINGLE_TASK] if len(components) == 1 else [c.name for c in components]


PLATFORM = ModelArts()
