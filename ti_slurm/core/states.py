"""Job states: one enum for the supervisor's records, the queue and the API."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum


class JobState(StrEnum):
    """Where a job is. The value is the name, as Slurm and ``status --json`` spell it."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    UNKNOWN = "UNKNOWN"

    @property
    def is_terminal(self) -> bool:
        """The job has ended: nothing of it runs any more, and the state will not change."""
        return self in _TERMINAL

    @classmethod
    def from_slurm(cls, text: str) -> JobState:
        """A state as ``squeue``/``scontrol`` print it (``CONFIGURING``, ``REQUEUED``, ``CANCELLED by 0``...)."""
        word = text.strip().split(" ", 1)[0].upper()
        if word in cls.__members__:
            return cls[word]
        return _SLURM_ALIASES.get(word, cls.UNKNOWN)


_TERMINAL = frozenset(
    (
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.CANCELLED,
        JobState.TIMEOUT,
        JobState.NODE_FAIL,
        JobState.PREEMPTED,
    )
)


def tally(states: Iterable[JobState]) -> dict[str, int]:
    """How many of ``states`` are in each state, in the states' order: ``{"COMPLETED": 2, "FAILED": 1}``."""
    found = list(states)
    return {state.value: found.count(state) for state in JobState if state in found}


def tally_line(states: Iterable[JobState]) -> str:
    """``2 COMPLETED, 1 FAILED``: a sweep's points, or any group of jobs, by state."""
    return ", ".join(f"{n} {state}" for state, n in tally(states).items())


# Slurm's other queue states, by what they mean to someone following the job.
_SLURM_ALIASES = {
    "CONFIGURING": JobState.RUNNING,  # nodes booting: the job has them
    "COMPLETING": JobState.RUNNING,  # the job's processes are ending
    "RESIZING": JobState.RUNNING,
    "STAGE_OUT": JobState.RUNNING,
    "SIGNALING": JobState.RUNNING,
    "REQUEUED": JobState.PENDING,
    "REQUEUE_HOLD": JobState.PENDING,
    "REQUEUE_FED": JobState.PENDING,
    "RESV_DEL_HOLD": JobState.PENDING,
    "STOPPED": JobState.SUSPENDED,
    "BOOT_FAIL": JobState.NODE_FAIL,
    "DEADLINE": JobState.TIMEOUT,
    "OUT_OF_MEMORY": JobState.FAILED,
    "SPECIAL_EXIT": JobState.FAILED,
    "REVOKED": JobState.CANCELLED,
}
# what scontrol says of a job Slurm has requeued (its next start is pending)
REQUEUED_STATES = frozenset(
    ["PENDING", *(word for word, state in _SLURM_ALIASES.items() if word.startswith("REQUEUE"))]
)
