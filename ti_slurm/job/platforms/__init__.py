"""Platforms: each a :class:`~ti_slurm.job.platforms.base.Platform` in one module of this package.

Adding a platform is adding one module here whose ``PLATFORM`` is an instance of a ``Platform``
subclass: :func:`platform_names` finds it by its file (the spec's ``platform:`` takes its name),
:func:`get_platform` imports only the one a job uses. Standard library only: this runs in every
job step.
"""

from __future__ import annotations

from ti_slurm.job.platforms.base import Platform

__all__ = ["Platform", "get_platform", "platform_names"]


def platform_names() -> tuple[str, ...]:
    """Every platform's name, from this package's modules but ``base.py``."""
    import os

    folder = os.path.dirname(os.path.abspath(__file__))
    return tuple(
        sorted(
            name[:-3]
            for name in os.listdir(folder)
            if name.endswith(".py") and not name.startswith("_") and name != "base.py"
        )
    )


_LOADED: dict[str, Platform] = {}


def get_platform(name: str) -> Platform:
    """The platform called ``name``; imports its module only (a :class:`~ti_slurm.errors.PlatformError` for an
    unknown name)."""
    platform = _LOADED.get(name)
    if platform is None:
        from ti_slurm.errors import PlatformError

        if name not in platform_names():
            raise PlatformError(f"unknown platform {name!r}; expected one of: {', '.join(platform_names())}")
        import importlib

        platform = importlib.import_module(f"ti_slurm.job.platforms.{name}").PLATFORM
        if not isinstance(platform, Platform) or platform.name != name:
            raise PlatformError(f"ti_slurm/job/platforms/{name}.py: PLATFORM must be the Platform named {name!r}")
        _LOADED[name] = platform
    return platform
