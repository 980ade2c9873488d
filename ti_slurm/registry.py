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
from ti_slurm.job.states import JobState


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
        data = json.loads(path.read_text(encoding="utf-8"))
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
    out = []
    for path in sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime) if folder.is_dir() else []:
        info = recall(path.stem)
        if info is not None:
            out.append(info)
    return out
