"""Errors that carry the offending part of the input.

Every error a user can cause is a :class:`TiSlurmError` whose message is one
line; the CLI prints it as ``ti-slurm: error: <message>`` and exits with its
``exit_code``. Anything else is a bug. The hierarchy::

    TiSlurmError
      InputError        a value given to ti-slurm is wrong (field: value: why); exit 2
        SpecError         ... in the job spec
        ConfigError       ... anywhere else: the site or user config, a flag, an argument, the SSH target
      UnknownJobError   no job with this id is queued or recorded for this user; exit 2
      ContractError     a job step's environment is not a job ti-slurm can serve; exit 2
      HostlistError     a malformed Slurm hostlist; exit 2
      SubmissionError   the scheduler refused the job, or it could not be submitted; exit 1
      BackendError      talking to the scheduler or the login node failed; exit 1

Standard library only: the job path raises some of these.
"""

from __future__ import annotations


class TiSlurmError(Exception):
    """A user-facing error: one line, names what is wrong."""

    exit_code = 2


class InputError(TiSlurmError):
    """A value is invalid: ``field`` is where it was given (a dotted path such as
    ``worker_groups.5``, or a flag), ``value`` the offending value (shortened),
    ``why`` the rule it breaks."""

    def __init__(self, field: str, value: object, why: str) -> None:
        self.field, self.value, self.why = field, value, why
        shown = repr(value)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        if value is MISSING:
            super().__init__(f"{field}: {why}")
        else:
            super().__init__(f"{field}: {shown}: {why}" if field else f"{shown}: {why}")


MISSING = type("Missing", (), {"__repr__": lambda self: "<missing>"})()  # the value of a field not given


class SpecError(InputError):
    """The job spec is invalid: only for the spec's own fields."""


class ConfigError(InputError):
    """A value outside the spec is invalid: the site or user config, a flag, an API argument, the SSH target."""


class ContractError(TiSlurmError):
    """A job step's environment does not describe a job ti-slurm can serve."""


class ContainerError(TiSlurmError):
    """A node cannot run its training image (one line, naming the cause)."""


class ModeError(TiSlurmError, ValueError):
    """No mode has that name, or a mode's module does not define its mode."""


class PlatformError(TiSlurmError, ValueError):
    """No platform has that name, or a platform's module does not define its platform."""


class AgentError(TiSlurmError):
    """The launch agent (``ssh`` for mpirun) was called with a command line it cannot serve."""

    exit_code = 255  # what ssh exits with for its own errors


class HostlistError(TiSlurmError, ValueError):
    """A Slurm hostlist string is malformed."""

    def __init__(self, text: str, part: str, why: str) -> None:
        self.text, self.part = text, part
        super().__init__(f"bad hostlist {text!r}: {why} in {part!r}")


class SubmissionError(TiSlurmError):
    """The job was not submitted: the scheduler refused it (sbatch's reason), or submitting failed."""

    exit_code = 1


class BackendError(TiSlurmError):
    """A backend command (squeue, scancel, ssh, ...) failed, or its host could not be reached."""

    exit_code = 1


class UnknownJobError(TiSlurmError):
    """No job with this id is queued or recorded for this user (or it is not theirs)."""
