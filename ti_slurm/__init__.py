"""ti-slurm: run TI-platform / ModelArts distributed training jobs on Slurm.

The Python API (see :mod:`ti_slurm.client`)::

    import ti_slurm

    job = ti_slurm.submit("job.yaml")       # or a dict / JobSpec; backend="local"; host="login"
    status = job.wait()                     # a JobStatus; status.state is a JobState
    ti_slurm.get_job("123").cancel()       # a job submitted earlier, from any process
    ti_slurm.jobs(); ti_slurm.render(spec); ti_slurm.plan(spec)

Importing the package is free: every name below loads its module on first
use, so code inside jobs (:mod:`ti_slurm.job`) never pays for the API's
imports (pydantic, jinja2, yaml).
"""

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: every job step imports this package

# public name -> the module that defines it
_LAZY = {
    "__version__": "ti_slurm.version",
    "submit": "ti_slurm.client",
    "sweep": "ti_slurm.sweeps",
    "get_sweep": "ti_slurm.sweeps",
    "Sweep": "ti_slurm.sweeps",
    "SweepStatus": "ti_slurm.sweeps",
    "get_job": "ti_slurm.client",
    "jobs": "ti_slurm.client",
    "resubmit": "ti_slurm.client",
    "render": "ti_slurm.client",
    "plan": "ti_slurm.client",
    "load": "ti_slurm.client",
    "Job": "ti_slurm.client",
    "JobStatus": "ti_slurm.follow.status",
    "ComponentStatus": "ti_slurm.follow.status",
    "AttemptStatus": "ti_slurm.follow.status",
    "JobState": "ti_slurm.core.states",
    "JobSpec": "ti_slurm.submitting.spec",
    "JobPlan": "ti_slurm.core.plan",
    "TiSlurmError": "ti_slurm.core.errors",
    "InputError": "ti_slurm.core.errors",
    "SpecError": "ti_slurm.core.errors",
    "ConfigError": "ti_slurm.core.errors",
    "SubmissionError": "ti_slurm.core.errors",
    "BackendError": "ti_slurm.core.errors",
    "UnknownJobError": "ti_slurm.core.errors",
}
__all__ = [
    "AttemptStatus",
    "BackendError",
    "ComponentStatus",
    "ConfigError",
    "InputError",
    "Job",
    "JobPlan",
    "JobSpec",
    "JobState",
    "JobStatus",
    "SpecError",
    "SubmissionError",
    "Sweep",
    "SweepStatus",
    "TiSlurmError",
    "UnknownJobError",
    "get_job",
    "get_sweep",
    "jobs",
    "load",
    "plan",
    "render",
    "resubmit",
    "submit",
    "sweep",
]

if TYPE_CHECKING:
    from ti_slurm.client import Job, get_job, jobs, load, plan, render, resubmit, submit
    from ti_slurm.core.errors import (
        BackendError,
        ConfigError,
        InputError,
        SpecError,
        SubmissionError,
        TiSlurmError,
        UnknownJobError,
    )
    from ti_slurm.core.plan import JobPlan
    from ti_slurm.core.states import JobState
    from ti_slurm.follow.status import AttemptStatus, ComponentStatus, JobStatus
    from ti_slurm.submitting.spec import JobSpec
    from ti_slurm.sweeps import Sweep, SweepStatus, get_sweep, sweep
    from ti_slurm.version import __version__ as __version__


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ti_slurm' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
