"""What each view of the console shows, as plain data (JSON for the pages' scripts), from the API's records.

Pure but for the calls into :mod:`ti_slurm.client` the views make: the same the CLI makes, so the console
costs the controller what ``ti-slurm list``/``status`` cost (one shared queue query per interval).
"""

from __future__ import annotations

import re
import time
from typing import Any

from ti_slurm.core.states import tally_line
from ti_slurm.follow.status import in_state, job_groups, start_line

LOG_START = 64 * 1024  # a log view starts with at most this much of its end
LOG_STEP = 256 * 1024  # and follows at most this much per request
LIST_LIMIT = 500  # rows a list shows at most (newest first)
SCALAR_CHARTS = 12  # a job's tags its page draws (the first, by name: console.js's SCALAR_CHARTS), all it is sent
SCALAR_POINTS = 200  # a sweep's points whose scalars its page reads (the first ones)
# a terminal's control sequences (colours, cursor moves) and other control characters but tab and newline:
# a page shows a log's text, not what a terminal would make of it
_CONTROL = re.compile(r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]|[\x00-\x08\x0b-\x1f\x7f]")


def plain(data: bytes) -> str:
    """Log bytes as text for a page: invalid UTF-8 replaced, control sequences dropped."""
    return _CONTROL.sub("", data.decode(errors="replace").replace("\r\n", "\n"))


def job_rows(statuses: list[Any], state: str = "", name: str = "", cluster: str | None = None) -> list[dict[str, Any]]:
    """The job list: newest first, a sweep as one row with its points, filtered by state, name and cluster
    (``""``: the default one; None: any)."""
    rows = []
    for group in job_groups(statuses):
        if name and name.lower() not in group[0].name.lower():
            continue
        if cluster is not None and cluster_of(group[0].job_id) != cluster:
            continue
        if state and not in_state(group, state):
            continue
        if group[0].sweep:
            head: dict[str, Any] = {"id": group[0].sweep, "name": group[0].name, "state": "SWEEP"}
            rows.append(head | {"reason": tally_line(p.state for p in group), "points": [row(p) for p in group]})
        else:
            rows.append(row(group[0]))
        if len(rows) == LIST_LIMIT:
            break
    return rows


def sweep_rows(status: Any, scalars: dict[int, dict[str, dict[str, float]]] | None = None) -> dict[str, Any]:
    """A sweep's page: one row per point (its parameters, state, reason, its scalars' last and best values:
    ``scalars[index]`` is ``{"last": {tag: value}, "best": {...}}``), the failed points first."""
    got = scalars or {}
    points = [{"index": p.index, "params": p.params, **row(p.status), "scalars": got.get(p.index, {}).get("last", {}),
               "best": got.get(p.index, {}).get("best", {})} for p in status.points]  # fmt: skip
    failed = [p for p in points if p["state"] not in ("COMPLETED", "RUNNING", "PENDING")]
    return {"id": status.sweep_id, "name": status.name, "points": failed + [p for p in points if p not in failed]}


def row(st: Any) -> dict[str, Any]:
    first = st.attempts[0].started if st.attempts else None
    last = st.attempts[-1] if st.attempts else None
    ended = last.ended if last and st.state.is_terminal else None
    sent = st.submitted
    return {
        "id": st.job_id,
        "name": st.name,
        "state": str(st.state),
        "mode": st.mode,
        "nodes": sum(len(c.nodes) for c in st.components),
        "wait": round(first - sent, 1) if first and sent else None,
        "run": round((ended or time.time()) - first, 1) if first else None,
        "reason": st.reason,
        "failed_node": st.failed.get("node", ""),
        "waits_for": st.waits_for,
        "submitted": sent,
        "cluster": cluster_of(st.job_id),
        "terminal": st.state.is_terminal,
    }


def cluster_of(job_id: str) -> str:
    """The cluster a job's id names (``gpu:123``: gpu; "" for the default one)."""
    return job_id.rpartition(":")[0]


def avoided_rows(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The nodes this user's jobs avoid (submitting/avoided.py): node, cluster, cause, the job, until when."""
    return [{"node": e["node"], "cluster": e.get("cluster") or "", "cause": str(e.get("cause", "")),
             "job": str(e.get("job", "")), "since": e.get("since"), "until": e["until"]} for e in entries]  # fmt: skip


def node_state(component_state: Any, exit_code: Any) -> str:
    """A node's own state: its command's exit once recorded (a node that exited 0 in a failed job COMPLETED),
    else its component's state."""
    if isinstance(exit_code, int):
        return "COMPLETED" if exit_code == 0 else "FAILED"
    return str(component_state)


def time_limit_text(time_limit: str | None) -> str:
    """The spec's ``time`` as Slurm reads it: ``90`` is 1 h 30 min."""
    from ti_slurm.follow.progress import clock
    from ti_slurm.slurm.text import time_seconds

    if not time_limit:
        return "the partition's"
    try:
        seconds = time_seconds(time_limit)
    except ValueError:
        return time_limit
    return f"{time_limit} ({clock(seconds)})" if seconds else f"{time_limit} (none)"


def settings(plan: Any) -> list[list[str]]:
    """The plan's key settings, as [name, value] rows: each component's nodes, the partition, the image, the
    time limit, the restart policy, the code snapshot."""
    if plan is None:
        return []
    rows = []
    for comp in plan.components:
        size = f"{comp.min_nodes}-{comp.nodes}" if comp.min_nodes else str(comp.nodes)
        each = [f"{comp.gpus_per_node} GPU" if comp.gpus_per_node else "", f"{comp.npus_per_node} NPU" if
                comp.npus_per_node else "", f"{comp.cpus_per_node} CPU"]  # fmt: skip
        spares = f", {comp.spares} spare(s)" if comp.spares else ""
        rows.append([comp.name, f"{size} node(s) x {' + '.join(x for x in each if x)}{spares}"])
        if comp.partition or plan.partition:
            rows.append([f"{comp.name} partition", str(comp.partition or plan.partition)])
        if comp.container is not None:
            rows.append([f"{comp.name} image", f"{comp.container.image} ({comp.container.runtime or 'site default'})"])
    rows.append(["time limit", time_limit_text(plan.time)])
    restart = []
    if plan.restart_in_place:
        restart.append(f"in place up to {plan.restart_in_place} time(s)")
    if plan.restart_max:
        restart.append(f"requeued up to {plan.restart_max} time(s)")
    if restart and plan.restart_on:
        restart.append(f"on {', '.join(plan.restart_on)}")
    rows.append(["restart", "; ".join(restart) or "none: a failure ends the job"])
    if plan.code_commit:
        rows.append(["code", f"git {plan.code_commit[:12]}{' with changes' if plan.code_dirty else ''}"])
    return rows


def compared_settings(plan: Any) -> list[list[str]]:
    """What a comparison of runs sets side by side: :func:`settings`, the mode, the command, a sweep point's
    parameters and the spec's environment."""
    if plan is None:
        return []
    rows = [["mode", plan.mode], ["command", plan.command], *settings(plan)]
    params = plan.env.get("TI_SLURM_PARAMS", "")
    rows += [[f"env {k}", v] for k, v in sorted(plan.env.items()) if not k.startswith("TI_SLURM_")]
    return [["parameters", params], *rows] if params else rows


def job_page(job: Any, status: Any, usage: list[Any], plan: Any = None) -> dict[str, Any]:
    """A job's page: its summary (when and how it was submitted, the spec as given, the plan's key settings),
    attempts, nodes (with what each uses now), usage series, events."""
    by_label = {u.label: u for u in usage}
    ended = status.state.is_terminal  # an ended node's memory: its peak (its last sample holds no process)
    nodes = []
    for comp in status.components:
        for index, node in enumerate(comp.nodes):
            label = f"{comp.name}-{index}"
            exits = {e.get("index"): e.get("exit_code") for e in comp.node_exits}
            u = by_label.get(label)
            nodes.append({
                "label": label, "component": comp.name, "rank": index, "node": node,
                "state": node_state(comp.state, exits.get(index)),
                "exit_code": exits.get(index),
                "cpu": u.cpu_percent if u else None, "rss": (u.peak_rss if ended else u.rss) if u else None,
                "gpus": {i: g.get("util") for i, g in u.gpus.items()} if u else {},
                "failed": status.failed.get("component") == comp.name and status.failed.get("index") == index,
            })  # fmt: skip
    return {
        "id": status.job_id,
        "name": status.name,
        "state": str(status.state),
        "terminal": status.state.is_terminal,
        "mode": status.mode,
        "reason": status.reason,
        "waits_for": status.waits_for,
        "code": status.code,
        "effective": status.goodput.get("effective"),
        "goodput": status.goodput,  # where its time went (core/goodput.py)
        "attempts": [a.__dict__ | {"start": attempt_start(status, a)} for a in status.attempts],
        "nodes": nodes,
        "series": {u.label: {"node": u.node, "points": u.series, "started": u.started} for u in usage},
        "staging": status.staging,
        "batch_tail": status.batch_tail,
        "submitted": status.submitted or job.info.submitted or None,
        "submitted_by": job.info.command_line,
        "spec": job.info.spec_text,
        "settings": settings(plan),
    }


def attempt_start(status: Any, attempt: Any) -> str:
    """How ``attempt`` started, as ``status`` says it (the queue wait for the first)."""
    submitted = status.submitted if attempt is status.attempts[0] else 0.0
    return start_line(submitted, attempt.timeline, attempt.ended)


def events(job: Any, limit: int = 2000) -> list[dict[str, Any]]:
    """The job's record, newest last, each event with a level (info, warning, error), at most ``limit``."""
    from ti_slurm.follow.follower import read_events

    out = []
    for ev in read_events(job.backend, job.info)[-limit:]:
        kind = str(ev.get("event", ""))
        state = str(ev.get("state", ""))
        level = "error" if state in ("FAILED", "NODE_FAIL", "TIMEOUT", "HUNG") else "info"
        if kind in ("signal", "notify", "straggler") or ev.get("requeued") or ev.get("in_place"):
            level = "warning"
        detail = {k: v for k, v in ev.items() if k not in ("event", "time", "submission")}
        out.append({"time": ev.get("time"), "event": kind, "level": level, "text": event_text(kind, detail)})
    return out


def event_text(kind: str, ev: dict[str, Any]) -> str:
    """An event of the job's record as a sentence (one it does not know: its fields, ``key=value``)."""
    attempt = f"attempt {ev.get('attempt', 0)}"
    if kind == "start":
        comps = ev.get("components", [])
        nodes = "; ".join(f"{c.get('name')} on {', '.join(map(str, c.get('nodes', [])))}" for c in comps)
        return f"{attempt} started: {nodes}"
    if kind == "running":
        return f"every node's command is running (the last to start: {ev.get('last')})"
    if kind == "step-exit":
        nodes = ", ".join(f"{r.get('node')} ({ev.get('component')} {r.get('index')}) exited {r.get('exit_code')}"
                          for r in ev.get("records", []))  # fmt: skip
        how = "was stopped" if ev.get("stopped") else f"exited {ev.get('exit_code')}"
        return f"the {ev.get('component')} step {how}" + (f": {nodes}" if nodes else "")
    if kind == "end":
        then = " and restarts in place" if ev.get("in_place") else " and is requeued" if ev.get("requeue") else ""
        cause = f" (cause: {ev['cause']})" if ev.get("cause") else ""
        return f"{attempt} ended {ev.get('state', '')}{then}: {ev.get('reason', '')}{cause}"
    if kind == "signal":
        return f"{ev.get('signal')} came ({ev.get('cause')}): every node's command got it to save"
    if kind == "straggler":
        took, others = ev.get("seconds_a_step", "?"), ev.get("others", "?")
        return f"straggler: {ev.get('node', '')} took {took} s a step, the other nodes {others} s"
    if kind == "notify":
        return f"the {ev.get('notification', '')} notification to {ev.get('to', '')} was not delivered: {ev.get('why')}"
    if kind == "alive":
        return "the supervisor is alive"
    return " ".join(f"{k}={v}" for k, v in ev.items())


def log_chunk(job: Any, status: Any, label: str, offset: int, attempt: int | None = None) -> dict[str, Any]:
    """A node's log from ``offset`` (``-1``: its last ``LOG_START`` bytes), and where the next read starts."""
    path = node_log(job, status, label, attempt)
    if not path:
        return {"text": "", "offset": max(offset, 0), "cut": False}
    if offset < 0:
        end = job.backend.read_end(path, LOG_START)
        if end is None:
            return {"text": "", "offset": 0, "cut": False}
        length, data = end
        cut = length > len(data)
        start = first_whole_character(data) if cut else 0  # a character cut at the front: left out
        whole = whole_characters(data)
        return {"text": plain(data[start:whole]), "offset": length - len(data) + whole, "cut": cut}
    data = job.backend.read_bytes(path, offset, LOG_STEP) or b""
    whole = whole_characters(data)  # a character cut at the end: read again, whole, by the next read
    return {"text": plain(data[:whole]), "offset": offset + whole, "cut": False}


def first_whole_character(data: bytes) -> int:
    """Where the first whole UTF-8 character of ``data`` starts (past continuation bytes, three at most)."""
    lead = 0
    while lead < min(3, len(data)) and data[lead] & 0xC0 == 0x80:
        lead += 1
    return lead


def whole_characters(data: bytes) -> int:
    """How many bytes of ``data`` end on a whole UTF-8 character (a multi-byte one cut at the end is not)."""
    n = len(data)
    for back in range(1, min(4, n) + 1):
        byte = data[n - back]
        if byte & 0xC0 == 0x80:  # a continuation: look further back for its first byte
            continue
        need = 1 if byte < 0x80 else 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4
        return n if back >= need or byte >= 0xF8 else n - back
    return n


def node_log(job: Any, status: Any, label: str, attempt: int | None = None) -> str:
    """The log file of the node ``label`` names (its label, name or index, as ``ti-slurm logs --node``) in the
    job's ``status``."""
    return next((path for _, path in job.log_files(label, status, attempt)), "")
