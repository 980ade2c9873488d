"""Spec files as their authors meant them: YAML read with YAML 1.2's core schema, text kept as written.

PyYAML follows YAML 1.1, where ``on``, ``off``, ``yes`` and ``no`` are booleans, ``1:30`` is the
number 5400 and ``1.10`` is the number 1.1; a user who copies ``restart: {on: [preempt]}`` or
``rdma: off`` from the docs, or writes ``env: {OMP_NUM_THREADS: 4}``, means the words and the
digits. So a YAML spec is read in two steps:

1. composed (not constructed) into YAML nodes, with YAML 1.2's core-schema rules for plain
   scalars (only ``true``/``false``, ``null``/``~``, decimal, ``0o``/``0x`` integers and floats are
   not text); aliases and duplicate keys are refused (an alias bomb would take minutes and
   gigabytes; a repeated key would silently lose one of its values);
2. turned into Python values with the spec's own models in hand: where a field holds text
   (``name``, ``time``, ``mem``, ``env`` values, ``partition``, ...), a scalar is taken as the
   text written (``OMP_NUM_THREADS: 4`` is ``"4"``, ``VER: 1.10`` is ``"1.10"``); elsewhere as the
   value the core schema gives. A list or mapping where text belongs is one line that shows how
   to quote it.

JSON specs are read by ``json``: a JSON author writes ``"4"`` or ``4`` on purpose.
"""

from __future__ import annotations

import json
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel

from ti_slurm.core.errors import SpecError

# YAML 1.2 core schema (https://yaml.org/spec/1.2.2/#1032-tag-resolution), for plain scalars
_CORE_SCHEMA: tuple[tuple[str, str, str], ...] = (
    ("tag:yaml.org,2002:null", r"~|null|Null|NULL|", "~nN"),
    ("tag:yaml.org,2002:bool", r"true|True|TRUE|false|False|FALSE", "tTfF"),
    ("tag:yaml.org,2002:int", r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+", "-+0123456789"),
    (
        "tag:yaml.org,2002:float",
        r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?|[-+]?\.(inf|Inf|INF)|\.nan|\.NaN|\.NAN",
        "-+0123456789.",
    ),
)
_STR = "tag:yaml.org,2002:str"


class _Loader(yaml.SafeLoader):
    """PyYAML's safe parser and composer with YAML 1.2's core-schema resolution and no aliases."""

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise _at(event.start_mark, f"aliases (*{event.anchor}) are not taken in a spec; write the value out")
        return super().compose_node(parent, index)


_Loader.yaml_implicit_resolvers = {}  # only YAML 1.2's, added below


for _tag, _pattern, _first in _CORE_SCHEMA:
    _Loader.add_implicit_resolver(_tag, re.compile(rf"^(?:{_pattern})$"), list(_first))


def _core_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    text = str(node.value)
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    return int(text)  # 010 is ten: YAML 1.2 has no implicit octal


def _core_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float:
    text = str(node.value).lower()
    return float(text.replace(".inf", "inf").replace(".nan", "nan"))


_Loader.add_constructor("tag:yaml.org,2002:int", _core_int)
_Loader.add_constructor("tag:yaml.org,2002:float", _core_float)
# the empty plain scalar (`key:` with nothing after it) is null too: a resolver for any first character
# (PyYAML files it under None), matching only the empty text
_Loader.add_implicit_resolver("tag:yaml.org,2002:null", re.compile(r"^$"), None)


def _at(mark: yaml.Mark | None, why: str) -> yaml.YAMLError:
    where = f"line {mark.line + 1}: " if mark is not None else ""
    return yaml.YAMLError(where + why)


MAX_FILE_BYTES = 16 << 20  # a spec or points file above this is not one a person wrote


def read_text_file(path: Path, field: str) -> str:
    """The text of a spec or points file; one line (a :class:`SpecError` naming ``field``) for anything else:
    a FIFO or device (``/dev/zero`` would be read forever), a file too big to be a spec, one not UTF-8."""
    from ti_slurm.core.files import open_regular

    try:
        with open_regular(str(path)) as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        why = "is not a regular file (a FIFO or a device)" if not exc.strerror else f"cannot read: {exc.strerror}"
        raise SpecError(field, str(path), why) from None
    if len(data) > MAX_FILE_BYTES:
        raise SpecError(field, str(path), f"is over {MAX_FILE_BYTES >> 20} MiB: not a spec a person wrote")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(field, str(path), "not UTF-8 text") from None


def read_document(text: str, path: Path, model: Any) -> object:
    """The document in ``text`` (JSON for ``.json`` files, else YAML) as ``model`` expects its values (a model
    class, or a type such as ``list[dict[str, str]]``)."""
    if path.suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecError("spec", str(path), f"invalid JSON at line {exc.lineno}: {exc.msg}") from None
        except RecursionError:
            raise SpecError("spec", str(path), "nested too deeply") from None
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        return None if node is None else _Reader(text, loader).value(node, model, "")
    except RecursionError:
        raise SpecError("spec", str(path), "nested too deeply") from None
    except yaml.MarkedYAMLError as exc:
        raise SpecError("spec", str(path), _yaml_problem(exc)) from None
    except yaml.YAMLError as exc:
        raise SpecError("spec", str(path), f"invalid YAML at {exc}") from None
    finally:
        loader.dispose()


LINE_KEY = re.compile(r"(\s*[A-Za-z_][\w-]*):(\s|$)")  # a line that starts with a key (``  max: 3``)


def _yaml_problem(exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    where = f" at line {mark.line + 1}" if mark is not None else ""
    problem = exc.problem or exc.context or "syntax error"
    line = _line(mark)
    indentation = "expected <block end>" in problem or "did not find expected key" in str(exc.context or problem)
    key = LINE_KEY.match(line)
    if "mapping values are not allowed" in problem and key and mark is not None and mark.column == len(key[1]):
        indentation = True  # the line's own key is refused: indented under a key that has a value
    if indentation:
        hint = (f" ({line.strip()!r} is indented differently from the keys beside it: keys of one level line up,"
                " a nested one sits under its parent, e.g. 'restart:' then '  max: 3' and '  on: [failure]')")
        return f"invalid YAML{where}: {problem}{hint}"
    # nearly every other syntax error in a spec is a value that YAML takes for structure
    hint = " (a value holding ': ' or ' #', or starting with a quote, [ or {, needs quotes: command: 'echo a: b')"
    return f"invalid YAML{where}: {problem}{hint}"


def _line(mark: yaml.Mark | None) -> str:
    """The spec's line at ``mark`` (its text, when the YAML was read from text)."""
    buffer = getattr(mark, "buffer", None)
    if mark is None or not isinstance(buffer, str):
        return ""
    lines = buffer.split("\n")
    return lines[mark.line][:120] if mark.line < len(lines) else ""


# what a field holds, as far as reading YAML goes
_TEXT, _VALUE = "text", "value"


def _shape(annotation: Any) -> Any:
    """``_TEXT``, ``_VALUE``, a model class, or ``("list", item)`` / ``("dict", value)`` for ``annotation``."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(options) == 1:
            return _shape(options[0])
        models = [a for a in options if isinstance(a, type) and issubclass(a, BaseModel)]
        return ("union", models[0]) if models else _VALUE
    if annotation is str or (origin is Literal and all(isinstance(a, str) for a in typing.get_args(annotation))):
        return _TEXT
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if origin is list:
        return ("list", typing.get_args(annotation)[0])
    if origin is dict:
        return ("dict", typing.get_args(annotation)[1])
    return _VALUE


class _Reader:
    """Turns composed YAML nodes into Python values, field by field."""

    def __init__(self, text: str, loader: _Loader) -> None:
        self.text, self.loader = text, loader

    def value(self, node: yaml.Node, annotation: Any, where: str) -> object:
        shape = _shape(annotation)
        if isinstance(shape, tuple) and shape[0] == "union":
            shape = shape[1] if isinstance(node, yaml.MappingNode) else _VALUE
        if isinstance(shape, type) and issubclass(shape, BaseModel) and isinstance(node, yaml.MappingNode):
            fields = shape.model_fields
            return self.mapping(node, where, lambda key: fields[key].annotation if key in fields else Any)
        if isinstance(shape, tuple) and shape[0] == "dict" and isinstance(node, yaml.MappingNode):
            return self.mapping(node, where, lambda key: shape[1])
        if isinstance(shape, tuple) and shape[0] == "list" and isinstance(node, yaml.SequenceNode):
            return [self.value(item, shape[1], f"{where}.{i}") for i, item in enumerate(node.value)]
        if shape == _TEXT:
            return self.text_of(node, where, optional=_allows_none(annotation))
        if isinstance(node, yaml.ScalarNode) and node.tag == _STR:
            return node.value
        return self.loader.construct_object(node, deep=True)

    def mapping(self, node: yaml.MappingNode, where: str, annotation_of: Any) -> dict[str, object]:
        out: dict[str, object] = {}
        lines: dict[str, int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise SpecError(where or "spec", self.source(key_node), "a key is a plain name, not a list or mapping")
            key = key_node.value
            field = f"{where}.{key}" if where else key
            if key in out:
                line = key_node.start_mark.line + 1
                raise SpecError(
                    field, self.source(value_node), f"given twice (lines {lines[key]} and {line}); keep one"
                )
            lines[key] = key_node.start_mark.line + 1
            out[key] = self.value(value_node, annotation_of(key), field)
        return out

    def text_of(self, node: yaml.Node, where: str, optional: bool) -> str | None:
        """A scalar as the text written; ``None`` for an empty or null one where the field allows none."""
        key = where.rpartition(".")[2]
        if isinstance(node, yaml.ScalarNode):
            if node.tag != "tag:yaml.org,2002:null":
                return str(node.value)
            if optional:
                return None
            raise SpecError(where, None, f"has no value; for empty text write {key}: ''")
        kind = "a list" if isinstance(node, yaml.SequenceNode) else "a mapping"
        written = self.source(node)
        raise SpecError(
            where,
            written,
            f"expected text, but YAML reads {kind} here; to keep it as written, quote it: {key}: {_quoted(written)}",
        )

    def source(self, node: yaml.Node) -> str:
        return self.text[node.start_mark.index : node.end_mark.index].strip()


def _allows_none(annotation: Any) -> bool:
    return type(None) in typing.get_args(annotation)


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
