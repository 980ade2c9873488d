"""Following jobs: one job's status over time (:class:`Follower`, the CLI's ``--wait``, ``wait``, ``logs -f``
and the console's job pages alike), and many jobs' statuses from one queue answer (:func:`statuses_of`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from ti_slurm.backends.base import Backend, JobInfo
from ti_slurm.core.causes import blamed_node
from ti_slurm.core.errors import BackendError, UnknownJobError
from ti_slurm.core.events import parse_events
from ti_slurm.core.paths import JobPaths
from ti_slurm.core.states import JobState
from ti_slurm.follow.files import JobFiles
from ti_slurm.follow.queue import FOLLOW_FIRST, FOLLOW_MAX, RECORD_STALE, SHARED_MAX_AGE, SharedQueue, UserQueue
from ti_slurm.follow.status import JobStatus, job_status, recorded_end
from ti_slurm.submitting.avoided import note_blamed

RECORD_POLL_MAX = 1.0  # seconds between reads of a followed job's own record, at most (no controller call)


def read_events(backend: Backend, info: JobInfo) -> list[dict[str, Any]]:
    """The job's events from its ``status.jsonl``, through whichever backend reaches it."""
    return parse_events(backend.read_text(JobPaths(info.job_dir).status)) if info.job_dir else []


def job_queue(backend: Backend, info: JobInfo) -> SharedQueue:
    """The shared queue answers a job is followed on: its backend's, on its login node or cluster."""
    return SharedQueue(backend, info.host or (f"cluster:{info.cluster}" if info.cluster else ""))


def statuses_of(backend: Backend, host: str, group: list[JobInfo], max_age: float | None = None) -> list[JobStatus]:
    """The status of jobs of ``backend``: their records, and for the unended one shared queue answer at most
    ``max_age`` old (default: :data:`~ti_slurm.follow.queue.SHARED_MAX_AGE`)."""
    records = {j.job_id: read_events(backend, j) for j in group}
    unended = [j for j in group if not recorded_end(j, records[j.job_id])]  # only these need the queue
    age = SHARED_MAX_AGE if max_age is None else max_age
    queued = SharedQueue(backend, host).states(unended, age) if unended else {}
    return [learn_blames(backend, j, job_status(j, records[j.job_id], queued.get(j.job_id))) for j in group]


def learn_blames(backend: Backend, info: JobInfo, status: JobStatus) -> JobStatus:
    """Note the nodes the job's attempts blamed, for this user's next jobs to avoid
    (:mod:`ti_slurm.submitting.avoided`; a scheduler's nodes only: a local job's are this machine); ``status`` as
    it was."""
    if backend.queues_jobs and any(blamed_node(a.cause, a.evidence) or a.lost_nodes for a in status.attempts):
        note_blamed(info.ref, info.cluster, status.attempts)
    return status


class Follower:
    """One job's status over time: its record read every time, the queue asked on a backoff.

    The queue is first asked right away, or, for a job this process has just
    submitted, after FOLLOW_FIRST seconds (its record often says it runs by
    then); then again after twice as long each time, up to FOLLOW_MAX. Once
    the record shows the job running, its supervisor's "alive" events (one a
    minute) say it still runs: the queue is asked only when the record has not
    grown for RECORD_STALE seconds (the supervisor was killed, its node was
    lost), and then every FOLLOW_MAX. A record with its final event needs no
    queue at all.
    """

    def __init__(self, info: JobInfo, backend: Backend, interval: float | None = None) -> None:
        self.info, self.backend = info, backend
        self.queue = job_queue(backend, info)
        self.files = JobFiles(info, backend)
        self.interval = interval or FOLLOW_FIRST  # a console's: FOLLOW_MAX from the start (the list's answers)
        just_submitted = info.submitted and time.time() - info.submitted < FOLLOW_FIRST
        self.next_ask = time.monotonic() + (FOLLOW_FIRST if just_submitted else 0.0)
        # until the queue is asked, a job just submitted counts as what sbatch left it: pending
        self.queued: JobInfo | None = replace(info, reason="submitted")
        self.seen_running = False
        self.events_seen, self.changed_at = 0, time.monotonic()  # when the job's record last grew
        self.ended_attempts = 0  # the attempts whose blamed nodes were noted (learnt)
        self.asks_controller = isinstance(backend, UserQueue)  # else asking costs nothing: ask every time

    def status(self, ask_now: bool = False) -> JobStatus:
        info = self.info
        events = read_events(self.backend, info)
        if recorded_end(info, events):
            return self.learnt(job_status(info, events, None))
        events = self._ask_queue(events, ask_now)
        status = job_status(info, events, self.queued)
        if not events and status.state is JobState.UNKNOWN and self.files.directory_gone():  # none before it starts
            status.reason = f"its job directory {info.job_dir} is gone (deleted while the job ran?): {status.reason}"
        if status.state.is_terminal and info.job_dir:  # ended, and its record did not say so: the batch output may
            self.files.add_batch_output(status)
        if status.state is JobState.RUNNING and status.components and not self.seen_running:
            self.seen_running = True  # from now on the queue only tells that it vanished: rarely
            self.interval = FOLLOW_MAX
        if status.state is JobState.UNKNOWN and not status.components and not info.name:
            raise UnknownJobError(f"job {info.ref}: not queued and no record of it here (unknown id, or not yours)")
        return self.learnt(status)

    def learnt(self, status: JobStatus) -> JobStatus:
        """``status``, its blamed nodes noted once per ended attempt (not at every poll of a long wait)."""
        ended = sum(1 for a in status.attempts if a.ended)
        if ended != self.ended_attempts:
            self.ended_attempts = ended
            learn_blames(self.backend, self.info, status)
        return status

    def _ask_queue(self, events: list[dict[str, Any]], ask_now: bool) -> list[dict[str, Any]]:
        """Ask the queue when it is time (see the class); the job's events, read again when it left the queue."""
        now = time.monotonic()
        if len(events) != self.events_seen:
            self.events_seen, self.changed_at = len(events), now
        if self.seen_running and now - self.changed_at < RECORD_STALE and self.asks_controller:
            self.next_ask = max(self.next_ask, now)  # its supervisor says it is alive: the controller is not asked
        elif ask_now or now >= self.next_ask or not self.asks_controller:  # a local job's "queue": a pid check
            max_age = SHARED_MAX_AGE if ask_now else self.interval
            self.queued = self.queue.states([self.info], max_age).get(self.info.job_id)  # Slurm's id, not gpu:123
            self.next_ask, self.interval = now + self.interval, min(self.interval * 2, FOLLOW_MAX)
            gone = self.queued is None or self.queued.state.is_terminal
            if gone and self.info.job_dir:  # it left the queue: its last record may still be landing
                time.sleep(1.0)
                return read_events(self.backend, self.info)
        return events

    def logs(self, node: str | None = None, follow: bool = False, attempt: int | None = None) -> Iterator[str]:
        """The job's log lines (each node's, headed ``==> label <==`` when there are several).

        With ``follow``, keep yielding new lines until the job ends, across requeues (each attempt's logs in
        turn); a line still being written waits until it is complete. ``attempt`` shows an earlier attempt's
        logs instead (they are kept).
        """
        offsets: dict[str, int] = {}  # bytes of each log already shown: only what was appended is read again
        status = self.status()
        if status.state is JobState.UNKNOWN and self.files.directory_gone():  # a job not started has none yet
            raise BackendError(f"job {self.info.ref}: no logs to show: its job directory {self.info.job_dir} is gone")
        shown_attempt: int | None = None
        while True:
            last_round = not follow or status.settled
            if not status.components and not last_round:  # not started yet: no node to name
                time.sleep(1.0)
                status = self.status()
                continue
            latest = status.attempts[-1].attempt if status.attempts else 0
            if attempt is None and latest != shown_attempt:
                if shown_attempt is not None:
                    yield f"==> attempt {latest} (TI_SLURM_RESTART_COUNT={latest}) <=="
                shown_attempt, offsets = latest, {}  # the same files, anew: the earlier ones were moved aside
            for label, path in self.files.log_files(status, node, attempt):
                headed = node is not None
                for lines in self.files.new_lines(path, offsets, last_round):
                    if not headed:
                        headed = True
                        yield f"==> {label} <=="
                    yield from lines
            if last_round:
                return
            time.sleep(1.0)
            status = self.status()
