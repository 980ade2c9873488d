"""pyslurm backend: submit, follow and cancel through libslurm in this process (no command per call).

pyslurm binds one Slurm release (PyPI carries 25.11; it does not build against
22.05), so the backend first checks that the installed bindings fit the
running Slurm and otherwise refuses with one line naming the backend to use.

What it asks of Slurm, and how:

- submit: a :class:`pyslurm.JobSubmitDescription` made from the plan by
  :func:`job_description` (the options :mod:`ti_slurm.slurm.request` decides, which
  :mod:`ti_slurm.submitting.script` writes as ``#SBATCH`` lines; the rendered script is the job's batch script).
  pyslurm has no call for heterogeneous jobs, so those (ps-worker, ray) are
  still submitted with ``sbatch``: the one command this backend runs.
- status and list: one ``slurm_load_jobs`` RPC for all of the user's jobs.
- cancel: ``slurm_kill_job`` (as ``scancel``).
- partitions (the check that a job can ever start): partitions and nodes, two RPCs,
  shared for five minutes like the CLI backend's ``sinfo``.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from ti_slurm.backends.base import JobInfo, make_output_dir
from ti_slurm.backends.slurm import SlurmBackend, add_queue_entry
from ti_slurm.core.environ import job_environment, leaking
from ti_slurm.core.errors import BackendError, ConfigError, SubmissionError
from ti_slurm.core.plan import JobPlan
from ti_slurm.core.states import JobState
from ti_slurm.slurm.request import MANAGED, PYSLURM, USE_INSTEAD, Value, component_options, description_field
from ti_slurm.slurm.text import array_task_ids, parse_version, sinfo_text
from ti_slurm.transports import run_local


def pyslurm_mismatch(slurm_version: str | None = None) -> str | None:
    """Why pyslurm cannot serve this cluster, or None when it can.

    ``slurm_version``: ``sinfo --version``'s output (asked when not given). The installed
    pyslurm's version is read from its metadata: importing it initialises libslurm, which must
    not happen for another release (see :func:`import_pyslurm`).
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        have = version("pyslurm")
    except PackageNotFoundError:
        return f"pyslurm is not installed (pip install pyslurm==<the cluster's Slurm version>); {USE_INSTEAD}"
    if slurm_version is None:
        slurm_version = run_local(["sinfo", "--version"], None).stdout
    wanted = parse_version(slurm_version)
    major_minor = tuple(int(x) for x in have.split(".")[:2] if x.isdigit())
    if major_minor != wanted:
        return f"pyslurm {have} is for Slurm {have[:5]}, the cluster runs {wanted[0]}.{wanted[1]:02d}; {USE_INSTEAD}"
    return None


def import_pyslurm() -> Any:
    """pyslurm, imported without its side effect on this process's children.

    Importing pyslurm initialises libslurm, which sets ``SLURM_CONF`` in the C environment: every
    process started afterwards (an ``srun``, a user's own ``sbatch``) would read that Slurm's
    config. It is taken back unless the caller had set it.
    """
    had = os.environ.get("SLURM_CONF")
    try:
        import pyslurm
    except ImportError as exc:  # installed, but built against a libslurm this node does not have
        raise ConfigError("backend", "pyslurm", f"pyslurm does not load ({exc}); {USE_INSTEAD}") from None
    if had is None:
        os.unsetenv("SLURM_CONF")
    else:
        os.putenv("SLURM_CONF", had)
    return pyslurm


def job_description(plan: JobPlan, script: str, environ: Mapping[str, str], known: frozenset[str]) -> dict[str, Any]:
    """The fields of a :class:`pyslurm.JobSubmitDescription` for a single-component ``plan`` (pure).

    The options :func:`ti_slurm.slurm.request.component_options` decides (the script's ``#SBATCH``
    lines), each as pyslurm's field. ``known``: the fields pyslurm has; the spec's ``sbatch:`` options
    may only use those (see :func:`sbatch_fields`).
    """
    fields: dict[str, Any] = {
        "script": script,
        "environment": job_environment(environ),
        "working_directory": os.getcwd(),
    }
    options = component_options(plan, 0)
    for name, value in options.items():
        if name in MANAGED:
            fields.update(own_fields(name, value, options))
    fields.update(sbatch_fields(plan.sbatch, known))
    return fields


def own_fields(name: str, value: Value, options: Mapping[str, Value]) -> dict[str, Any]:
    """pyslurm's fields for one of ti-slurm's own options (``options``: the component's others)."""
    field = description_field(name, PYSLURM)
    if field is not None:
        return {field: value}
    text = str(value)
    if name == "nodes":  # a count, or a range as sbatch writes it: "6-8"
        return {"nodes": int(text) if text.isdigit() else text}
    if name == "ntasks-per-node":  # only beside a count of nodes (never a range)
        return {"ntasks_per_node": int(text), "ntasks": int(str(options["nodes"])) * int(text)}
    if name == "gres":  # gpu:8,npu:4
        return {"gres_per_node": {kind: int(count) for kind, _, count in (g.rpartition(":") for g in text.split(","))}}
    if name == "partition":
        return {"partitions": [text]}
    if name == "signal":  # B:USR2@120: the batch step only
        scope, _, rest = text.rpartition(":")
        sig, _, before = rest.partition("@")
        number = signal.Signals[f"SIG{sig}"].value
        return {"signal": {"signal": number, "time": int(before), "batch_only": scope == "B"}}
    if name == "kill-on-invalid-dep":
        return {"kill_on_invalid_dependency": text == "yes"}
    if name == "requeue":  # (pyslurm 25.11 has no field for --requeue=expedite: these requeue as usual)
        return {"is_requeueable": True}
    if name == "no-kill":  # a lost node leaves the allocation, the job goes on
        return {"kill_on_node_fail": False}
    raise AssertionError(f"--{name}: ti-slurm asks for it, and the pyslurm backend does not say how")


# sbatch options (the spec's `sbatch:` table) pyslurm sets with a fixed value: option -> (field, value)
FLAG_FIELDS: dict[str, tuple[str, object]] = {
    "exclusive": ("resource_sharing", "no"),
    "oversubscribe": ("resource_sharing", "yes"),
    "contiguous": ("requires_contiguous_nodes", True),
    "overcommit": ("overcommit", True),
    "spread-job": ("spreads_over_nodes", True),
    "use-min-nodes": ("use_min_nodes", True),
    "wait-all-nodes": ("wait_all_nodes", True),
    "reboot": ("requires_node_reboot", True),
    "hold": ("priority", 0),
}


def sbatch_fields(options: Mapping[str, object], known: frozenset[str]) -> dict[str, Any]:
    """The spec's extra sbatch options as pyslurm fields; one that pyslurm cannot set is one line."""
    out: dict[str, Any] = {}
    for name, value in sorted(options.items()):
        if value is False:
            continue
        field, fixed = FLAG_FIELDS.get(name, (description_field(name, PYSLURM) or "", None))
        if not field or field not in known:
            raise ConfigError(f"sbatch.{name}", value, f"the pyslurm backend cannot pass this option; {USE_INSTEAD}")
        if fixed is not None:
            out[field] = fixed
        elif value is True:
            raise ConfigError(f"sbatch.{name}", value, "this option takes a value")
        else:
            out[field] = str(value)
    return out


_ENVIRON_LOCK = threading.Lock()


@contextmanager
def without_leaking_environment() -> Iterator[None]:
    """This process's environment without what would change the job's layout, while pyslurm submits.

    pyslurm copies every ``SLURM_*`` variable of ``os.environ`` into the job, whatever it is
    given (a surrounding job's ``SLURM_CPU_BIND`` would bind the new job's tasks).
    """
    with _ENVIRON_LOCK:
        kept = {k: v for k, v in os.environ.items() if leaking(k)}
        for key in kept:
            del os.environ[key]
        try:
            yield
        finally:
            os.environ.update(kept)


class PyslurmBackend(SlurmBackend):
    """Slurm through pyslurm, on a node where pyslurm fits the running Slurm."""

    name = "pyslurm"

    def __init__(self) -> None:
        why = pyslurm_mismatch()
        if why:
            raise ConfigError("backend", "pyslurm", why)
        self.pyslurm: Any = import_pyslurm()
        super().__init__()

    @staticmethod
    def rpc_error(what: str, exc: Exception, error: type[BackendError | SubmissionError] = BackendError) -> Exception:
        """A pyslurm error as one line, saying what was asked."""
        return error(f"{what} failed: {exc}")

    def submit(self, plan: JobPlan, script: str, check_fit: bool = True) -> JobInfo:
        if plan.heterogeneous:  # pyslurm cannot submit one: sbatch does
            return super().submit(plan, script, check_fit)
        known = frozenset(name for name in dir(self.pyslurm.JobSubmitDescription) if not name.startswith("_"))
        description = self.pyslurm.JobSubmitDescription(**job_description(plan, script, os.environ, known))
        if check_fit:
            from ti_slurm.backends.slurm import refuse_unfit

            refuse_unfit(plan, self.fresh_partitions(), self.sinfo, self.partitions_key())
        make_output_dir(plan.output_dir)
        try:
            with without_leaking_environment():
                job_id = description.submit()
        except (self.pyslurm.RPCError, ValueError) as exc:
            raise self.rpc_error("submit", exc, SubmissionError) from None
        return self._info(str(job_id), plan)

    def sinfo(self) -> str:
        try:
            parts = self.pyslurm.Partitions.load()
            nodes = self.pyslurm.Nodes.load()
        except self.pyslurm.RPCError as exc:
            raise self.rpc_error("loading the partitions", exc) from None
        from ti_slurm.core.hostlist import expand

        rows = [
            {
                "name": p.name,
                "default": bool(p.is_default),
                "nodes": expand(p.nodes) if p.nodes else [],
                "max_time": p.max_time if isinstance(p.max_time, int) else None,
            }
            for p in parts.values()
        ]
        gres = {name: ",".join(f"{k}:{v}" for k, v in (n.configured_gres or {}).items()) for name, n in nodes.items()}
        return sinfo_text(rows, gres)

    def idle_nodes(self) -> dict[str, int]:
        """Idle nodes per partition, from one load of the partitions and the nodes (as ``sinfo %t``: a node
        that is idle and nothing else)."""
        try:
            parts = self.pyslurm.Partitions.load()
            nodes = self.pyslurm.Nodes.load()
        except self.pyslurm.RPCError as exc:
            raise self.rpc_error("loading the nodes", exc) from None
        from ti_slurm.core.hostlist import expand

        idle = {name for name, node in nodes.items() if str(node.state or "").upper() == "IDLE"}
        return {p.name: len(idle.intersection(expand(p.nodes) if p.nodes else [])) for p in parts.values()}

    def load_jobs(self) -> list[Any]:
        """This user's jobs the controller holds: one RPC."""
        try:
            jobs = self.pyslurm.Jobs.load()
        except self.pyslurm.RPCError as exc:
            raise self.rpc_error("loading the jobs", exc) from None
        uid = os.getuid()
        return [job for job in jobs.values() if job.user_id == uid]

    def user_queue(self) -> dict[str, JobInfo]:
        out: dict[str, JobInfo] = {}
        for job in sorted(self.load_jobs(), key=lambda j: (j.heterogeneous_id or j.id, j.heterogeneous_offset or 0)):
            job_id = str(job.heterogeneous_id or job.id)
            entry = JobInfo(job_id, job.name or "", self.name, nodes=job.allocated_nodes or "")
            tasks = job.array_tasks_waiting if job.array_task_id is None else job.array_task_id
            for key in array_task_ids(job.array_id, tasks) or [job_id]:
                add_queue_entry(out, replace(entry, job_id=key), job.state or "", job.state_reason or "")
        return out

    def find_by_comment(self, comment: str) -> str | None:
        for job in self.load_jobs():
            if (job.comment or "").strip() == comment and JobState.from_slurm(job.state or "") in (
                JobState.PENDING,
                JobState.RUNNING,
            ):
                return str(job.heterogeneous_id or job.id)
        return None

    def find_job_dir(self, job_id: str) -> str | None:
        from ti_slurm.core.paths import JobPaths

        try:
            job = self.pyslurm.Job.load(int(job_id))
        except (self.pyslurm.RPCError, ValueError):
            return None
        out = job.standard_output or ""
        return JobPaths.of(os.path.dirname(out), job_id).root if out else None

    def cancel(self, job: JobInfo) -> None:
        if not job.job_id.isdigit():  # an array task (a sweep's point, 123_4): pyslurm takes numbers only
            super().cancel(job)
            return
        try:
            self.pyslurm.Job(int(job.job_id)).cancel()
        except (self.pyslurm.RPCError, ValueError) as exc:
            raise self.rpc_error("cancel", exc) from None
