"""JSON for the job path, without importing ``json``.

``import json`` pulls in ``re`` and ``enum``: about 10 ms that every node of
every step would pay. The job path reads the plan and writes its node record,
plain JSON both, so it uses the C accelerator underneath ``json`` directly:
its scanner to read and its string encoder to write. Where that accelerator is
missing (not CPython) this falls back to ``json``.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

try:
    import _json
except ImportError:  # pragma: no cover - every CPython has it
    _json = None  # type: ignore[assignment]


class _ScannerOptions:
    """The attributes ``json.JSONDecoder`` hands its C scanner: standard JSON, nothing hooked."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int

    @staticmethod
    def parse_constant(name: str) -> float:
        raise ValueError(f"{name} is not JSON")


_scan: Callable[[str, int], tuple[Any, int]] | None = (
    _json.make_scanner(_ScannerOptions()) if _json else None  # type: ignore[arg-type]  # duck-typed options
)


def loads(text: str) -> Any:
    """Parse one JSON document (like ``json.loads``; errors are ``ValueError``)."""
    if _scan is None:  # pragma: no cover
        import json

        return json.loads(text)
    stripped = text.strip()
    try:
        value, end = _scan(stripped, 0)
    except (StopIteration, SystemError):
        # Invalid JSON. The scanner builds its error from json.decoder, and only if that is
        # already imported; let json itself say what is wrong (nothing is fast on this path).
        import json

        return json.loads(text, parse_constant=_ScannerOptions.parse_constant)
    if end != len(stripped):
        raise ValueError(f"extra data after JSON at character {end}: {stripped[end : end + 40]!r}")
    return value


def dumps(value: object) -> str:
    """Compact, ASCII-only JSON for dicts, lists, tuples, strings, numbers, booleans and None."""
    if _json is None:  # pragma: no cover
        import json

        return json.dumps(value, separators=(",", ":"))
    return _encode(value, _json.encode_basestring_ascii)


def _encode(value: object, string: Callable[[str], str]) -> str:
    if isinstance(value, str):
        return string(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{value!r} is not JSON")
        return float.__repr__(value)
    if isinstance(value, dict):
        items = []
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"JSON object keys must be strings, not {key!r}")
            items.append(f"{string(key)}:{_encode(item, string)}")
        return "{" + ",".join(items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_encode(item, string) for item in value) + "]"
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
