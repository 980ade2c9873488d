"""The per-user job registry: the jobs submitted from this account, so ``status``, ``logs``,
``cancel`` and ``list`` find their directory, backend and host later.

One JSON file per job in ``$XDG_STATE_HOME/ti-slurm/jobs/`` (``~/.local/state/...``), and one per
sweep in ``.../ti-slurm/sweeps/`` (its points, each also recorded as a job).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
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
    """Record a submitted job (a new one also at the end of the index of submissions)."""
    folder = state_dir()
    known = (folder / f"{info.ref}.json").exists()
    submitted = info.submitted or time.time()
    _store(folder, info.ref, asdict(info) | {"state": info.state.value, "submitted": submitted})
    if not known:
        _index(folder, submitted, info.ref)


INDEX = "index"  # the registry's submissions, oldest first: one "<submitted>\t<job ref>" line each, appended
INDEX_READ = 64 * 1024  # bytes of the index read at a time, from its end


def _index(folder: Path, submitted: float, ref: str) -> None:
    """Add a submission to the index (made from every record first when there is none: an older registry)."""
    import os

    if not (folder / INDEX).exists():
        _rebuild_index(folder)
        return  # the rebuilt index holds it
    try:
        fd = os.open(folder / INDEX, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    except OSError:
        return  # the records stay the truth: recall_newest falls back to them
    try:  # one short line in one write: appends of several processes never interleave
        os.write(fd, f"{submitted:.6f}\t{ref}\n".encode())
    finally:
        os.close(fd)


def _rebuild_index(folder: Path) -> None:
    lines = "".join(f"{info.submitted:.6f}\t{info.ref}\n" for info in sorted(recall_all(), key=lambda i: i.submitted))
    tmp = folder / f".{INDEX}.{time.monotonic_ns()}.tmp"
    tmp.write_text(lines, encoding="utf-8")
    tmp.chmod(0o600)
    tmp.replace(folder / INDEX)


def recall_newest(count: int, wanted: Callable[[JobInfo], bool] = lambda info: True) -> list[JobInfo]:
    """The newest ``count`` recorded jobs that are ``wanted``, oldest first, read from the end of the index: as
    fast for a registry of 100,000 jobs as for one of 100 (a record since removed, or an index line that is no
    record's, is passed over)."""
    folder = state_dir()
    if not folder.is_dir():
        return []
    if not (folder / INDEX).is_file():
        _rebuild_index(folder)
    found: list[JobInfo] = []
    seen: set[str] = set()
    for ref in _index_backwards(folder / INDEX):
        if ref in seen:
            continue
        seen.add(ref)
        info = recall(ref)
        if info is not None and wanted(info):
            found.append(info)
            if len(found) == count:
                break
    return found[::-1]


def recorded_count() -> int:
    """How many jobs the registry's index holds (its lines: a few MB for 100,000 jobs, read in tens of ms)."""
    count = 0
    try:
        with open_regular(str(state_dir() / INDEX)) as fh:
            while block := fh.read(1 << 20):
                count += block.count(b"\n")
    except OSError:
        return 0
    return count


def _index_backwards(path: Path) -> Iterator[str]:
    """The job refs of the index, newest first (read a block at a time from its end)."""
    try:
        with open_regular(str(path)) as fh:
            end = fh.seek(0, 2)
            rest = b""
            while end > 0:
                start = max(0, end - INDEX_READ)
                fh.seek(start)
                block = fh.read(end - start) + rest
                end = start
                lines = block.split(b"\n")
                rest = lines.pop(0) if start > 0 else b""  # a line cut at the block's start: read with the next
                for line in reversed(lines):
                    _, tab, ref = line.decode(errors="replace").partition("\t")
                    if tab and ref:
                        yield ref
    except OSError:
        return


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
