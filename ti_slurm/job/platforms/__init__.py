"""Platforms: each a :class:`~ti_slurm.job.platforms.base.Platform` in one module of this package.

Adding a platform is adding one module here whose ``PLATFORM`` is an instance of a ``Platform``
subclass: :func:`platform_names` finds it by its file (the spec's ``platform:`` takes its name),
:func:`get_platform` imports only the one a job uses. Standard library only: this runs in every
job step.
"""

from __future__ import annotations

from ti_slurm.core.errors import PlatformError
from ti_slurm.core.plugins import FileRegistry
from ti_slurm.job.platforms.base import Platform

__all__ = ["Platform", "get_platform", "platform_names"]


def platform_names() -> tuple[str, ...]:
    """Every platform's name, from this package's modules but ``base.py``."""
    return PLATFORMS.names()


def get_platform(name: str) -> Platform:
    """The platform called ``name``; imports its module only (a :class:`~ti_slurm.core.errors.PlatformError` for an
    unknown name)."""
    platform: Platform = PLATFORMS.get(name)
    return platform


PLATFORMS = FileRegistry(__name__, __file__, "PLATFORM", Platform, PlatformError, "platform")
