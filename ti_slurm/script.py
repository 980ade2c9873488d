"""The sbatch script of a :class:`~ti_slurm.core.plan.JobPlan` (pure: :func:`render`).

The template lives in ``templates/sbatch/`` and renders with StrictUndefined.
User text never becomes template source: it reaches the template only as
data, and is quoted on the way out (``shq`` for shell words, ``sbatch_value``
for ``#SBATCH`` lines). The plan itself travels as one line of JSON in a
quoted heredoc, so nothing in it is expanded by the shell.
"""

from __future__ import annotations

import shlex
from functools import cache
from pathlib import Path

import jinja2

from ti_slurm.core.paths import BATCH_OUTPUT, PLAN
from ti_slurm.core.plan import Component, JobPlan
from ti_slurm.version import __version__

_TEMPLATE_DIRS = (
    Path(__file__).resolve().parent / "templates" / "sbatch",  # installed wheel
    Path(__file__).resolve().parent.parent / "templates" / "sbatch",  # source checkout
)


def sbatch_value(value: object) -> str:
    """Quote a value for an ``#SBATCH`` line the way sbatch's parser unquotes it."""
    text = str(value).lower() if isinstance(value, bool) else str(value)
    if any(ch in text for ch in "\n\r\x00"):
        raise ValueError(f"an #SBATCH value cannot hold a line break or NUL: {text!r}")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def slurm_filename(path: str) -> str:
    """Escape ``%`` so sbatch's filename patterns leave a user's path alone."""
    return path.replace("\\", "\\\\").replace("%", "%%")


def batch_output_pattern(plan: JobPlan) -> str:
    """sbatch's ``--output`` name of the batch script's output: ``slurm-<job id>.out``, an array task's
    ``slurm-<array id>_<task>.out`` (beside its job directory ``<array id>_<task>``)."""
    return BATCH_OUTPUT.replace("%j", "%A_%a") if plan.points else BATCH_OUTPUT


def array_range(plan: JobPlan) -> str:
    """``--array``'s value for a sweep's plan: ``0-5``, ``0-5%2`` with max_parallel."""
    throttle = f"%{plan.max_parallel}" if 0 < plan.max_parallel < len(plan.points) else ""
    return f"0-{len(plan.points) - 1}{throttle}"


def _component_lines(plan: JobPlan, comp: Component, first: bool) -> list[str]:
    lines: list[str] = []

    def opt(name: str, value: object) -> None:
        lines.append(f"--{name}={sbatch_value(value)}")

    if first:
        opt("job-name", plan.name)
        opt("output", f"{slurm_filename(plan.output_dir)}/{batch_output_pattern(plan)}")
    if first and plan.points:  # a sweep: one array task per point, at most max_parallel running
        opt("array", array_range(plan))
    if first and plan.dependency:  # the whole job's; one that can never be met ends it instead of pending on
        opt("dependency", plan.dependency)
        opt("kill-on-invalid-dep", "yes")
    opt("nodes", comp.node_request)
    if not comp.elastic:  # beside a range it makes Slurm give the fewest nodes; -N alone gives what it can
        opt("ntasks-per-node", 1)
    opt("cpus-per-task", comp.cpus_per_node)
    gres = plan.gres_per_node(comp)
    if gres:
        opt("gres", ",".join(f"{name}:{count}" for name, count in gres.items()))
    if comp.mem:
        opt("mem", comp.mem)
    partition = comp.partition or plan.partition
    if partition:
        opt("partition", partition)
    for name in ("account", "qos", "time"):
        value = getattr(plan, name)
        if value:
            opt(name, value)
    lines += _restart_lines(plan, first)
    for name, value in sorted(plan.sbatch.items()):
        if value is True:
            lines.append(f"--{name}")
        elif value is not False:
            opt(name, value)
    return lines


def _restart_lines(plan: JobPlan, first: bool) -> list[str]:
    """Options for surviving interruptions: every component is requeueable, the first gets the signal."""
    lines = []
    # B: the batch step only; the supervisor passes the signal on to every node's command
    if plan.checkpoint_signal and first:
        lines.append(f"--signal={sbatch_value(f'B:{plan.checkpoint_signal}@{plan.signal_before}')}")
    if plan.restart_max > 0:  # preemption and node failure requeue it; the supervisor requeues the rest
        # expedite (the site config's, Slurm 25.11): a requeued job may start again at once, first in the queue
        lines.append("--requeue=expedite" if plan.expedited_requeue else "--requeue")
    if plan.restart_max > 0 and first:
        lines.append(f"--open-mode={sbatch_value('append')}")  # each attempt's output after the last one's
    if plan.outlives_a_lost_node:  # every component: each is a job of its own to Slurm
        lines.append("--no-kill")  # a lost node leaves the allocation, the job keeps the rest and goes on
    return lines


@cache
def _template() -> jinja2.Template:
    for folder in _TEMPLATE_DIRS:
        if (folder / "job.sh.j2").is_file():
            env = jinja2.Environment(
                loader=jinja2.FileSystemLoader(str(folder)),
                undefined=jinja2.StrictUndefined,
                autoescape=False,
                keep_trailing_newline=True,
            )
            env.filters["shq"] = shlex.quote
            return env.get_template("job.sh.j2")
    raise FileNotFoundError("templates/sbatch/job.sh.j2 is missing from the installation")


def render(plan: JobPlan) -> str:
    """The sbatch script for ``plan``."""
    components = [{"sbatch": _component_lines(plan, c, i == 0)} for i, c in enumerate(plan.components)]
    return _template().render(
        version=__version__,
        plan=plan,
        components=components,
        output_dir=plan.output_dir,
        workdir=plan.workdir,
        python=plan.python,
        plan_file=PLAN,
        submission_tag=f'"submission":"{plan.submission}"',  # how plan.json spells it (one line, sorted keys)
        plan_json=plan.to_json(),
        job_id="${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}" if plan.points else "${SLURM_JOB_ID}",
    )
