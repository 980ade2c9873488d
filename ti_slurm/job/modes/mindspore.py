"""MindSpore: one worker per node in MindSpore's dynamic cluster, its scheduler started by ti-slurm.

MindSpore's ``mindspore.communication.init()`` builds the cluster from ``MS_ROLE`` (``MS_WORKER`` or
``MS_SCHED``), ``MS_SCHED_HOST``/``MS_SCHED_PORT`` (the scheduler), ``MS_WORKER_NUM`` (how many workers
join) and ``MS_NODE_ID`` (this worker's id). Every node gets them as a worker, with ``MS_NODE_ID`` its node
rank, and the TI names beside them (``MASTER_ADDR``/``MASTER_PORT`` = the scheduler, ``RANK``, ``WORLD_SIZE``
= nodes). Node 0 also runs the scheduler process (the job's Python calling ``init()`` as ``MS_SCHED``), in
a process group of its own. It serves until every node's command has ended (their exit records are in
the job directory: a worker still finishing talks to it), then it is stopped; a failed command on node 0
stops it at once (the job has failed).

A command that runs ``msrun`` starts its own scheduler on node rank 0 (``msrun --worker_num=$MS_WORKER_NUM
--local_worker_num=1 --master_addr=$MS_SCHED_HOST --master_port=$MS_SCHED_PORT --node_rank=$MS_NODE_ID
--join=True train.py``), so ti-slurm starts none then.
"""

from __future__ import annotations

import re

from ti_slurm.job.modes.base import Mode

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    import subprocess

    from ti_slurm.core.plan import JobPlan
    from ti_slurm.job.modes.base import NodeContext, NodeRunView

SCHEDULER = "from mindspore.communication import init; init()"  # as MS_SCHED: serves until the workers end
MSRUN = re.compile(r"(?:^|[\s;&|(/])msrun(?:\s|$)")


class MindSpore(Mode):
    name = "mindspore"
    env_names = frozenset(
        {"MS_ROLE", "MS_SCHED_HOST", "MS_SCHED_PORT", "MS_WORKER_NUM", "MS_NODE_ID", "MASTER_ADDR", "MASTER_PORT"}
        | {"WORLD_SIZE", "RANK"}
    )

    def role(self, ctx: NodeContext) -> str:
        return "master" if ctx.global_index == 0 else "worker"

    def node_env(self, ctx: NodeContext) -> dict[str, str]:
        host, port = ctx.layout.addr(ctx.layout.nodes[0][0]), str(ctx.plan.master_port or ctx.port(0))
        nodes, rank = str(ctx.plan.total_nodes), str(ctx.global_index)
        return {
            "MS_ROLE": "MS_WORKER",
            "MS_SCHED_HOST": host,
            "MS_SCHED_PORT": port,
            "MS_WORKER_NUM": nodes,
            "MS_NODE_ID": rank,
            "MASTER_ADDR": host,
            "MASTER_PORT": port,
            "WORLD_SIZE": nodes,
            "RANK": rank,
        }

    def listen_ports(self, ctx: NodeContext) -> list[tuple[int, str]]:
        if ctx.global_index != 0:
            return []
        return [(int(self.node_env(ctx)["MS_SCHED_PORT"]), "MS_SCHED_PORT")]

    def run_node(self, run: NodeRunView) -> int:
        """Node 0: the scheduler beside the command (unless the command runs msrun); every node: the command."""
        if run.contract.role != "master" or runs_msrun(run.plan, run.component):
            return run.run_command()
        import sys

        from ti_slurm.job.process import start_group, terminate

        python = "python3" if run.image is not None else sys.executable  # in an image: the image's
        env = {**run.env, "MS_ROLE": "MS_SCHED"}
        workdir = None if run.image is not None else run.plan.workdir or None
        scheduler = start_group(run.argv(f"exec {python} -c '{SCHEDULER}'"), env, workdir)
        try:
            code = run.run_command()
            if code == 0:
                wait_for_the_others(run, scheduler)
            return code
        finally:
            terminate(scheduler, run.plan.stop_grace, group=True)


def wait_for_the_others(run: NodeRunView, scheduler: subprocess.Popen[bytes]) -> None:
    """Until every node's command has ended (or the scheduler did, or the rendezvous timeout passed)."""
    import os
    import time

    from ti_slurm.core.paths import JobPaths

    paths, comp = JobPaths(run.job_dir), run.plan.components[run.component]
    records = [paths.node_record(comp.name, i) for i in range(1, comp.nodes)]
    deadline = time.monotonic() + run.plan.rendezvous_timeout
    while scheduler.poll() is None and time.monotonic() < deadline:
        if all(os.path.exists(path) for path in records):
            return
        time.sleep(0.2)


def runs_msrun(plan: JobPlan, component: int) -> bool:
    """Whether the command starts MindSpore's own launcher (which brings its own scheduler)."""
    return MSRUN.search(plan.command_of(component)) is not None


MODE = MindSpore()
