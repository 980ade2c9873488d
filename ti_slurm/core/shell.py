"""Shell quoting without importing ``shlex`` (and ``re``) on the job path."""

from __future__ import annotations

_SHELL_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789@%+=:,./-_")


def shell_quote(value: str) -> str:
    """``value`` as one shell word, as ``shlex.quote`` writes it."""
    if value and _SHELL_SAFE.issuperset(value):
        return value
    return "'" + value.replace("'", "'\"'\"'") + "'"
