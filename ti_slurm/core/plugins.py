"""Choices that are files: a mode, a platform is each one module of its package, found by its file name
(``ps_worker.py`` is ``ps-worker``) and imported only when a job uses it."""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from typing import Any


class FileRegistry:
    """The choices of package ``package`` (whose ``__init__.py`` is ``init_file``): each of its modules but
    ``_*.py`` and ``base.py`` defines ``attr``, an instance of ``kind`` named as the file; a wrong name is
    an ``error`` naming ``what`` it is."""

    def __init__(self, package: str, init_file: str, attr: str, kind: type, error: type[Exception], what: str):
        self.package, self.folder = package, os.path.dirname(os.path.abspath(init_file))
        self.attr, self.kind, self.error, self.what = attr, kind, error, what
        self.loaded: dict[str, Any] = {}

    def names(self) -> tuple[str, ...]:
        files = os.listdir(self.folder)
        found = (f[:-3] for f in files if f.endswith(".py") and not f.startswith("_") and f != "base.py")
        return tuple(sorted(name.replace("_", "-") for name in found))

    def get(self, name: str) -> Any:
        """The choice called ``name``; imports its module only."""
        choice = self.loaded.get(name)
        if choice is None:
            if name not in self.names():
                raise self.error(f"unknown {self.what} {name!r}; expected one of: {', '.join(self.names())}")
            import importlib

            module = name.replace("-", "_")
            choice = getattr(importlib.import_module(f"{self.package}.{module}"), self.attr, None)
            if not isinstance(choice, self.kind) or getattr(choice, "name", None) != name:
                where = f"{self.package.replace('.', '/')}/{module}.py"
                raise self.error(f"{where}: {self.attr} must be the {self.kind.__name__} named {name!r}")
            self.loaded[name] = choice
        return choice
