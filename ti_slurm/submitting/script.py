"""The sbatch script of a :class:`~ti_slurm.core.plan.JobPlan` (pure: :func:`render`).

What each component asks Slurm for is decided in :mod:`ti_slurm.slurm.request`; this writes it as
``#SBATCH`` lines. The template is ``ti_slurm/submitting/templates/job.sh.j2`` and renders with StrictUndefined.
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

from ti_slurm.core.paths import PLAN
from ti_slurm.core.plan import JobPlan
from ti_slurm.slurm.request import component_options
from ti_slurm.version import __version__

TEMPLATES = Path(__file__).resolve().parent / "templates"


def sbatch_value(value: object) -> str:
    """Quote a value for an ``#SBATCH`` line the way sbatch's parser unquotes it."""
    text = str(value).lower() if isinstance(value, bool) else str(value)
    if any(ch in text for ch in "\n\r\x00"):
        raise ValueError(f"an #SBATCH value cannot hold a line break or NUL: {text!r}")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def sbatch_lines(plan: JobPlan, index: int) -> list[str]:
    """Component ``index``'s ``#SBATCH`` options (after the ``#SBATCH ``), each value quoted."""
    return [
        f"--{name}" if value is True else f"--{name}={sbatch_value(value)}"
        for name, value in component_options(plan, index).items()
    ]


@cache
def _template() -> jinja2.Template:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
    )
    env.filters["shq"] = shlex.quote
    return env.get_template("job.sh.j2")


def render(plan: JobPlan) -> str:
    """The sbatch script for ``plan``."""
    components = [{"sbatch": sbatch_lines(plan, i)} for i in range(len(plan.components))]
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
