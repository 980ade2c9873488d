"""Spec -> plan: decide everything about a job before it is submitted.

:func:`make_plan` is pure: a validated spec and the site config in, a
:class:`~ti_slurm.core.plan.JobPlan` out. :func:`plan_job` is what ``submit``
does first, in the CLI and the Python API alike: paths made absolute where the
job will run, the site config applied, and the variables whose size grows
with the job checked against Linux's limit.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ti_slurm.core.environ import MAX_ENV_STRING
from ti_slurm.core.errors import SpecError
from ti_slurm.core.plan import Component, JobPlan
from ti_slurm.core.site import SiteConfig, load_site_config
from ti_slurm.job.modes import get_mode
from ti_slurm.submitting.spec import JobSpec, PreflightSpec


def make_plan(
    spec: JobSpec, site: SiteConfig | None = None, *, python: str | None = None, submission: str = ""
) -> JobPlan:
    """Decide a job from a validated spec and the site config. Pure."""
    site = site or SiteConfig()
    return JobPlan(
        name=spec.name,
        mode=spec.mode,
        command=spec.command,
        components=components(spec),
        env=dict(spec.env),
        rdma=spec.rdma,
        master_port=spec.master_port,
        **site.plan_fields(),
        rendezvous_timeout=spec.rendezvous_timeout or site.rendezvous_timeout,
        preflight=spec.preflight not in (False, "off"),
        preflight_allreduce=isinstance(spec.preflight, PreflightSpec) and spec.preflight.allreduce,
        **restart_fields(spec),
        platform=spec.platform,
        processes=spec.processes,
        output_dir=spec.output_dir,
        workdir=spec.workdir,
        **layout_fields(spec),
        python=spec.python or python or site.python or sys.executable,
        path_first=os.path.dirname(spec.python) if spec.python and "/" in spec.python else "",
        partition=spec.partition,
        account=spec.account,
        qos=spec.qos,
        time=spec.time,
        sbatch=dict(spec.sbatch),
        dependency=spec.after.dependency if spec.after else "",
        notify=tuple(n.as_plan() for n in spec.notify) if site.notify else (),
        submission=submission,
    )


def components(spec: JobSpec) -> tuple[Component, ...]:
    """The mode's components, each with its platform's start command where the platform gives one."""
    from ti_slurm.job.platforms import get_platform

    platform, mode = get_platform(spec.platform), get_mode(spec.mode)
    comps = [
        comp.replace(command=command)
        if (command := platform.component_command(spec.mode, comp.name, spec.command))
        else comp
        for comp in mode.components(spec)
    ]
    if spec.spare_nodes:  # the spec checked that the mode names a component spares join
        joined = mode.resizable_component(comps) or 0
        comps[joined] = comps[joined].replace(spares=spec.spare_nodes)
    return tuple(comps)


def layout_fields(spec: JobSpec) -> dict[str, Any]:
    """The plan's fields for the job's data: input channels (which are staged) and where outputs go."""
    paths = {name: c.path for name, c in spec.inputs.items()}
    staged = tuple(name for name, c in spec.inputs.items() if c.stage == "local")
    return {"inputs": paths, "staged": staged, "outputs": spec.outputs or ""}


def restart_fields(spec: JobSpec) -> dict[str, Any]:
    """The plan's fields for surviving interruptions: restart, signal, watchdog, checkpoint directory."""
    signal = spec.checkpoint_signal()
    restart = spec.restart
    return {
        "restart_max": restart.max if restart else 0,
        "restart_on": tuple(dict.fromkeys(restart.on)) if restart else (),
        "restart_in_place": restart.in_place if restart else 0,
        "checkpoint_signal": signal.name if signal else "",
        "signal_before": signal.before if signal else 0,
        "watchdog_silence": (spec.watchdog.silence or 0) if spec.watchdog else 0,
        "watchdog_progress": spec.watchdog.progress if spec.watchdog else False,
        "watchdog_straggler": spec.watchdog.straggler_window() if spec.watchdog else 0,
        "checkpoint_dir": spec.checkpoint_dir or "",
    }


def check_env_bounds(plan: JobPlan) -> None:
    """Refuse a job whose variables could exceed Linux's limit for one environment string (E2BIG at exec)."""
    for name, size in get_mode(plan.mode).env_bounds(plan).items():
        if size > MAX_ENV_STRING:
            raise SpecError(
                "nodes",
                plan.total_nodes,
                f"{name} could reach {size} bytes, over Linux's {MAX_ENV_STRING}-byte "
                "limit for one environment variable (E2BIG at exec); split the job or use fewer tasks",
            )


def python_here(python: str) -> str:
    """The spec's ``python:`` as the job will run it: ``~`` expanded (no shell does it for the job), and a path
    that is a runnable file here (the login node sees the nodes' shared filesystem); a bare name (``python3``)
    is looked up on the nodes' PATH."""
    if "/" not in python and not python.startswith("~"):
        return python
    path = os.path.abspath(os.path.expanduser(python))
    if not os.path.isfile(path):
        where = f" ({path})" if path != python else ""
        raise SpecError(
            "python",
            python,
            f"no such file{where}: give the python of the environment with ti-slurm"
            " installed (its bin/python), or leave python: out for this one",
        )
    if not os.access(path, os.X_OK):
        raise SpecError("python", python, "not executable: give the environment's bin/python")
    return path


def plan_job(
    spec: JobSpec,
    *,
    remote: bool = False,
    site: SiteConfig | None = None,
    python: str | None = None,
    submission: str = "",
) -> JobPlan:
    """The plan ``submit`` sends: paths resolved where the job runs, the site config applied, sizes checked.

    Here, relative ``output_dir`` and ``workdir`` are taken from the current
    directory and the site config is this machine's. For a remote submission
    (``remote=True``) they are taken from ``remote.workdir`` (else they stay
    relative to the login's home directory), the job's Python is the remote
    ``python3``, and the cluster's own site config applies on the cluster side.
    """
    code = ""
    spec = with_user_notify(spec)
    if remote:
        base = _remote_path(spec.remote.workdir, None) if spec.remote else None
        updates = {"output_dir": _remote_path(spec.output_dir, base), "workdir": _remote_path(spec.workdir, base)}
        if spec.code:  # taken on the login node at submit (code_tree still empty here)
            code = _remote_path(spec.code, base) or "."
            updates["workdir"] = inside_code(code, spec)
        python = spec.python or python or "python3"
        site = SiteConfig()
    else:
        workdir = code_workdir(spec) if spec.code else os.path.abspath(os.path.expanduser(spec.workdir or os.getcwd()))
        updates = {"output_dir": os.path.abspath(os.path.expanduser(spec.output_dir)), "workdir": workdir}
        if not os.path.isdir(workdir):
            raise SpecError("workdir", spec.workdir, "no such directory (the command runs there)")
        if spec.python:
            updates["python"] = python_here(spec.python)
        site = site or load_site_config()
    plan = make_plan(spec.model_copy(update=updates), site, python=python, submission=submission)
    check_env_bounds(plan)
    return plan.replace(code_dir=code) if remote else data_here(plan, spec)


def with_user_notify(spec: JobSpec) -> JobSpec:
    """The spec with the user config's ``[[notify]]`` when it has no ``notify:`` of its own."""
    from ti_slurm.submitting.userconfig import read_user_config

    defaults = [] if spec.notify else read_user_config().notify
    return spec.model_copy(update={"notify": defaults}) if defaults else spec


def data_here(plan: JobPlan, spec: JobSpec) -> JobPlan:
    """The plan's input channels and outputs as absolute paths on this machine, each checked."""
    inputs = {}
    for name, path in plan.inputs.items():
        inputs[name] = os.path.abspath(os.path.expanduser(path))
        if not os.path.exists(inputs[name]):
            raise SpecError(f"inputs.{name}", path, "no such file or directory")
    outputs = os.path.abspath(os.path.expanduser(plan.outputs)) if plan.outputs else ""
    if outputs and os.path.exists(outputs) and not os.path.isdir(outputs):  # a file, /dev/null: every node would fail
        raise SpecError("outputs", plan.outputs, "is not a directory: each job's outputs go in a folder of it")
    if outputs and (outputs + "/").startswith(("/proc/", "/sys/", "/dev/")):
        raise SpecError("outputs", plan.outputs, "is a system folder, not storage: name a folder of yours")
    if outputs and spec.code:
        code = os.path.abspath(os.path.expanduser(spec.code))
        if not os.path.relpath(outputs, code).startswith(".."):
            why = f"is inside code ({spec.code}): each job's outputs would be the next job's code"
            raise SpecError("outputs", plan.outputs, why)
    return plan.replace(inputs=inputs, outputs=outputs)


def code_workdir(spec: JobSpec) -> str:
    """Where the command runs in the code directory (``workdir`` is a folder of it); checked to be there."""
    assert spec.code is not None
    code = os.path.abspath(os.path.expanduser(spec.code))
    if not os.path.isdir(code):
        raise SpecError("code", spec.code, "no such directory (its snapshot is what the nodes run)")
    return inside_code(code, spec)


def inside_code(code: str, spec: JobSpec) -> str:
    """The spec's ``workdir`` as a folder of the code directory ``code``; one that leaves it is refused."""
    workdir = os.path.normpath(os.path.join(code, spec.workdir or "."))
    if os.path.relpath(workdir, code).startswith(".."):
        raise SpecError("workdir", spec.workdir, f"is outside code ({spec.code}): the command runs in its snapshot")
    return workdir


def _remote_path(path: str | None, base: str | None) -> str | None:
    """Where a spec's path is on the login node: ``~/x`` in the login's home (so is a relative path without
    ``remote.workdir``), any other relative path in ``base`` (``remote.workdir``)."""
    if path is None:
        return base
    if path == "~" or path.startswith("~/"):
        return path[2:] or "."
    return os.path.join(base, path) if base else path
