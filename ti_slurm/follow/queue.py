"""The scheduler's queue, asked rarely and shared: ti-slurm's load on the controller.

Following a job reads the job's own record (``status.jsonl``); the queue is
asked only to tell pending from running, and to learn that a job left it
without a final record. :class:`SharedQueue` makes that one ``scontrol -o show job``
for all of a user's jobs, shared through a small cache file by every follower
on the machine (a sweep script, a notebook, ``ti-slurm list`` in a ``watch``):
a follower whose copy is fresh enough uses it; the first one to find it stale
asks the scheduler, under a lock, while the others wait for its answer.
The answers' files are ``backends/answers.py``'s.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import fields
from typing import Protocol, TypeVar, runtime_checkable

from ti_slurm.backends.answers import cache_dir, cache_key, write_answer
from ti_slurm.backends.base import Backend, JobInfo
from ti_slurm.core.states import JobState

FOLLOW_FIRST = 2.0  # seconds before a follower first asks the queue again ...
FOLLOW_MAX = 60.0  # ... backing off to about once a minute
RECORD_STALE = 150.0  # a running job's record silent this long (its supervisor writes a line a minute): ask
SHARED_MAX_AGE = 30.0  # a one-shot `status`/`list` takes an answer this fresh from another process (a controller
# query per 30 s at most for all of a user's followers; a job submitted since, or cancelled by ti-slurm, is fresh)


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


@runtime_checkable
class QueueSince(Protocol):
    """A backend that can ask whether anything changed since its last answer (slurmrestd's ``update_time``)."""

    def user_queue_since(self, mark: int) -> tuple[dict[str, JobInfo] | None, int]:
        """This user's queue, or ``None`` when the controller's job table has not changed since ``mark`` (the
        server's own time of the answer before; 0: ask for the whole queue); with this answer's mark (0: none)."""
        ...


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
            taken, queued, mark = _read(path)
            if time.time() - taken > max_age or any(j.job_id not in queued and j.submitted >= taken for j in jobs):
                taken, queued, mark = time.time(), *self._ask(queued, mark)
                self.queries += 1
                _write(path, taken, queued, mark)
        finally:
            os.close(lock)
        return {j.job_id: queued[j.job_id] for j in jobs if j.job_id in queued}


    def _ask(self, queued: dict[str, JobInfo], mark: int) -> tuple[dict[str, JobInfo], int]:
        """The controller's answer, and its mark: where the backend can ask what changed since the answer held
        (its ``mark``), only that (nothing changed: the answer held stands); else the whole queue."""
        if isinstance(self.backend, QueueSince):
            changed, mark = self.backend.user_queue_since(mark)
            return (queued if changed is None else changed), mark
        assert isinstance(self.backend, UserQueue)
        return self.backend.user_queue(), 0


def _read(path: str) -> tuple[float, dict[str, JobInfo], int]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        jobs = {k: JobInfo(**{**v, "state": JobState.from_slurm(v["state"])}) for k, v in data["jobs"].items()}
        return float(data["time"]), jobs, int(data.get("mark", 0))
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0, {}, 0


def _write(path: str, taken: float, queued: dict[str, JobInfo], mark: int) -> None:
    names = [f.name for f in fields(JobInfo)]  # (dataclasses.asdict copies deeply: 10x slower on a large queue)
    jobs = {k: {n: getattr(v, n) for n in names} for k, v in queued.items()}
    write_answer(path, {"time": taken, "mark": mark, "jobs": jobs})
