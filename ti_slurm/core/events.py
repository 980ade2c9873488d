"""The job's record: the events of ``status.jsonl`` and each node's exit record, one writer and one reader each.

``status.jsonl`` has one JSON object a line, appended by the supervisor as things happen:

- ``start``: ``mode``, ``components`` (``[{name, nodes: [node names]}]``);
- ``step-exit``: a launch ended: ``component``, ``nodes`` (indexes), ``exit_code``, ``stopped``, ``records``
  (``[{index, node, exit_code}]``, from the nodes' own exit records);
- ``signal``: the checkpoint signal came: ``signal``, ``cause``, ``deadline``;
- ``alive``: the supervisor still runs (once a minute);
- ``end``: ``state``, ``reason``, ``failed`` (``{component, node, index, exit_code}``), and for an interrupted
  attempt ``cause``, ``requeue``, ``lost_nodes``.

Every event has ``event``, ``time``, ``submission`` (a reused job id never shows an old result) and
``attempt`` (Slurm's restart count). Readers take only this submission's well-formed events
(:func:`own_events`): a hand-edited or damaged line is skipped, as a line that is not an object is.

``nodes/<component>.<n>.json`` is one :class:`NodeExit`, written once by each node's step.
Standard library only; ``json`` is imported only by readers of events (never on a node's path).
"""

from __future__ import annotations

from ti_slurm.core import lightjson
from ti_slurm.core.record import Record

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

LATEST_TIME = 1e11  # seconds since 1970: the year 5138; later (or NaN, or negative) is no time an event has


class NodeExit(Record):
    """One node's exit record: its command's exit code (``error``: why ti-slurm ended it, when it did)."""

    component: str
    index: int
    node: str
    exit_code: int
    started: float
    ended: float
    error: str = ""

    def to_json(self) -> str:
        record = self.as_dict()
        if not self.error:
            del record["error"]
        return lightjson.dumps(record)

    @classmethod
    def from_json(cls, text: str) -> NodeExit:
        """A record as written by :meth:`to_json`; ``ValueError`` for anything else."""
        data = lightjson.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        try:
            record = cls(**data)
        except TypeError as exc:
            raise ValueError(str(exc)) from None
        ints = (record.index, record.exit_code)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in ints):
            raise ValueError("index and exit_code must be integers")
        if not (isinstance(record.component, str) and isinstance(record.node, str) and isinstance(record.error, str)):
            raise ValueError("component, node and error must be strings")
        if not all(_a_number(v) for v in (record.started, record.ended)):
            raise ValueError("started and ended must be numbers")
        return record


class EventLog:
    """A job's ``status.jsonl`` for one submission: the supervisor appends to it, followers read it."""

    def __init__(self, path: str, submission: str, listener: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.path, self.submission = path, submission
        self.listener = listener  # told of each event once it is written (the job's notifications)

    def append(self, kind: str, attempt: int, **data: object) -> None:
        """Add one event (a requeued attempt adds to the same file)."""
        import json
        import time

        record = {"event": kind, "time": round(time.time(), 3), "submission": self.submission, "attempt": attempt}
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record | data) + "\n")
        if self.listener is not None:
            self.listener(record | data)

    def read(self) -> list[dict[str, Any]]:
        """This submission's events so far ([] when there is no record yet)."""
        try:
            with open(self.path, encoding="utf-8") as fh:
                return own_events(parse_events(fh.read()), self.submission)
        except OSError:
            return []


def parse_events(text: str | None) -> list[dict[str, Any]]:
    """The events of a ``status.jsonl`` text, one JSON object a line; a line being written right now is skipped."""
    import json  # not at import: every job step reads this module, and only the supervisor and status read events

    events = []
    for line in (text or "").splitlines():
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):  # a line nested thousands deep is not the supervisor's
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def own_events(events: list[dict[str, Any]], submission: str) -> list[dict[str, Any]]:
    """The well-formed events of ``submission`` (an earlier job with the same id wrote the others; with no
    submission to tell them apart, every well-formed event)."""
    return [ev for ev in events if well_formed(ev) and (not submission or ev.get("submission") == submission)]


def well_formed(ev: dict[str, Any]) -> bool:
    """An event whose fields have the shapes the supervisor writes."""
    when, attempt, code, components = ev.get("time"), ev.get("attempt"), ev.get("exit_code"), ev.get("components")
    return (
        (when is None or (_a_number(when) and 0 <= when <= LATEST_TIME))
        and (attempt is None or (_a_number(attempt) and isinstance(attempt, int) and attempt >= 0))
        and (code is None or (_a_number(code) and isinstance(code, int)))
        and (components is None or _list_of(components, dict))
        and all(isinstance(c.get("name"), str) and _list_of(c.get("nodes"), str) for c in components or [])
        and (ev.get("records") is None or _list_of(ev.get("records"), dict))
        and (ev.get("lost_nodes") is None or _list_of(ev.get("lost_nodes"), str))
        and isinstance(ev.get("failed", {}), dict)
    )


def _a_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _list_of(value: object, kind: type) -> bool:
    return isinstance(value, list) and all(isinstance(x, kind) for x in value)
