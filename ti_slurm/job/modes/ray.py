"""Ray: a head component and up to five worker groups.

``HEAD_ADDR``/``HEAD_PORT`` name the head, ``RANK`` and ``INDEX`` are the
node's place (head = 0). Every node joins the Ray cluster with the custom
resource ``Rank:<rank>``, so ``@ray.remote(resources={"Rank:1": 0.001})``
lands on the node with RANK 1. The command runs on the head only, once every
node has joined, with ``RAY_ADDRESS`` set so a bare ``ray.init()`` connects.
The head's exit code is the job's; workers are stopped afterwards.
"""

from __future__ import annotations

import os
import sys

from ti_slurm.job.modes.base import Mode, Rule, component

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from collections.abc import Sequence

    from ti_slurm.core.plan import Component, JobPlan
    from ti_slurm.job.modes.base import NodeContext, NodeRunView, SpecView

MAX_WORKER_GROUPS = 5  # the TI platform allows at most 5 worker groups
PORTS_PER_NODE = 16  # GCS, node manager, object manager, agents, client, metrics and worker ports


class Ray(Mode):
    name = "ray"
    env_names = frozenset({"HEAD_ADDR", "HEAD_PORT", "RANK", "RAY_ADDRESS"})
    rule = Rule(required=("head",), runtime_background=True)
    role_fields = ("head", "worker_groups")
    ports_per_node = PORTS_PER_NODE
    ports_per_job = (1 + MAX_WORKER_GROUPS) * PORTS_PER_NODE

    def check_spec(self, spec: SpecView) -> None:
        from ti_slurm.core.errors import SpecError

        for where, cpus in spec.cpu_counts():
            if cpus != int(cpus):
                raise SpecError(
                    where, cpus, f"Ray schedules whole CPUs and would truncate {cpus} to {int(cpus)}; use an integer"
                )
        if spec.head is not None and spec.head.nodes != 1:
            raise SpecError("head.nodes", spec.head.nodes, "a Ray cluster has exactly one head node")
        groups = spec.worker_groups or []
        if len(groups) > MAX_WORKER_GROUPS:
            raise SpecError(
                "worker_groups", f"{len(groups)} groups", f"Ray takes at most {MAX_WORKER_GROUPS} worker groups"
            )

    def components(self, spec: SpecView) -> tuple[Component, ...]:
        head = component("head", spec.head, spec)
        return (head, *(component(f"worker{i + 1}", g, spec) for i, g in enumerate(spec.worker_groups or [])))

    def component_names(self, count: int) -> list[str]:
        return ["head"] + [f"worker{i}" for i in range(1, count)]

    def resizable_component(self, components: Sequence[Component]) -> int | None:
        return 1 if len(components) == 2 else None  # the one worker group (a lost head requeues the job)

    fixed_size = (
        "spare nodes and a range of nodes go to ray's one worker group: a job of several worker groups takes neither"
    )

    def role(self, ctx: NodeContext) -> str:
        return "head" if ctx.component == 0 else "worker"

    def node_env(self, ctx: NodeContext) -> dict[str, str]:
        import tempfile

        head_addr = ctx.layout.addr(ctx.layout.nodes[0][0])
        head_port = ctx.port(0)
        comp = ctx.plan.components[ctx.component]
        env = {
            "HEAD_ADDR": head_addr,
            "HEAD_PORT": str(head_port),
            "RANK": str(ctx.global_index),
            "TI_SLURM_RAY_PORT_BASE": str(ctx.port(ctx.component, ctx.index)),
            "TI_SLURM_RAY_NODE_IP": ctx.layout.addr(ctx.name),
            # Ray's sockets live under its temp dir: one per node, so nodes sharing a host never clash
            "TI_SLURM_RAY_TEMP_DIR": os.path.join(
                tempfile.gettempdir(), f"ti-ray-{ctx.layout.job_id}-{ctx.global_index}"
            ),
            "TI_SLURM_RAY_CPUS": str(comp.cpus_per_node),
            "TI_SLURM_RAY_GPUS": str(comp.gpus_per_node),
        }
        if ctx.component == 0:
            env["RAY_ADDRESS"] = f"{head_addr}:{head_port}"
        return env

    def runs_command(self, ctx: NodeContext) -> bool:
        return ctx.component == 0

    def listen_ports(self, ctx: NodeContext) -> list[tuple[int, str]]:
        base = ctx.port(ctx.component, ctx.index)
        first = base if ctx.component == 0 else base + 1  # the head's GCS port is the block's first
        return [(port, "a Ray port") for port in range(first, base + PORTS_PER_NODE)]

    def run_node(self, run: NodeRunView) -> int:
        """Head: start Ray, wait for every node, run the command, stop Ray. Worker: join and block.

        Every Ray daemon of the job runs under ``ray start --block`` in a process group
        of its own, so stopping it stops exactly this job's Ray (``ray stop`` would
        stop every Ray on the machine, other jobs' included).
        """
        import shutil

        from ti_slurm.job.net import wait_for_port
        from ti_slurm.job.process import start_group, terminate

        plan, env = run.plan, run.env
        ray = "ray" if run.image is not None else ray_executable(env.get("PATH", ""))  # in an image: the image's
        if ray is None:
            print(
                f"ti-slurm: node {run.contract.node}: no ray command beside {sys.executable} or on PATH "
                "(install ray for the job's Python)",
                file=sys.stderr,
                flush=True,
            )
            run.record(127)
            return 127
        head_addr, head_port = env["HEAD_ADDR"], int(env["HEAD_PORT"])
        if run.contract.role == "worker":
            if not wait_for_port(head_addr, head_port, plan.rendezvous_timeout):
                print(f"ti-slurm: Ray head {head_addr}:{head_port} did not come up", file=sys.stderr, flush=True)
                run.record(124)
                return 124
            return join_head(run, _deaf(plan, ray_start_args(env, head=False, ray=ray)))
        workdir = None if run.image is not None else plan.workdir or None
        head = start_group(run.argv(_deaf(plan, ray_start_args(env, head=True, ray=ray))), env, workdir)
        try:
            # the head's `ray start` failing (it exits) is noticed at once, not after the rendezvous timeout
            up = wait_for_port(head_addr, head_port, plan.rendezvous_timeout, lambda: head.poll() is not None)
            if not up or head.poll() is not None:
                print(f"ti-slurm: the Ray head did not start on {head_addr}:{head_port}", file=sys.stderr, flush=True)
                run.record(124)
                return 124
            import subprocess

            # the job's Python (the image's in a container) asks Ray until every node has joined
            python = "python3" if run.image is not None else sys.executable
            args = [python, "-c", WAIT_FOR_NODES, env["RAY_ADDRESS"], str(plan.total_nodes)]
            args.append(str(plan.rendezvous_timeout))
            if subprocess.run(run.argv(_join(args)), env=env, cwd=workdir, check=False).returncode != 0:
                run.record(124)
                return 124
            return run.run_command()
        finally:
            terminate(head, plan.stop_grace, group=True)
            shutil.rmtree(env["TI_SLURM_RAY_TEMP_DIR"], ignore_errors=True)


MODE = Ray()


def join_head(run: NodeRunView, line: str) -> int:
    """A worker: run Ray's daemons (``line``) until stopped, once more when they fail within the head's wait for
    its nodes (Ray gives a raylet a fixed 30 s to register, too few on a loaded node); a later failure, a second
    one, or one after a stop signal is the node's."""
    import shutil
    import time

    from ti_slurm.job.process import stop_heard

    temp, began = run.env["TI_SLURM_RAY_TEMP_DIR"], time.monotonic()
    try:
        code = run.run_command(line, record=False)
        early = time.monotonic() - began < run.plan.rendezvous_timeout
        if 0 < code <= 128 and early and not stop_heard():
            print(f"ti-slurm: Ray did not start on this node (exit {code}): starting it once more",
                  file=sys.stderr, flush=True)  # fmt: skip
            shutil.rmtree(temp, ignore_errors=True)
            code = run.run_command(line, record=False)
        run.record(code)
        return code
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def ray_executable(path: str) -> str | None:
    """The ``ray`` command of the job's Python (installed beside it), else the first on ``path``."""
    import shutil

    beside = os.path.join(os.path.dirname(sys.executable), "ray")
    return beside if os.access(beside, os.X_OK) else shutil.which("ray", path=path)


def ray_start_args(env: dict[str, str], head: bool, ray: str = "ray") -> list[str]:
    """``ray start`` arguments with every port taken from this job's block (no clashes between jobs)."""
    base = int(env["TI_SLURM_RAY_PORT_BASE"])
    args = [
        ray,
        "start",
        f"--node-ip-address={env['TI_SLURM_RAY_NODE_IP']}",
        f"--num-cpus={env['TI_SLURM_RAY_CPUS']}",
        f"--num-gpus={env['TI_SLURM_RAY_GPUS']}",
        f'--resources={{"Rank:{env["RANK"]}": 1}}',
        f"--node-manager-port={base + 1}",
        f"--object-manager-port={base + 2}",
        f"--dashboard-agent-grpc-port={base + 3}",
        f"--dashboard-agent-listen-port={base + 4}",
        f"--metrics-export-port={base + 5}",
        f"--runtime-env-agent-port={base + 6}",
        f"--min-worker-port={base + 8}",
        f"--max-worker-port={base + PORTS_PER_NODE - 1}",
        f"--object-store-memory={env.get('TI_SLURM_RAY_OBJECT_STORE', str(100 * 1024 * 1024))}",
        "--disable-usage-stats",
        f"--temp-dir={env['TI_SLURM_RAY_TEMP_DIR']}",
    ]
    if head:
        args += [
            "--head",
            f"--port={env['HEAD_PORT']}",
            f"--ray-client-server-port={base + 7}",
            "--include-dashboard=false",
        ]
    else:
        args += [f"--address={env['HEAD_ADDR']}:{env['HEAD_PORT']}"]
    return [*args, "--block"]


def _deaf(plan: JobPlan, args: list[str]) -> str:
    """A shell line running Ray's daemons with the checkpoint signal ignored (inherited across exec): ti-slurm
    passes it to the driver only, but one sent to the job by hand (``scancel --signal``) reaches every process
    of the step, and only the driver, on the head, is to act on it."""
    line = f"exec {_join(args)}"
    return f"trap '' {plan.checkpoint_signal}; {line}" if plan.checkpoint_signal else line


def _join(args: list[str]) -> str:
    import shlex

    return " ".join(shlex.quote(a) for a in args)


# Run by the job's Python (the image's, in a container), so it imports nothing of ti-slurm.
WAIT_FOR_NODES = """
import logging, sys, time
import ray
address, expected, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
deadline = time.monotonic() + timeout
while True:  # the GCS answers before the head's own raylet has registered (a loaded node): ask again
    try:
        ray.init(address=address, logging_level=logging.ERROR)
        break
    except (ConnectionError, RuntimeError):
        ray.shutdown()
        if time.monotonic() >= deadline:
            raise
        time.sleep(1)
alive = 0
while time.monotonic() < deadline:
    alive = len([n for n in ray.nodes() if n.get("Alive")])
    if alive >= expected:
        break
    time.sleep(0.5)
ray.shutdown()
if alive < expected:
    print(f"ti-slurm: only {alive} of {expected} Ray nodes joined within {timeout:.0f}s", file=sys.stderr, flush=True)
    sys.exit(1)
"""
