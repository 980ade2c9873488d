"""Notifications: the supervisor posts the job's events to the spec's ``notify`` URLs as they happen.

Every event the supervisor records (``status.jsonl``) passes :meth:`Notifier.on_event`, which names
what users subscribe to (``running``, ``completed``, ``failed``, ``cancelled``, ``requeued``, ``hung``),
builds each message there and then (the failed node's last log lines are read before a restart sets
them aside) and queues it. One thread posts them in order: a short timeout, a few tries with
backoff, never the job's business: a post that cannot be made is noted in the job's record
(``notify`` events, the URL shown as its scheme and host only: the rest is often a token), and at the
end the supervisor waits at most :data:`DRAIN_SECONDS` for the last ones. ``urllib`` is imported by
that thread, and only in a job that has somewhere to post.
"""

from __future__ import annotations

import os
import threading

from ti_slurm.core.events import EventLog

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from ti_slurm.core.paths import JobPaths
    from ti_slurm.core.plan import JobPlan

TIMEOUT_SECONDS = 5.0  # one post's connect-and-answer limit
TRIES = 3  # ... this many times, after 1 s and 2 s
DRAIN_SECONDS = 5.0  # at the end, what the supervisor waits at most for the posts still queued
TAIL_LINES = 20  # of the failed node's log, in a failed, hung or requeued event
TAIL_BYTES = 16 * 1024


def event_names(record: dict[str, Any]) -> list[str]:
    """What users subscribe to that one recorded event is: a ``start`` is ``running``; an ``end`` is
    ``hung`` (its cause was a hang) and then ``requeued``, ``completed``, ``cancelled`` or ``failed``."""
    kind = record.get("event")
    if kind == "start":
        return ["running"]
    if kind != "end":
        return []
    names = ["hung"] if record.get("cause") == "hang" else []
    state = record.get("state")
    if record.get("requeue") is True:
        return [*names, "requeued"]
    return [*names, {"COMPLETED": "completed", "CANCELLED": "cancelled"}.get(str(state), "failed")]


def shown_url(url: str) -> str:
    """``https://hooks.slack.com/services/T0/B0/secret`` -> ``https://hooks.slack.com/...``: what logs say."""
    scheme, _, rest = url.partition("://")
    host = rest
    for end in "/?#":  # the path, the query or the fragment may hold the token (https://host?key=TOKEN)
        host = host.split(end, 1)[0]
    return f"{scheme}://{host.rsplit('@', 1)[-1]}/..."


def message(plan: JobPlan, paths: JobPaths, name: str, record: dict[str, Any]) -> dict[str, Any]:
    """The event as posted (the ``json`` format's body; the chat formats' text is made from it)."""
    job = paths.job_id
    out: dict[str, Any] = {
        "event": name,
        "job": job,
        "name": plan.name,
        "state": "RUNNING" if name == "running" else str(record.get("state", "")),
        "reason": str(record.get("reason", "")),
        "cause": str(record.get("cause") or ""),  # docs/failures.md: the class of why the attempt ended
        "attempt": record.get("attempt", 0),
        "time": record.get("time"),
        "status_command": f"ti-slurm status {job}",
    }
    if isinstance(record.get("evidence"), dict):
        out["evidence"] = record["evidence"]  # the log line that showed the cause: node, log, line, text
    failed = record.get("failed")
    if name in ("failed", "hung", "requeued") and isinstance(failed, dict) and failed.get("component") is not None:
        label = f"{failed['component']}-{failed.get('index')}"
        out.update(node=failed.get("node"), node_label=label, logs_command=f"ti-slurm logs {job} --node {label}")
        out["log_tail"] = _tail(paths.node_log(str(failed["component"]), failed.get("index")))
    if record.get("event") == "end":
        out["goodput"] = time_went(plan, paths, record)
    return out


def time_went(plan: JobPlan, paths: JobPaths, end: dict[str, Any]) -> dict[str, Any]:
    """Where the job's time went so far (core/goodput.py), from its first start (the queue wait is the client's to
    know): starting, productive, lost, recomputed, wall, effective."""
    from ti_slurm.core.events import own_events, parse_events
    from ti_slurm.core.goodput import attempts_of, goodput

    try:
        with open(paths.status) as fh:
            events = own_events(parse_events(fh.read()), plan.submission)
    except OSError:
        events = [end]
    split = goodput(0.0, attempts_of(events), float(end.get("time") or 0.0)).as_dict()
    del split["queued"]
    return split


def _tail(path: str) -> list[str]:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - TAIL_BYTES))
            return fh.read().decode(errors="replace").splitlines()[-TAIL_LINES:]
    except OSError:
        return []


def text_of(msg: dict[str, Any]) -> str:
    """The message for people (the chat formats)."""
    head = f"ti-slurm: job {msg['job']} ({msg['name']}) {msg['event']}"
    if msg["event"] != "running":
        head += f": {msg['state']}" + (f", {msg['reason']}" if msg["reason"] else "")
    lines = [head + (f" (attempt {msg['attempt']})" if msg.get("attempt") else "")]
    if msg.get("node"):
        lines.append(f"node {msg['node']} ({msg['node_label']}), its last lines:")
        lines += [f"  {line}" for line in msg.get("log_tail", [])]
        lines.append(msg["logs_command"])
    if msg.get("goodput"):
        from ti_slurm.core.goodput import BUCKETS, Goodput

        lines.append(Goodput(**msg["goodput"]).line(BUCKETS[1:]))  # from the first start: no queue wait
    lines.append(msg["status_command"])
    return "\n".join(lines)


def body(fmt: str, msg: dict[str, Any]) -> bytes:
    """The POST body of ``msg`` in ``fmt``: the message itself (json), or each chat robot's text message."""
    import json

    text = text_of(msg)
    wrapped: dict[str, Any] = {
        "json": msg,
        "slack": {"text": text},
        "wecom": {"msgtype": "text", "text": {"content": text}},
        "dingtalk": {"msgtype": "text", "text": {"content": text}},
        "feishu": {"msg_type": "text", "content": {"text": text}},
    }[fmt]
    return json.dumps(wrapped, ensure_ascii=False).encode()


def notifying_log(plan: JobPlan, paths: JobPaths) -> tuple[EventLog, Notifier]:
    """The job's record (``status.jsonl``), its events passed to the job's :class:`Notifier`, which notes there
    what it could not post."""
    notifier = Notifier(plan, paths)
    log = EventLog(paths.status, plan.submission, notifier.on_event)
    notifier.note = log.append
    return log, notifier


class Notifier:
    """Queues the job's notifications as its events are recorded; one thread posts them in order."""

    def __init__(self, plan: JobPlan, paths: JobPaths) -> None:
        self.plan, self.paths = plan, paths
        self.note: Callable[..., None] = lambda kind, attempt, **data: None  # the job's record: EventLog.append
        self.pending: list[tuple[dict[str, Any], dict[str, Any]] | None] = []
        self.ready = threading.Condition()
        self.thread: threading.Thread | None = None

    def on_event(self, record: dict[str, Any]) -> None:
        """An event was recorded: queue a message to every URL that asked for it."""
        for name in event_names(record) if self.plan.notify else ():
            targets = [t for t in self.plan.notify if name in t.get("on", ())]
            if not targets:
                continue
            msg = message(self.plan, self.paths, name, record)
            with self.ready:
                self.pending += [(t, msg) for t in targets]
                self.ready.notify()
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="ti-slurm-notify", daemon=True)
                self.thread.start()

    def close(self) -> None:
        """The job ended: wait at most DRAIN_SECONDS for what is queued, then note what was not sent."""
        if self.thread is None:
            return
        with self.ready:
            self.pending.append(None)
            self.ready.notify()
        self.thread.join(DRAIN_SECONDS)
        with self.ready:
            left = [p for p in self.pending if p is not None]
        for target, msg in left:
            self._noted(target, msg, f"not sent: the job ended ({DRAIN_SECONDS:.0f} s after its end at most)")

    def _run(self) -> None:
        while True:
            with self.ready:
                while not self.pending:
                    self.ready.wait()
                item = self.pending[0]
            if item is None:
                return
            self._post(*item)
            with self.ready:
                self.pending.pop(0)

    def _post(self, target: dict[str, Any], msg: dict[str, Any]) -> None:
        import time
        import urllib.request

        handlers = []
        if self.plan.notify_proxy:
            handlers.append(
                urllib.request.ProxyHandler({"http": self.plan.notify_proxy, "https": self.plan.notify_proxy})
            )
        else:
            handlers.append(urllib.request.ProxyHandler({}))  # the node's environment's proxies are not the site's
        opener = urllib.request.build_opener(*handlers)
        data = body(str(target.get("format", "json")), msg)
        why = ""
        for attempt in range(TRIES):
            if attempt:
                time.sleep(2 ** (attempt - 1))
            request = urllib.request.Request(str(target["url"]), data=data, method="POST")
            request.add_header("Content-Type", "application/json; charset=utf-8")
            request.add_header("User-Agent", "ti-slurm")
            try:
                with opener.open(request, timeout=TIMEOUT_SECONDS) as answer:
                    answer.read(4096)
                return
            except Exception as exc:
                why = _why(exc)
        self._noted(target, msg, f"{why} ({TRIES} tries)")

    def _noted(self, target: dict[str, Any], msg: dict[str, Any], why: str) -> None:
        try:  # noqa: SIM105 (contextlib is not imported on the job path)
            self.note("notify", msg.get("attempt", 0), delivered=False, to=shown_url(str(target["url"])),
                      notification=msg["event"], why=why)  # fmt: skip
        except OSError:
            pass


def _why(exc: BaseException) -> str:
    """A failed post's reason, without the URL (it may hold a token)."""
    code = getattr(exc, "code", None)
    if isinstance(code, int):
        return f"HTTP {code}"
    reason = getattr(exc, "reason", exc)
    return f"{type(reason).__name__}: {reason}"[:200]
