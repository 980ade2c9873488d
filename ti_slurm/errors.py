"""Errors that carry the offending part of the input.

Every error a user can cause is a :class:`TiSlurmError`; the CLI prints its
message on one line and exits 2. Anything else is a bug.
"""

from __future__ import annotations


class TiSlurmError(Exception):
    """A user-facing error: one line, names what is wrong."""

    exit_code = 2


class SpecError(TiSlurmError):
    """A job spec, flag or site config value is invalid.

    ``field`` is the dotted path of the value (``worker_groups.5``), ``value``
    the offending value (shortened), ``why`` the rule it breaks.
    """

    def __init__(self, field: str, value: object, why: str) -> None:
        self.field, self.value, self.why = field, value, why
        shown = repr(value)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        super().__init__(f"{field}: {shown}: {why}" if field else f"{shown}: {why}")


class HostlistError(TiSlurmError, ValueError):
    """A Slurm hostlist or tasks-per-node string is malformed."""

    def __init__(self, text: str, part: str, why: str) -> None:
        self.text, self.part = text, part
        super().__init__(f"bad hostlist {text!r}: {why} in {part!r}")


class BackendError(TiSlurmError):
    """A backend command (sbatch, squeue, ssh, ...) failed."""

    exit_code = 1
