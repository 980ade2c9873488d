"""The scheduler's queue, asked rarely and shared: ti-slurm's load on the controller.

Following a job reads the job's own record (``status.jsonl``); the queue is
asked only to tell pending from running, and to learn that a job left it
without a final record. :class:`SharedQueue` makes that one ``scontrol -o show job``
for all of a user's jobs, shared through a small cache file by every follower
on the machine (a sweep script, a notebook, ``ti-slurm list`` in a ``watch``):
a follower whose copy is fresh enough uses it; the first one to find it stale
asks the scheduler, under a lock, while the others wait for its answer.

:func:`unfit_reason` tells, before submitting, that a job can never start on
its partition as the partition stands (pure).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Protocol, TypeVar, runtime_checkable

from ti_slurm.backends.base import Backend, JobInfo
from ti_slurm.core.plan import JobPlan
from ti_slurm.core.states import JobState
from ti_slurm.slurm.text import Partition, time_minutes

FOLLOW_FIRST = 2.0  # seconds before a follower first asks the queue again ...
FOLLOW_MAX = 60.0  # ... backing off to about once a minute
RECORD_STALE = 150.0  # a running job's record silent this long (its supervisor writes a line a minute): ask
SHARED_MAX_AGE = 5.0  # a one-shot `status`/`list` takes an answer this fresh from another process


class Settles(Protocol):
    """A status that says whether what it follows has ended for good (a job's, a sweep's)."""

    @property
    def settled(self) -> bool: ...


S = TypeVar("S", bound=Settles)


def follow_until_settled(
    read: Callable[[], S],
    line: Callable[[S], str],
    on_change: Callable[[S], object] | None,
    timeout: float | None,
    stuck: Callable[[S], str],
    pace: tuple[float, float] = (0.2, 1.0),
) -> S:
    """The one follow loop (``Job.wait``, ``Sweep.wait``, and through them the CLI's ``--wait`` and ``wait``):
    ``read`` the status until it is settled, calling ``on_change`` whenever its ``line`` changes; reads are
    ``pace`` apart (the first gap, growing by half up to the second). Past ``timeout`` seconds, a
    :class:`TimeoutError` saying ``stuck(status)``. ``read`` decides when the queue is asked: reads are cheap
    (a job's own record), the controller is not."""
    deadline = None if timeout is None else time.monotonic() + timeout
    delay, last = pace[0], ""
    while True:
        status = read()
        now = line(status)
        if now != last:
            last = now
            if on_change is not None:
                on_change(status)
        if status.settled:
            return status
        if deadline is not None and time.monotonic() + delay > deadline:
            raise TimeoutError(stuck(status))
        time.sleep(delay)
        delay = min(delay * 1.5, pace[1])


@runtime_checkable
class UserQueue(Protocol):
    """A backend that can list all of this user's queued jobs in one call."""

    name: str

    def user_queue(self) -> dict[str, JobInfo]: ...


_cache_warned: list[str] = []  # the cache directory already warned about (once per process)


def cache_dir() -> str | None:
    """A private per-user directory for the shared answers (``$XDG_RUNTIME_DIR`` or the temp dir), or ``None``
    when there is none to be had: the cache is only an optimisation, and one another user could write (a
    ``/tmp/ti-slurm-<uid>`` made first by someone else) would let them say what state a job is in."""
    from ti_slurm.core.files import private_dir

    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    folder = os.path.join(base, f"ti-slurm-{os.getuid()}")
    refused = private_dir(folder)
    if refused:
        _no_cache(refused)
        return None
    return folder


def _no_cache(why: str) -> None:
    """Say once per process that the shared cache is not used, and why."""
    if why not in _cache_warned:
        _cache_warned.append(why)
        print(f"ti-slurm: warning: {why}: asking the controller without the shared cache", file=sys.stderr)


def cache_key(backend: str, host: str, server: str = "") -> str:
    """The name of one controller's shared answers: by backend and host, and here by the Slurm config the
    commands read or the ``server`` the backend names (slurmrestd's URL, a cluster's slurm.conf): two clusters
    reached from one machine never share an answer."""
    key = f"{backend}-{host or 'here'}"
    conf = server or ("" if host else os.environ.get("SLURM_CONF", ""))
    if conf:
        import zlib

        key += f"-{zlib.crc32(conf.encode()):08x}"
    return key.replace("/", "_")


class SharedQueue:
    """A backend's queue states, one query per interval for every follower of this user here."""

    def __init__(self, backend: Backend, host: str = "") -> None:
        self.backend = backend
        self.key = cache_key(backend.name, host, getattr(backend, "queue_key", ""))
        self.queries = 0  # queries this process made (the benchmark counts them)

    def states(self, jobs: list[JobInfo], max_age: float = SHARED_MAX_AGE) -> dict[str, JobInfo]:
        """The queue entries of ``jobs`` (missing: not queued), from an answer at most ``max_age`` old."""
        if not isinstance(self.backend, UserQueue):  # the local backend asks no controller
            return self.backend.queue_states(jobs)
        import fcntl

        folder = cache_dir()
        if folder is None:
            self.queries += 1
            queued = self.backend.user_queue()
            return {j.job_id: queued[j.job_id] for j in jobs if j.job_id in queued}
        path = os.path.join(folder, f"queue-{self.key}.json")
        lock = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one asks; the others wait for its answer
            taken, queued = _read(path)
            if time.time() - taken > max_age or any(j.job_id not in queued and j.submitted >= taken for j in jobs):
                taken, queued = time.time(), self.backend.user_queue()
                self.queries += 1
                _write(path, taken, queued)
        finally:
            os.close(lock)
        return {j.job_id: queued[j.job_id] for j in jobs if j.job_id in queued}


PARTITIONS_MAX_AGE = 300.0  # partitions change rarely: one sinfo answer serves every submit for this long


def shared_text(key: str, max_age: float, ask: Callable[[], str] | None) -> str | None:
    """An answer shared by this user's processes here: the cached one if at most ``max_age`` old,
    else ``ask()``'s, cached (``None`` when stale and ``ask`` is ``None``)."""
    folder = cache_dir()
    try:
        if folder is None:
            raise FileNotFoundError
        with open(os.path.join(folder, f"{key}.json"), encoding="utf-8") as fh:
            data = json.load(fh)
        if time.time() - float(data["time"]) <= max_age:
            return str(data["text"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if ask is None:
        return None
    text = ask()
    store_text(key, text)
    return text


def store_text(key: str, text: str) -> None:
    """Cache ``text`` as the current answer for ``key`` (see :func:`shared_text`)."""
    folder = cache_dir()
    if folder is not None:
        _store(os.path.join(folder, f"{key}.json"), {"time": time.time(), "text": text})


def _store(path: str, answer: dict[str, object]) -> None:
    """Write a shared answer whole (readers never see half of one), never through a link."""
    tmp = f"{path}.{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # a leftover of a killed process with this pid
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "w") as fh:
        json.dump(answer, fh)
    os.replace(tmp, path)


def _read(path: str) -> tuple[float, dict[str, JobInfo]]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        jobs = {k: JobInfo(**{**v, "state": JobState.from_slurm(v["state"])}) for k, v in data["jobs"].items()}
        return float(data["time"]), jobs
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0, {}


def _write(path: str, taken: float, queued: dict[str, JobInfo]) -> None:
    _store(path, {"time": taken, "jobs": {k: asdict(v) for k, v in queued.items()}})


# -- jobs that can never start ----------------------------------------------------
def unfit_reason(plan: JobPlan, partitions: dict[str, Partition]) -> str | None:
    """Why ``plan`` can never start on its partitions as they stand (``None`` when it can)."""
    default = next((p.name for p in partitions.values() if p.default), None)
    limit = time_minutes(plan.time)
    for comp in plan.components:
        name = comp.partition or plan.partition or default
        if name is None:
            return "no partition given and the cluster has no default partition"
        part = partitions.get(name)
        if part is None:
            return f"partition {name!r} does not exist (partitions: {', '.join(sorted(partitions))})"
        where = f"{comp.name}: " if plan.heterogeneous else ""
        fewest = comp.fewest + comp.spares
        if fewest > part.nodes:
            at_least = "at least " if comp.elastic else ""
            spares = f" ({comp.fewest} and {comp.spares} spare)" if comp.spares else ""
            return f"{where}{at_least}{fewest} nodes asked{spares}, partition {name} has {part.nodes}"
        for kind, (asked, what) in {
            "gpu": (comp.gpus_per_node, "GPUs"),
            plan.npu_gres: (comp.npus_per_node, "NPUs"),
        }.items():
            has = part.max_per_node.get(kind, 0)
            if asked > has:
                more = f"has more than {has}" if has else f"has {what} (GRES {kind})"
                return f"{where}{asked} {what} per node asked, no node of partition {name} {more}"
        if limit is not None and part.max_minutes is not None and limit > part.max_minutes:
            return f"time {plan.time} is above partition {name}'s maximum of {part.max_minutes} minutes"
    return None
