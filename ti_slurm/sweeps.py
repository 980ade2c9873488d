"""Sweeps: the same training job once per point of a grid of parameters.

::

    sweep = ti_slurm.sweep("job.yaml", {"lr": [0.1, 0.01], "batch": [32, 64]}, max_parallel=2)
    sweep.id                      # "5631001": one id for all of its points
    sweep.wait()                  # the final SweepStatus: one row per point
    ti-slurm sweep job.yaml --param lr=0.1,0.01 --param batch=32,64 --max-parallel 2

Each point is a whole multi-node job whose nodes see the point's values (``TI_SLURM_PARAM_LR=0.1``,
all of them as JSON in ``TI_SLURM_PARAMS``) and whose command has them in its ``{name}`` places,
each as one shell word (:meth:`~ti_slurm.core.plan.JobPlan.at_point`).

A mode of one component becomes one Slurm job array (``--array=0-5%2``): the plan carries every
point and each task's supervisor takes its own (``SLURM_ARRAY_TASK_ID``); a task is ``<array id>_<n>``
to Slurm and to ti-slurm, with its directory ``<output_dir>/<array id>_<n>``, and a restart requeues
that task only. A heterogeneous mode (PS-Worker, Ray with workers) cannot be an array: each point is
a job of its own, the sweep's id ``sweep-<first job id>``, and ``max_parallel`` is kept by Slurm
itself: point ``k`` waits for point ``k - max_parallel`` to end (``afterany``), nothing on this side
needs to keep running. Either way following a sweep asks the queue once per interval for all points.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ti_slurm.backends import Backend, JobInfo
from ti_slurm.client import Job, load, remember_job, submit_to
from ti_slurm.clusters import estimate_all, find_cluster, known_clusters, open_cluster, pick, with_defaults
from ti_slurm.core.choices import AUTO_CLUSTER
from ti_slurm.core.errors import ConfigError, SpecError, SubmissionError, TiSlurmError, UnknownJobError
from ti_slurm.core.paths import JobPaths
from ti_slurm.core.plan import PARAM_PREFIX, JobPlan
from ti_slurm.core.states import JobState, tally, tally_line
from ti_slurm.follow.follower import statuses_of
from ti_slurm.follow.queue import FOLLOW_FIRST, FOLLOW_MAX, follow_until_settled
from ti_slurm.follow.registry import note_cancelled, point_where, recall, recall_sweep, remember_sweep
from ti_slurm.follow.status import JobStatus
from ti_slurm.routing import (
    after_ids,
    check_host,
    check_job_id,
    choose_target,
    named_cluster,
    on_cluster_of,
    open_backend,
)
from ti_slurm.submitting.planning import components
from ti_slurm.submitting.spec import with_after

PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # a parameter is a variable's name (TI_SLURM_PARAM_<NAME>)
LOCAL_MAX_POINTS = 64  # the local runner starts every point at once: a few processes per node of each
MAX_POINTS = 10_000  # separate jobs (a heterogeneous mode), or before the cluster's MaxArraySize is known
SWEEP_POLL = 2.0  # seconds between reads of the points' own records while waiting (no controller call)


# -- the grid -------------------------------------------------------------------
def parse_param(text: str) -> tuple[str, list[str]]:
    """``--param lr=0.1,0.01`` -> ``("lr", ["0.1", "0.01"])``."""
    name, sep, values = text.partition("=")
    if not sep:
        raise ConfigError("--param", text, "expected NAME=VALUE[,VALUE...], e.g. lr=0.1,0.01")
    items = [v.strip() for v in values.split(",")]
    if "" in items:
        raise ConfigError("--param", text, "an empty value (NAME=V1,V2: values between the commas)")
    return name.strip(), items


def grid_points(params: Mapping[str, Sequence[object]], where: str = "params") -> list[dict[str, str]]:
    """Every combination of the values of ``params`` (the first name varies slowest), each checked."""
    if not isinstance(params, Mapping) or not params:
        raise ConfigError(where, params, "the grid is empty: give at least one NAME=VALUE[,VALUE...]")
    for name, values in params.items():
        if isinstance(values, str) or not isinstance(values, Sequence) or not values:
            raise ConfigError(f"{where}.{name}", values, "expected a non-empty list of values")
    count = math.prod(len(values) for values in params.values())
    if count > MAX_POINTS:  # said before a point is made: a grid of millions would take minutes and gigabytes
        raise ConfigError(where, f"{count} points", f"at most {MAX_POINTS} points in one sweep")
    names = list(params)
    combos = [dict(zip(names, combo, strict=True)) for combo in itertools.product(*params.values())]
    return checked_points(combos, where)


def checked_points(points: Sequence[Mapping[str, object]], where: str = "params") -> list[dict[str, str]]:
    """The points as text, every name a valid variable name, every value a number, word or flag."""
    if not points:
        raise ConfigError(where, "[]", "the grid is empty: no point to run")
    out = []
    for i, point in enumerate(points):
        if not isinstance(point, Mapping) or not point:
            raise ConfigError(f"{where}.{i}", point, "a point is a mapping of parameter names to values")
        row = {}
        for name, value in point.items():
            if not isinstance(name, str) or not PARAM_NAME.fullmatch(name):
                why = "not a parameter name (letters, digits and _, not starting with a digit: it becomes a variable)"
                raise ConfigError(where, name, why)
            if value is None or not isinstance(value, str | int | float | bool):
                raise ConfigError(f"{where}.{name}", value, "expected a number, a word or true/false")
            text = str(value).lower() if isinstance(value, bool) else str(value)
            if "\x00" in text or "\n" in text:
                raise ConfigError(f"{where}.{name}", text, "a value cannot hold a line break or NUL")
            row[name] = text
        out.append(row)
        _one_variable_each(row, where)
    if len(out) > MAX_POINTS:
        raise ConfigError(where, f"{len(out)} points", f"at most {MAX_POINTS} points in one sweep")
    return out


def _one_variable_each(point: Mapping[str, str], where: str) -> None:
    """Refuse names that become one variable (``lr`` and ``LR``: TI_SLURM_PARAM_LR)."""
    seen: dict[str, str] = {}
    for name in point:
        other = seen.setdefault(name.upper(), name)
        if other != name:
            variable = PARAM_PREFIX + name.upper()
            why = (
                f"{other} and {name} are one variable ({variable}): give parameters names that differ in more than case"
            )
            raise ConfigError(f"{where}.{name}", name, why)


def read_points(path: str) -> list[dict[str, str]]:
    """A points file: a YAML or JSON list of mappings (``- {lr: 0.1, batch: 32}``), values as written."""
    from ti_slurm.submitting.specfile import read_document, read_text_file

    file = Path(path).expanduser()
    text = read_text_file(file, "--points")
    try:
        document = read_document(text, file, list[dict[str, str]])
    except SpecError as exc:  # where in the file: --points.3.lr
        raise SpecError(
            f"--points{exc.field}" if exc.field.startswith(".") else "--points", exc.value, exc.why
        ) from None
    if not isinstance(document, list):
        raise SpecError("--points", path, "expected a list of points (- {lr: 0.1, batch: 32})")
    return checked_points(document, "--points")


# -- what a sweep is --------------------------------------------------------------
@dataclass
class PointStatus:
    index: int
    params: dict[str, str]
    status: JobStatus


@dataclass
class SweepStatus:
    """Where each point of a sweep is: the data of ``ti-slurm status SWEEP --json``."""

    sweep_id: str
    name: str
    array: bool
    points: list[PointStatus] = field(default_factory=list)

    @property
    def settled(self) -> bool:
        return all(p.status.settled for p in self.points)

    @property
    def counts(self) -> dict[str, int]:
        """How many points are in each state, in the order of the states."""
        return tally(p.status.state for p in self.points)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        import json

        return json.dumps(self.as_dict(), default=str, indent=2)


def summary_line(status: SweepStatus) -> str:
    """``6 points: 2 COMPLETED, 1 FAILED, 3 RUNNING``."""
    return f"{len(status.points)} points: {tally_line(p.status.state for p in status.points)}"


def format_sweep(status: SweepStatus) -> str:
    """The sweep as a table for people: one row per point (its parameters, state, why, the failed node)."""
    names = list(dict.fromkeys(name for p in status.points for name in p.params))
    width = {n: max(len(n), *(len(p.params.get(n, "")) for p in status.points)) for n in names}
    lines = [f"sweep {status.sweep_id}  {status.name}  {summary_line(status)}"]
    head = "".join(f"{n:<{width[n]}}  " for n in names)
    lines.append(f"  {'point':<6} {'job':<18} {head}{'state':<10} reason")
    for p in status.points:
        values = "".join(f"{p.params.get(n, ''):<{width[n]}}  " for n in names)
        why = p.status.reason
        node = p.status.failed.get("node")
        if node and str(node) not in why:
            why += f" (node {node})"
        lines.append(f"  {p.index:<6} {p.status.job_id:<18} {values}{p.status.state:<10} {why}")
    return "\n".join(lines)


class Sweep:
    """A submitted sweep: its points' jobs, followed together (a spread sweep's on each point's cluster)."""

    def __init__(self, record: dict[str, Any], backends: Mapping[str, Backend], **options: Any) -> None:
        self.record = record
        self.backends = dict(backends)  # by cluster name ("": the sweep is on no named cluster); more opened as needed
        self.options = options  # how to open those (accept_new_host_key, ssh_config)

    @property
    def infos(self) -> list[JobInfo]:
        """Each point's job as the registry has it now (``cancel`` from another process notes it there)."""

        points = [_point_info(self.record, p) for p in self.record["points"]]
        return [recall(info.ref) or info for info in points]

    def __repr__(self) -> str:
        return f"Sweep({self.id!r}, {len(self.infos)} points)"

    @property
    def id(self) -> str:
        return str(self.record["sweep_id"])

    @property
    def array(self) -> bool:
        return bool(self.record.get("array"))

    def backend_of(self, info: JobInfo) -> Backend:
        """The backend that reaches point ``info``'s job."""
        if info.cluster not in self.backends:
            self.backends[info.cluster] = open_cluster(find_cluster(info.cluster), **self.options)
        return self.backends[info.cluster]

    def jobs(self) -> list[Any]:
        """Each point's :class:`~ti_slurm.client.Job` (its logs, its own status)."""

        return [Job(info, self.backend_of(info)) for info in self.infos]

    def status(self, max_age: float | None = None, ended: Mapping[str, JobStatus] | None = None) -> SweepStatus:
        """Every point's status: their records, and one queue answer (shared, at most ``max_age`` old) for all
        the points on one cluster. The points of a cluster that cannot be reached are UNKNOWN, saying why.
        ``ended``: final statuses already known (by point id), not read again (an ended job changes no more)."""

        infos = self.infos
        known = ended or {}
        found: list[JobStatus | None] = [known.get(info.ref) for info in infos]
        for cluster in dict.fromkeys(info.cluster for k, info in enumerate(infos) if found[k] is None):
            ks = [k for k, info in enumerate(infos) if info.cluster == cluster and found[k] is None]
            group = [infos[k] for k in ks]
            where = f"cluster:{cluster}" if cluster else group[0].host  # whose shared queue answer
            try:
                answers = statuses_of(self.backend_of(group[0]), where, group, max_age)
            except TiSlurmError as exc:  # one cluster down does not hide the points on the others
                if not cluster:
                    raise
                why = f"cannot reach its cluster {cluster}: {exc}"
                answers = [JobStatus(j.ref, j.name, JobState.UNKNOWN, why, job_dir=j.job_dir) for j in group]
            for k, answer in zip(ks, answers, strict=True):
                found[k] = answer
        rows = [
            PointStatus(int(p["index"]), dict(p["params"]), st)
            for p, st in zip(self.record["points"], found, strict=True)
            if st is not None
        ]
        return SweepStatus(self.id, str(self.record.get("name", "")), self.array, rows)

    def wait(
        self, timeout: float | None = None, on_change: Callable[[SweepStatus], object] | None = None
    ) -> SweepStatus:
        """Follow every point until all ended; the final status (failed points raise nothing). The points'
        records are read every few seconds; the queue is asked for all of them at once, backing off to once
        a minute. Past ``timeout`` seconds, a :class:`TimeoutError` (the points keep running)."""

        interval = FOLLOW_FIRST / 2

        def read() -> SweepStatus:  # the queue's answer may be older each time, backing off to once a minute
            nonlocal interval
            interval = min(interval * 2, FOLLOW_MAX)
            return self.status(max_age=interval)

        def stuck(status: SweepStatus) -> str:
            return f"sweep {self.id} has not ended after {timeout}s: {summary_line(status)}"

        return follow_until_settled(read, summary_line, on_change, timeout, stuck, (SWEEP_POLL, SWEEP_POLL))

    def cancel(self) -> None:
        """Cancel every point still queued or running (a job array at once: ``scancel <array id>``)."""

        infos = self.infos
        unended = [infos[p.index] for p in self.status().points if not p.status.state.is_terminal]
        if self.array:  # the array's own id (a sweep on a named cluster: its id without the cluster)
            array = infos[0]
            self.backend_of(array).cancel(JobInfo(self.id.rpartition(":")[2], backend=array.backend))
        for info in unended:
            if not self.array:
                self.backend_of(info).cancel(info)
            note_cancelled(info.ref)


def _point_info(record: dict[str, Any], point: dict[str, Any]) -> JobInfo:
    """Point ``point``'s job: where a spread sweep's point went is the point's own (its cluster, backend, login
    node and folder), else the sweep's."""

    job_id = str(point["job_id"])

    def where(key: str) -> str:
        return point_where(record, point, key)

    return JobInfo(
        job_id,
        str(record.get("name", "")),
        where("backend"),
        JobPaths.of(where("output_dir"), job_id).root,
        JobState.PENDING,
        host=where("host"),
        submission=str(point.get("submission", "")),
        submitted=float(record.get("submitted", 0.0)),
        sweep=str(record["sweep_id"]),
        cluster=where("cluster"),
    )


# -- submitting -------------------------------------------------------------------
def sweep(
    spec: Any,
    points: Sequence[Mapping[str, object]] | Mapping[str, Sequence[object]],
    *,
    max_parallel: int = 0,
    backend: str | None = None,
    host: str | None = None,
    accept_new_host_key: bool = False,
    ssh_config: str | None = None,
    queue_anyway: bool = False,
    after: Sequence[Any] = (),
    when: str = "ok",
    cluster: str | None = None,
) -> Sweep:
    """Submit one job per point: ``points`` is a grid (``{"lr": [0.1, 0.01]}``: every combination) or a list of
    points (``[{"lr": "0.1"}, ...]``); ``max_parallel`` (0: no limit) points run at once at most. The other
    arguments are :func:`ti_slurm.submit`'s: ``cluster`` (or the spec's ``cluster:``) sends the whole sweep to
    one of the user config's clusters; ``"auto"`` spreads the points over them, each to the cluster that would
    start it first (with ``max_parallel`` or ``after``, which Slurm keeps within one cluster, the whole sweep
    goes to the cluster that would start its first point first).
    A bad grid, or one too large for the cluster's ``MaxArraySize``, is one line and nothing is submitted."""

    check_host(host)
    grid = grid_points(points) if isinstance(points, Mapping) else checked_points(points)
    if isinstance(max_parallel, bool) or not isinstance(max_parallel, int) or max_parallel < 0:
        raise ConfigError("max_parallel", max_parallel, "expected a whole number of points, 0 or more (0: no limit)")
    job_spec = load(spec)
    after_on, target = on_cluster_of(after_ids(after), named_cluster(job_spec, cluster, backend, host), backend or host)
    if after:
        job_spec = with_after(job_spec, after_on, when)
    options: dict[str, Any] = {"accept_new_host_key": accept_new_host_key, "ssh_config": ssh_config}
    record: dict[str, Any] = {"name": job_spec.name, "max_parallel": max_parallel}
    record["params"] = sorted({n for p in grid for n in p})
    if target == AUTO_CLUSTER and len(grid) > 1 and not max_parallel and not job_spec.after and not (backend or host):
        spread = _Spread(job_spec, grid, not queue_anyway, options)
        if spread.clusters > 1:
            infos = spread.each(record)
            record["submitted"] = time.time()
            _remember(record, infos, spread.backends)
            return Sweep(record, spread.backends, **options)
    submission = uuid.uuid4().hex[:16]
    to = choose_target(job_spec, target, backend, host, submission=submission, **options)
    job_spec, chosen, host, named = to.spec, to.backend, to.host, to.cluster
    record.update(backend=chosen.name, host=host, cluster=named, placement=to.placement)
    if not chosen.queues_jobs and 0 < max_parallel < len(grid):
        why = "the local backend runs every point at once: keeping to a number needs Slurm"
        raise ConfigError("max_parallel", max_parallel, why)
    if not chosen.queues_jobs and len(grid) > LOCAL_MAX_POINTS:  # each point its nodes' processes, all at once
        why = f"the local backend runs every point at once: at most {LOCAL_MAX_POINTS}; sweep on Slurm for more"
        raise ConfigError("sweep", f"{len(grid)} points", why)
    submit = _Submit(chosen, job_spec, grid, max_parallel, bool(host), not queue_anyway, submission, to.plan)
    one_array = chosen.job_arrays and not _heterogeneous(job_spec)
    infos = submit.as_array(record) if one_array else submit.each(record)
    record["submitted"] = time.time()  # once Slurm holds every point (see client.submit)
    _remember(record, infos, {named: chosen})
    return Sweep(record, {named: chosen}, **options)


def _heterogeneous(spec: Any) -> bool:
    return len(components(spec)) > 1


@dataclass
class _Submit:
    """One sweep's submit: where it goes and what (each point's job, or the one array)."""

    backend: Backend
    spec: Any
    grid: list[dict[str, str]]
    max_parallel: int
    remote: bool
    fit: bool  # refuse a job its partition can never run
    submission: str  # the array's
    planned: JobPlan | None = None  # the job as --cluster auto planned it for this cluster (with ``submission``)

    def as_array(self, record: dict[str, Any]) -> list[JobInfo]:
        """The sweep as one job array; its points recorded as ``<array id>_<n>``."""

        grid = self.grid

        def shape(plan: JobPlan) -> JobPlan:
            limit = max_array_size(self.backend)
            if limit is not None and len(grid) > limit:
                why = f"over this cluster's MaxArraySize of {limit} (array indices 0-{limit - 1})"
                why += "; nothing was submitted"
                raise ConfigError("sweep", f"{len(grid)} points", why)
            return plan.replace(points=tuple(grid), max_parallel=self.max_parallel)

        submission = self.submission
        info, _ = submit_to(self.backend, self.spec, submission, self.remote, None, self.fit, shape, self.planned)
        record.update(sweep_id=_on_cluster(record.get("cluster"), info.job_id), array=True)
        record["output_dir"] = _output_dir(info)
        record["points"] = [
            {"index": k, "params": p, "job_id": f"{info.job_id}_{k}", "submission": submission}
            for k, p in enumerate(grid)
        ]
        return [info]

    def each(self, record: dict[str, Any]) -> list[JobInfo]:
        """The sweep as a job per point, point k after point k - max_parallel ended; a submit that fails
        cancels the points submitted before it (nothing is left half-submitted)."""
        most = self.max_parallel

        def point(k: int, infos: list[JobInfo]) -> tuple[JobInfo, dict[str, Any]]:
            before = infos[k - most].job_id if most and k >= most else ""
            shape = _at_point(self.grid, k, before)
            return _submit_point(self.backend, self.spec, self.remote, self.fit and k == 0, shape), {}

        infos = _each_point(self.grid, record, point, lambda info: self.backend)
        record.update(sweep_id=f"sweep-{_on_cluster(record.get('cluster'), infos[0].job_id)}", array=False)
        record["output_dir"] = _output_dir(infos[0])
        return infos


class _Spread:
    """A sweep spread over the user's clusters (``cluster: auto``): before each point, every cluster is asked
    when it would start it (the points already sent count there), and the point goes to the earliest."""

    def __init__(self, spec: Any, grid: list[dict[str, str]], fit: bool, options: dict[str, Any]) -> None:
        self.spec, self.grid, self.fit, self.options = spec, grid, fit, options
        self.answering = known_clusters()  # a cluster that gives no answer is not asked again for this sweep
        self.clusters = len(self.answering)
        self.backends: dict[str, Backend] = {}

    def each(self, record: dict[str, Any]) -> list[JobInfo]:
        whys: list[str] = []

        def point(k: int, infos: list[JobInfo]) -> tuple[JobInfo, dict[str, Any]]:
            submission = uuid.uuid4().hex[:16]
            estimates = estimate_all(self.spec, self.answering, submission)
            target, why, planned = pick(estimates)
            self.answering = [e.cluster for e in estimates if e.start or not e.why]
            whys.append(why)
            first = target.name not in self.backends
            if first:
                self.backends[target.name] = open_cluster(target, **self.options)
            backend = self.backends[target.name]
            spec, fit = with_defaults(self.spec, target), self.fit and first
            info = _submit_point(
                backend, spec, bool(target.host), fit, _at_point(self.grid, k, ""), submission, planned
            )
            where = {"cluster": target.name, "backend": backend.name, "host": target.host}
            return info, {**where, "output_dir": _output_dir(info)}

        infos = _each_point(self.grid, record, point, lambda info: self.backends[info.cluster])
        first = record["points"][0]
        record.update(sweep_id=f"sweep-{_on_cluster(first['cluster'], infos[0].job_id)}", array=False, spread=True)
        record["placement"] = f"{_spread_line(record['points'])}; point 0 went {whys[0]}"
        return infos


def _submit_point(
    backend: Backend,
    spec: Any,
    remote: bool,
    fit: bool,
    shape: Callable[[JobPlan], JobPlan],
    submission: str = "",
    planned: JobPlan | None = None,
) -> JobInfo:
    """One point's job (``planned``: as ``--cluster auto`` planned it, with ``submission``)."""
    return submit_to(backend, spec, submission or uuid.uuid4().hex[:16], remote, None, fit, shape, planned)[0]


def _each_point(
    grid: list[dict[str, str]],
    record: dict[str, Any],
    point: Callable[[int, list[JobInfo]], tuple[JobInfo, dict[str, Any]]],
    backend_of: Callable[[JobInfo], Backend],
) -> list[JobInfo]:
    """Submit every point (``point(k, the jobs before it)``: its job, and where it went when not the sweep's
    place); a submit that fails cancels the points submitted before it (nothing is left half-submitted)."""
    infos: list[JobInfo] = []
    record["points"] = []
    for k, values in enumerate(grid):
        try:
            info, where = point(k, infos)
        except TiSlurmError as exc:
            if not infos:
                raise  # nothing was submitted
            for done in infos:
                with contextlib.suppress(TiSlurmError):  # one that ended meanwhile
                    backend_of(done).cancel(done)
            why = f"{exc}; the {len(infos)} point(s) submitted before it were cancelled"
            raise SubmissionError(f"sweep point {k} ({_params_text(values)}): {why}") from None
        infos.append(replace(info, cluster=str(where.get("cluster", info.cluster))))
        entry = {"index": k, "params": values, "job_id": info.job_id, "submission": info.submission}
        record["points"].append({**entry, **where})
    return infos


def _spread_line(points: list[dict[str, Any]]) -> str:
    """Where a spread sweep's points went: ``points 0, 2 to cluster a; 1, 3 to cluster b (...)``."""
    by_cluster: dict[str, list[str]] = {}
    for p in points:
        by_cluster.setdefault(str(p["cluster"]), []).append(str(p["index"]))
    went = "; ".join(f"point{'s' * (len(ks) > 1)} {', '.join(ks)} to cluster {c}" for c, ks in by_cluster.items())
    return f"{went}, each to the cluster that would start it first"


def _at_point(grid: list[dict[str, str]], k: int, before: str) -> Callable[[JobPlan], JobPlan]:
    """The plan of point ``k`` as a job of its own: its parameters, and a wait for job ``before`` to end
    (the throttle) beside the spec's own ``after:``."""

    def shape(plan: JobPlan) -> JobPlan:
        dependency = ",".join(x for x in (plan.dependency, f"afterany:{before}" if before else "") if x)
        return plan.replace(points=tuple(grid)).at_point(k).replace(dependency=dependency)

    return shape


def _on_cluster(cluster: str | None, job_id: str) -> str:
    """A job id as users name it: ``<cluster>:<id>`` for a sweep on a named cluster."""
    return f"{cluster}:{job_id}" if cluster else job_id


def _output_dir(info: JobInfo) -> str:
    import os

    return os.path.dirname(info.job_dir.rstrip("/"))


def _params_text(point: Mapping[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in point.items())


def _remember(record: dict[str, Any], infos: list[JobInfo], backends: Mapping[str, Backend]) -> None:
    """Record the sweep and each point as a job (``status``, ``logs``, ``cancel`` of one point find it)."""

    for point in record["points"]:
        info = _point_info(record, point)
        remember_job(info, backends[info.cluster])
    try:
        remember_sweep(record)
    except OSError as exc:
        import warnings

        warnings.warn(
            f"sweep {record['sweep_id']} is submitted, but recording it failed ({exc.strerror}); its points "
            f"are jobs {', '.join(p['job_id'] for p in record['points'][:5])}...",
            RuntimeWarning,
            stacklevel=3,
        )


def max_array_size(backend: Backend) -> int | None:
    """The cluster's ``MaxArraySize`` (a sweep's array has indices below it), ``None`` when it cannot tell."""
    ask = getattr(backend, "max_array_size", None)
    return ask() if callable(ask) else None


# -- finding a sweep again -----------------------------------------------------------
def get_sweep(
    sweep_id: str, *, host: str | None = None, accept_new_host_key: bool = False, ssh_config: str | None = None
) -> Sweep | None:
    """The sweep ``sweep_id`` submitted from this account (``None``: it is no sweep of this account's)."""

    check_job_id(sweep_id)
    record = recall_sweep(sweep_id)
    if record is None:
        if sweep_id.startswith("sweep-"):
            raise UnknownJobError(f"sweep {sweep_id}: unknown (not submitted from this account)")
        return None
    options: dict[str, Any] = {"accept_new_host_key": accept_new_host_key, "ssh_config": ssh_config}
    if record.get("cluster") or record.get("spread"):  # followed on its points' clusters, as they are
        return Sweep(record, {}, **options)
    try:
        backend = open_backend(str(record["backend"]), host or str(record.get("host", "")), **options)
    except (KeyError, TypeError, ValueError):
        raise UnknownJobError(f"sweep {sweep_id}: its record in the registry is damaged") from None
    return Sweep(record, {"": backend}, **options)
