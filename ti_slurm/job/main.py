"""The job path's entry point: what every node of every job runs, on the bare interpreter.

The supervisor starts each node's step, and the launch agent (the ``ssh`` that
Open MPI and Horovod call) starts itself, as::

    <python> -I -S <install>/ti_slurm/job/main.py node PLAN COMPONENT JOB_DIR [--print-env]
    <python> -I -S <install>/ti_slurm/job/main.py agent SSH-ARGS...

``-S`` skips site-packages and its ``.pth`` hooks: editable installs, conda
and sandbox hooks cost tens of milliseconds per process, on every node of
every step. ``-I`` keeps the job's ``PYTHONPATH`` and working directory from
shadowing ti-slurm's or the standard library's modules. This file puts the
package root on ``sys.path`` itself, so only ti-slurm's own modules and the
standard library can be imported here; ``tests/unit/test_job_path.py`` checks
that no heavy module (pydantic, jinja2, argparse, ...) is ever loaded.

``--print-env`` prints the step's environment (``export NAME=value`` lines,
what the command would get beyond the inherited environment) instead of
running the command: a dry run of one node's step.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from collections.abc import Mapping

    from ti_slurm.core.plan import JobPlan

USAGE = (
    "usage: main.py node PLAN COMPONENT JOB_DIR [--print-env] | agent SSH-ARGS... | in-image JOB_DIR COMPONENT COMMAND"
)


def env_changes(env: Mapping[str, str], inherited: Mapping[str, str]) -> dict[str, str]:
    """What ``env`` sets beyond ``inherited``: new variables and changed values."""
    return {k: v for k, v in env.items() if inherited.get(k) != v}


def print_env(env: Mapping[str, str], inherited: Mapping[str, str]) -> None:
    """``export`` lines for :func:`env_changes`."""
    from ti_slurm.core.shell import shell_quote

    sys.stdout.write("".join(f"export {k}={shell_quote(v)}\n" for k, v in env_changes(env, inherited).items()))


def read_plan(plan_path: str) -> JobPlan:
    """The job's plan; one line when it cannot be read."""
    from ti_slurm.core.errors import TiSlurmError
    from ti_slurm.core.plan import JobPlan

    try:
        with open(plan_path, encoding="utf-8") as fh:
            return JobPlan.from_json(fh.read())
    except (OSError, ValueError, TypeError, KeyError) as exc:  # unreadable, not JSON, not a plan
        raise TiSlurmError(f"plan {plan_path}: cannot read it: {exc}") from None


def node(plan_path: str, component: str, job_dir: str, dry_run: bool) -> int:
    """Serve this node's share of component number ``component``; with ``dry_run``, print its environment."""
    from ti_slurm.core.errors import TiSlurmError
    from ti_slurm.job.node import prepare_node, run_node

    plan = read_plan(plan_path)
    if not component.isdigit() or int(component) >= len(plan.components):
        raise TiSlurmError(f"component {component!r} is not a component of this {plan.mode} job")
    if dry_run:
        print_env(prepare_node(plan, int(component), job_dir, os.environ).env, os.environ)
        return 0
    return run_node(plan, int(component), job_dir)


def in_image(job_dir: str, component_name: str, command: str) -> int:
    """Run ``command`` on this node inside the image of the job's component ``component_name`` (the launch
    agent's remote end in a container job); its exit code."""
    from ti_slurm.core.errors import TiSlurmError
    from ti_slurm.core.paths import JobPaths
    from ti_slurm.job.container import ImageRun
    from ti_slurm.job.process import exit_code

    plan = read_plan(JobPaths(job_dir).plan)
    names = [c.name for c in plan.components]
    if component_name not in names:
        raise TiSlurmError(f"component {component_name!r} is not a component of this {plan.mode} job")
    from ti_slurm.job.relay import node_relay

    node = os.uname().nodename
    env = {k: v for k, v in os.environ.items() if k != "TI_SLURM_AGENT_RELAY"}  # the caller's node's relay ...
    relay = node_relay(JobPaths(job_dir).agent_dir, node)
    if relay:
        env["TI_SLURM_AGENT_RELAY"] = relay  # ... this node's, if its step runs one
    image = ImageRun(plan, names.index(component_name), f"agent{os.getpid()}", node, job_dir, env)
    problem = image.check()
    if problem:
        raise TiSlurmError(problem)
    import subprocess

    try:
        return exit_code(subprocess.run(image.argv(command), env=env, check=False).returncode)
    finally:
        image.cleanup()


def main(argv: list[str]) -> int:
    """``main.py node ...`` or ``main.py agent ...``; errors are one line."""
    from ti_slurm.core.errors import TiSlurmError

    try:
        if argv[:1] == ["agent"]:
            from ti_slurm.job.agent import main as agent_main

            return agent_main(argv[1:])
        if argv[:1] == ["in-image"] and len(argv) == 4:
            return in_image(argv[1], argv[2], argv[3])
        if argv[:1] == ["node"] and len(argv) in (4, 5) and argv[4:] in ([], ["--print-env"]):
            return node(argv[1], argv[2], argv[3], dry_run=len(argv) == 5)
    except TiSlurmError as exc:
        print(f"ti-slurm: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    # the package root: <root>/ti_slurm/job/main.py
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    code = main(sys.argv[1:])
    # Out at once, past the interpreter's shutdown: the step's daemon threads (its beat, the stop-request
    # watcher) waking while the interpreter finalizes may crash it (CPython before 3.14 ends such a thread
    # with pthread_exit: gh-87135), and a step whose command exited 0 and was recorded so then ends 139
    # (seen once in CI). Its record is written and nothing else is left to do.
    import contextlib  # (the beat's import already)

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError):  # nobody reads it any more
            stream.flush()
    os._exit(code)
