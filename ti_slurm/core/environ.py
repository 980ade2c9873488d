"""The size limit of one environment string, which Linux checks at exec (E2BIG)."""

from __future__ import annotations

MAX_ENV_STRING = 32 * 4096  # Linux's MAX_ARG_STRLEN: one "NAME=value" string, NUL included


def env_string_size(name: str, value: str) -> int:
    """Bytes one variable takes in a process's environment (what MAX_ARG_STRLEN limits)."""
    # isascii() is O(1) in CPython, and then characters are bytes: no 100 KB encode per variable
    size = len(value) if value.isascii() else len(value.encode())
    return len(name.encode()) + 1 + size + 1
