"""The backend interface and the job registry shared by all backends."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from ti_slurm.plan import JobPlan


@dataclass
class JobInfo:
    """What ti-slurm knows of a submitted job."""

    job_id: str
    name: str = ""
    backend: str = ""
    job_dir: str = ""
    state: str = "UNKNOWN"  # PENDING | RUNNING | COMPLETED | FAILED | CANCELLED | ...
    reason: str = ""
    nodes: str = ""
    host: str = ""
    submission: str = ""


class Backend(Protocol):
    """Submit, watch and stop jobs somewhere."""

    name: str

    def submit(self, plan: JobPlan, script: str) -> JobInfo:
        """Submit a rendered job; return its id and job directory."""
        ...

    def queue_states(self, jobs: list[JobInfo]) -> dict[str, JobInfo]:
        """Scheduler state of many jobs in one call; jobs no longer queued are missing."""
        ...

    def cancel(self, job: JobInfo) -> None: ...

    def read_text(self, path: str) -> str | None:
        """A file of the job (status, logs); ``None`` when absent."""
        ...


def read_local_text(path: str) -> str | None:
    """A job file on this machine (or its shared filesystem); ``None`` when absent."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "ti-slurm" / "jobs"


def remember(info: JobInfo) -> None:
    """Record a submitted job so status/logs/cancel find its directory later."""
    folder = state_dir()
    folder.mkdir(parents=True, exist_ok=True)
    record = asdict(info) | {"submitted": time.time()}
    tmp = folder / f".{info.job_id}.tmp"
    tmp.write_text(json.dumps(record) + "\n", encoding="utf-8")
    tmp.replace(folder / f"{info.job_id}.json")


def recall(job_id: str) -> JobInfo | None:
    path = state_dir() / f"{job_id}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    data.pop("submitted", None)
    return JobInfo(**data)


def recall_all() -> list[JobInfo]:
    folder = state_dir()
    out = []
    for path in sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime) if folder.is_dir() else []:
        info = recall(path.stem)
        if info is not None:
            out.append(info)
    return out
