"""Slurm hostlists: ``expand`` and ``compress`` with Slurm's own semantics.

- Items are separated by commas outside brackets; order and duplicates kept.
- ``[lo-hi,n,...]`` ranges take their zero-padding width from the low bound
  (``node[1-010]`` is node1..node10, ``n[009-011]`` is n009..n011).
- Several bracket groups expand as a cartesian product in Slurm's own order:
  the last group fastest, then the first, the second, ... (``rack[0-1]_blade[0-2]``
  is rack0_blade0, rack0_blade1, ...; ``a[0-1]b[0-1]c[0-1]`` is a0b0c0 a0b0c1
  a1b0c0 a1b0c1 a0b1c0 ..., as ``scontrol show hostnames`` prints it). Ranks
  follow this order. Text may follow a bracket (``n[1-2]-ib``).
- A bracket alone is a list of numeric names (``[1-3]`` is 1, 2, 3), as in Slurm; so are
  several (``[1-2][4-5]`` is 14, 15, 24, 25), and a name may then hold text between them
  (``[1-2]a[3-4]``); one bracket with only text after it (``[1-2]a``) is refused, as by Slurm.
- Like Slurm, one range holds at most 65536 names.

Stricter than Slurm where Slurm is lenient: empty items, whitespace, empty or
reversed ranges and unbalanced brackets raise :class:`HostlistError`.
This runs in every job step, so it imports nothing, not even ``re``.
"""

from __future__ import annotations

from ti_slurm.core.errors import HostlistError

MAX_RANGE = 65536
MAX_NAMES = 1 << 20
MAX_DIGITS = 18  # a host number longer than this is no host number (and int() of thousands of digits fails)

_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
_DIGITS = "0123456789"


def _plain(text: str) -> bool:
    """Only letters, digits, '.', '_' and '-' (the empty string too)."""
    return _NAME_CHARS.issuperset(text)


def is_number(text: str) -> bool:
    """One to MAX_DIGITS ASCII digits (``str.isdigit`` also takes other scripts' digits: ``"١"``)."""
    return 0 < len(text) <= MAX_DIGITS and text.isascii() and text.isdigit()


def expand(text: str) -> list[str]:
    """Expand a Slurm hostlist into names, in order, duplicates kept."""
    if not text:
        raise HostlistError(text, text, "empty hostlist")
    names: list[str] = []
    for item in _split_top(text):
        if not item:
            raise HostlistError(text, text, "empty item (two commas, or a comma at an end)")
        names.extend(_expand_item(text, item))
        if len(names) > MAX_NAMES:
            raise HostlistError(text, item, f"more than {MAX_NAMES} names")
    return names


def _split_top(text: str) -> list[str]:
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            if depth:
                raise HostlistError(text, text[start : i + 1], "nested '['")
            depth = 1
        elif ch == "]":
            if not depth:
                raise HostlistError(text, text[start : i + 1], "']' without '['")
            depth = 0
        elif ch == "," and not depth:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise HostlistError(text, text[start:], "unclosed '['")
    items.append(text[start:])
    return items


def _expand_item(text: str, item: str) -> list[str]:
    # Split "a[1-2]b[3]c" into literal and bracket parts.
    parts: list[list[str]] = []
    brackets: list[int] = []  # indexes of the bracket parts
    pos = 0
    while pos < len(item):
        lb = item.find("[", pos)
        literal = item[pos:] if lb < 0 else item[pos:lb]
        if not _plain(literal):
            raise HostlistError(text, item, "a host name may only hold letters, digits, '.', '_' and '-'")
        if literal:
            parts.append([literal])
        if lb < 0:
            break
        rb = item.index("]", lb)
        brackets.append(len(parts))
        parts.append(_expand_ranges(text, item, item[lb + 1 : rb]))
        pos = rb + 1
    if not parts:
        raise HostlistError(text, item, "empty item")
    if item.startswith("[") and len(brackets) == 1 and len(parts) > 1:
        raise HostlistError(text, item, "a bracket needs a name before it, or another bracket after it")
    if len(parts) == 1:
        return parts[0]
    size = 1
    for choices in parts:
        size *= len(choices)
        if size > MAX_NAMES:
            raise HostlistError(text, item, f"more than {MAX_NAMES} names")
    if len(brackets) <= 2:  # leftmost slowest: the plain cartesian product
        result = [""]
        for choices in parts:
            result = [head + tail for head in result for tail in choices]
        return result
    # Slurm's order: the last bracket group varies fastest, then the first, the second, ...
    order = [*brackets[-2::-1], brackets[-1]]  # slowest first
    picks: list[list[str]] = [[choices[0] for choices in parts]]
    for b in order:
        picks = [[*p[:b], value, *p[b + 1 :]] for p in picks for value in parts[b]]
    return ["".join(p) for p in picks]


def _expand_ranges(text: str, item: str, body: str) -> list[str]:
    out: list[str] = []
    for rng in body.split(","):
        lo_s, dash, hi_s = rng.partition("-")
        if not is_number(lo_s) or (dash and not is_number(hi_s)):
            raise HostlistError(text, f"[{body}]", f"range {rng!r} is not N or N-M")
        lo = int(lo_s)
        hi = int(hi_s) if dash else lo
        if hi < lo:
            raise HostlistError(text, f"[{body}]", f"range {rng!r} runs backwards")
        if hi - lo + 1 > MAX_RANGE:
            raise HostlistError(text, f"[{body}]", f"range {rng!r} holds more than {MAX_RANGE} names")
        width = len(lo_s)
        out.extend(str(n).zfill(width) for n in range(lo, hi + 1))
    return out


def compress(names: list[str]) -> str:
    """Compress names into a hostlist that expands back to the same list.

    Order is kept: only neighbours merge (``n3,n1,n2`` -> ``n[3,1-2]``), as
    ``scontrol show hostlist`` does.
    """
    # runs: (prefix, [(lo, hi, width), ...]) or (name, None) for names without digits
    groups: list[tuple[str, list[list[int]] | None]] = []
    for name in names:
        if not name or not _plain(name):
            raise HostlistError(",".join(names)[:80], name, "not a plain host name")
        prefix = name.rstrip(_DIGITS)
        if len(prefix) == len(name) or len(name) - len(prefix) > MAX_DIGITS:
            groups.append((name, None))
            continue
        digits = name[len(prefix) :]
        num = int(digits)
        last = groups[-1] if groups else None
        if last is not None and last[0] == prefix and last[1] is not None:
            _, hi, width = last[1][-1]
            if num == hi + 1 and digits == str(num).zfill(width):
                last[1][-1][1] = num
            else:
                last[1].append([num, num, len(digits)])
        else:
            groups.append((prefix, [[num, num, len(digits)]]))
    out = []
    for prefix, ranges in groups:
        if ranges is None:
            out.append(prefix)
            continue
        if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
            out.append(prefix + str(ranges[0][0]).zfill(ranges[0][2]))
            continue
        body = ",".join(
            str(lo).zfill(w) if lo == hi else f"{str(lo).zfill(w)}-{str(hi).zfill(w)}" for lo, hi, w in ranges
        )
        out.append(f"{prefix}[{body}]")
    return ",".join(out)
