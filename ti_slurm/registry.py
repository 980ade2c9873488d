"""The per-user job registry: the jobs submitted from this account, so ``status``, ``logs``,
``cancel`` and ``list`` find their directory, backend and host later.

One JSON file per job in ``$XDG_STATE_HOME/ti-slurm/jobs/`` (``~/.local/state/...``).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from ti_slurm.backends.base import JobInfo
from ti_slurm.core.files import open_regular
from ti_slurm.core.states import JobState

MAX_RECORD = 1 << 16  # a job's record is a few hundred bytes


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "ti-slurm" / "jobs"


def remember(info: JobInfo) -> None:
    """Record a submitted job."""
    folder = state_dir()
    folder.mkdir(parents=True, exist_ok=True)
    record = asdict(info) | {"state": info.state.value, "submitted": info.submitted or time.time()}
    tmp = folder / f".{info.job_id}.tmp"
    tmp.write_text(json.dumps(record) + "\n", encoding="utf-8")
    tmp.replace(folder / f"{info.job_id}.json")


def recall(job_id: str) -> JobInfo | None:
    """The record of job ``job_id``, or ``None``."""
    path = state_dir() / f"{job_id}.json"
    try:
        with open_regular(str(path)) as fh:  # a FIFO or a dangling link there is no record
            data = json.loads(fh.read(MAX_RECORD).decode("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    known = {f.name for f in fields(JobInfo)}
    values: dict[str, Any] = {k: v for k, v in data.items() if k in known and isinstance(v, str)}
    if isinstance(data.get("submitted"), int | float):
        values["submitted"] = float(data["submitted"])
    if "job_id" not in values:
        return None
    values["state"] = JobState.from_slurm(values.get("state", ""))
    return JobInfo(**values)


def recall_all() -> list[JobInfo]:
    """Every recorded job, oldest first."""
    folder = state_dir()
    dated = []
    for path in folder.glob("*.json") if folder.is_dir() else []:
        try:
            dated.append((path.lstat().st_mtime, path.stem))  # a dangling link is no record: recall says so
        except OSError:
            continue  # removed meanwhile
    out = []
    for _, job_id in sorted(dated):
        info = recall(job_id)
        if info is not None:
            out.append(info)
    return out
