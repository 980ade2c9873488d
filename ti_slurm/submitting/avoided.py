"""Nodes this user's jobs stay off for a while: a node a job's failure blamed (a GPU fault, a step Slurm could
not start, a lost node, a filesystem error on it, the root of an NCCL cascade) is left out of the same user's next
jobs (``--exclude``) until it expires (:data:`AVOID_HOURS`), as ModelArts isolates a faulty node before it
reschedules. Never more than a quarter of a partition's nodes are left out: a sick partition is the admins' to
drain, not a reason for no job to start.

Learnt whenever ti-slurm reads a job's end (``wait``, ``status``, ``list``, the console); kept in
``$XDG_STATE_HOME/ti-slurm/avoided/nodes.json``, in a folder of this user's alone. ``ti-slurm nodes`` lists
them, ``ti-slurm nodes --release NODE`` ends one.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ti_slurm.core.causes import blamed_node

AVOID_HOURS = 24.0  # how long a blamed node is left out of this user's jobs
KEPT_AT_MOST = 256  # entries, newest kept (a file read at every submit stays small)


def avoided_path() -> str:
    from ti_slurm.core.paths import state_home

    return os.path.join(state_home(), "avoided", "nodes.json")  # its folder this user's alone (0700)


def read_avoided(now: float | None = None) -> list[dict[str, Any]]:
    """The entries that have not expired, newest first (each: node, cause, job, cluster, since, until, line)."""
    from ti_slurm.core.files import open_regular

    now = time.time() if now is None else now
    try:
        with open_regular(avoided_path()) as fh:
            data = json.loads(fh.read(1 << 20).decode("utf-8"))
    except (OSError, ValueError):
        return []
    entries = data if isinstance(data, list) else []
    good = [e for e in entries if isinstance(e, dict) and isinstance(e.get("node"), str) and _number(e.get("until"))]
    return sorted((e for e in good if e["until"] > now), key=lambda e: -_number(e.get("since")))


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _write(entries: Sequence[Mapping[str, Any]]) -> None:
    from ti_slurm.core.files import private_dir, write_atomic

    folder = os.path.dirname(avoided_path())
    os.makedirs(os.path.dirname(folder), exist_ok=True)
    if private_dir(folder) is None:  # another user's or a planted folder: nothing is written there
        write_atomic(avoided_path(), json.dumps(list(entries)[:KEPT_AT_MOST]) + "\n", 0o600)


def note_blamed(job_ref: str, cluster: str, attempts: Iterable[Any], now: float | None = None) -> None:
    """Remember the nodes a job's attempts blamed (``attempts``: its :class:`AttemptStatus` list), once each; an
    entry that cannot be written is no reason to fail what read the job."""
    now = time.time() if now is None else now
    found = []
    for attempt in attempts:
        nodes = [blamed_node(attempt.cause, attempt.evidence)] if attempt.cause != "node_fail" else attempt.lost_nodes
        ended = attempt.ended or now
        for node in filter(None, nodes):
            key = f"{job_ref}/{attempt.attempt}/{node}"
            line = f"{attempt.cause} in job {job_ref}"
            found.append({"node": node, "cause": attempt.cause, "job": job_ref, "cluster": cluster, "key": key,
                          "since": ended, "until": ended + AVOID_HOURS * 3600, "line": line})  # fmt: skip
    if not found:
        return
    known = read_avoided(now)
    keys = {e.get("key") for e in known}
    fresh = [e for e in found if e["key"] not in keys and e["until"] > now]
    if fresh:
        with contextlib.suppress(OSError):
            _write([*fresh, *known])


def release(node: str) -> int:
    """End every entry of ``node``; how many there were."""
    known = read_avoided()
    kept = [e for e in known if e["node"] != node]
    if len(kept) != len(known):
        _write(kept)
    return len(known) - len(kept)


def to_avoid(cluster: str, partition_nodes: int | None, now: float | None = None) -> list[dict[str, Any]]:
    """The entries a job on ``cluster`` leaves out: the newest, at most a quarter of its partition's
    ``partition_nodes`` (every one when that is None: is there any at all?)."""
    return a_quarter(avoided_on(cluster, now), partition_nodes)


def avoided_on(cluster: str, now: float | None = None) -> list[dict[str, Any]]:
    """The newest entry of each node avoided on ``cluster``, newest first."""
    by_node: dict[str, dict[str, Any]] = {}
    for entry in read_avoided(now):
        if entry.get("cluster", "") == cluster:
            by_node.setdefault(entry["node"], entry)
    return list(by_node.values())


def a_quarter(entries: list[dict[str, Any]], partition_nodes: int | None) -> list[dict[str, Any]]:
    """The newest ``entries``, never more than a quarter of the partition's nodes (all of them: size unknown)."""
    return entries[: partition_nodes // 4] if partition_nodes is not None else entries


def said(entry: Mapping[str, Any], now: float | None = None) -> str:
    """``leaving out node07: gpu_fault in job 4242, 2 h ago``."""
    now = time.time() if now is None else now
    ago = max(0.0, now - _number(entry.get("since")))
    when = f"{ago / 3600:.0f} h ago" if ago >= 3600 else f"{ago / 60:.0f} min ago"
    return f"leaving out {entry['node']}: {entry.get('line') or entry.get('cause')}, {when}"
