"""The code that runs inside jobs: each node's step, the launch agent and the supervisor.

A boundary: modules here import only the standard library, each other,
:mod:`ti_slurm.core`, :mod:`ti_slurm.core.errors` and :mod:`ti_slurm.core.site` (``tests/unit/test_job_path.py``
checks it), so nothing pulls pydantic, jinja2, yaml or paramiko into a job
step. Each node's step also keeps to the cheapest of those imports (see
:mod:`ti_slurm.job.main`).
"""

import os as _os


def main_command(python: str, *args: str) -> list[str]:
    """The argv that runs ``job/main.py ARGS`` with ``python``, which must have this same install."""
    return [python, "-I", "-S", _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "main.py"), *args]
