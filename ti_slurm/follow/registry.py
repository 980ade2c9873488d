"""The per-user job registry: the jobs submitted from this account, so ``status``, ``logs``,
``cancel`` and ``list`` find their directory, backend and host later.

One JSON file per job in ``$XDG_STATE_HOME/ti-slurm/jobs/`` (``~/.local/state/...``), and one per
sweep in ``.../ti-slurm/sweeps/`` (its points, each also recorded as a job).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from ti_slurm.backends.base import JobInfo
from ti_slurm.core.files import open_regular
from ti_slurm.core.paths import state_home
from ti_slurm.core.states import JobState

MAX_RECORD = 1 << 16  # a job's record is a few hundred bytes


def state_dir() -> Path:
    return Path(state_home()) / "jobs"


def sweeps_dir() -> Path:
    return state_dir().parent / "sweeps"


def _store(folder: Path, name: str, record: dict[str, Any]) -> None:
    if "/" in name or name.startswith(".") or not name:  # an id from a hostile answer: never a path elsewhere
        from ti_slurm.core.errors import BackendError

        raise BackendError(f"a job id of {name[:64]!r} is no job id: not recorded")
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{name}.tmp"
    tmp.write_text(json.dumps(record) + "\n", encoding="utf-8")
    tmp.replace(folder / f"{name}.json")


def _load(path: Path, limit: int = MAX_RECORD) -> dict[str, Any] | None:
    try:
        with open_regular(str(path)) as fh:  # a FIFO or a dangling link there is no record
            data = json.loads(fh.read(limit).decode("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def remember(info: JobInfo) -> None:
    """Record a submitted job."""
    _store(
        state_dir(), info.ref, asdict(info) | {"state": info.state.value, "submitted": info.submitted or time.time()}
    )


MAX_SWEEP_RECORD = 1 << 24  # a sweep's record: its points' parameters


def remember_sweep(record: dict[str, Any]) -> None:
    """Record a submitted sweep (``sweep_id``, its points and their jobs: see :mod:`ti_slurm.sweeps`)."""
    _store(sweeps_dir(), str(record["sweep_id"]), record)


def recall_sweep(sweep_id: str) -> dict[str, Any] | None:
    """The record of sweep ``sweep_id``, or ``None``."""
    data = _load(sweeps_dir() / f"{sweep_id}.json", MAX_SWEEP_RECORD)
    return data if data is not None and isinstance(data.get("points"), list) else None


def sweep_job_ids(job_id: str) -> list[str]:
    """The jobs a pipeline waits for when it names ``job_id``: a sweep of separate jobs is each of its points
    (``<cluster>:<id>`` on a named cluster; a job array's id already stands for all of its tasks); anything else
    is itself."""
    record = recall_sweep(job_id) if job_id.startswith("sweep-") else None
    if record is None:
        return [job_id]
    on = [point_where(record, p, "cluster") for p in record["points"]]  # named with their cluster
    return [f"{c}:{p['job_id']}" if c else str(p["job_id"]) for c, p in zip(on, record["points"], strict=True)]


def point_where(record: dict[str, Any], point: dict[str, Any], key: str) -> str:
    """Where a sweep's point went (``key``: its cluster, backend, login node or folder): a spread sweep's point
    says its own, else the sweep's holds for every point."""
    return str(point.get(key, record.get(key)) or "")


def recall(job_id: str) -> JobInfo | None:
    """The record of job ``job_id`` (``<cluster>:<id>`` for one on a named cluster), or ``None``."""
    data = _load(state_dir() / f"{job_id}.json")
    if data is None:
        return None
    known = {f.name for f in fields(JobInfo)}
    values: dict[str, Any] = {k: v for k, v in data.items() if k in known and isinstance(v, str)}
    if isinstance(data.get("submitted"), int | float):
        values["submitted"] = float(data["submitted"])
    if "job_id" not in values:
        return None
    values["state"] = JobState.from_slurm(values.get("state", ""))
    return JobInfo(**values)


def note_cancelled(job_id: str) -> None:
    """Note in a recorded job's entry that it was cancelled: one cancelled before it started has no record of
    its own, and Slurm soon forgets it (``status`` then says so, not that the job is unknown)."""
    info = recall(job_id)
    if info is not None and not info.state.is_terminal:
        info.state = JobState.CANCELLED
        remember(info)


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
