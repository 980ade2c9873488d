"""Frozen record classes for the job path, without ``dataclasses``.

``import dataclasses`` pulls in ``inspect``, ``ast`` and ``re``: 10 to 20 ms
that every node of every step would pay. :class:`Record` keeps what the plan
and the contract use of frozen dataclasses: fields from the class annotations,
defaults from the class body (a ``{}`` or ``[]`` default is copied per
instance), positional or keyword construction, equality, ``repr``,
:meth:`Record.as_dict` and :meth:`Record.replace`. Type checkers see a frozen
dataclass (``dataclass_transform``).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from typing import Any, ClassVar, Self, dataclass_transform
else:

    def dataclass_transform(**_: object) -> object:
        return lambda cls: cls


@dataclass_transform(frozen_default=True)
class Record:
    """Base of the frozen records; subclasses declare annotated fields, defaults last."""

    _fields: ClassVar[tuple[str, ...]] = ()
    _defaults: ClassVar[dict[str, object]] = {}

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        fields = list(cls._fields)
        defaults = dict(cls._defaults)
        for name, annotation in cls.__annotations__.items():  # this class's own (Python >= 3.10)
            if name.startswith("_") or str(annotation).startswith("ClassVar"):
                continue
            if name not in fields:
                fields.append(name)
            if name in cls.__dict__:
                defaults[name] = cls.__dict__[name]
            elif defaults and name not in defaults:
                raise TypeError(f"{cls.__name__}.{name}: a field without a default follows one with a default")
        cls._fields, cls._defaults = tuple(fields), defaults

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        name = type(self).__name__
        if len(args) > len(self._fields):
            raise TypeError(f"{name}() takes {len(self._fields)} arguments, {len(args)} given")
        values = dict(zip(self._fields, args, strict=False))
        for key, value in kwargs.items():
            if key not in self._fields:
                raise TypeError(f"{name}() has no field {key!r}")
            if key in values:
                raise TypeError(f"{name}() got {key!r} twice")
            values[key] = value
        for field in self._fields:
            if field in values:
                value = values[field]
            elif field in self._defaults:
                value = self._defaults[field]
                if isinstance(value, dict | list):
                    value = value.copy()
            else:
                raise TypeError(f"{name}() is missing {field!r}")
            object.__setattr__(self, field, value)

    def __setattr__(self, key: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: use .replace({key}=...)")

    def __delattr__(self, key: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, field) for field in self._fields)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        inner = ", ".join(f"{field}={getattr(self, field)!r}" for field in self._fields)
        return f"{type(self).__name__}({inner})"

    def as_dict(self) -> dict[str, Any]:
        """The fields as a dict, nested records (also inside tuples and lists) as dicts too."""
        return {field: _plain(getattr(self, field)) for field in self._fields}

    def replace(self, **changes: Any) -> Self:
        """A copy with some fields changed."""
        return type(self)(**{field: getattr(self, field) for field in self._fields} | changes)


def _plain(value: object) -> object:
    if isinstance(value, Record):
        return value.as_dict()
    if isinstance(value, tuple | list):
        return type(value)(_plain(v) for v in value)
    return value
