"""lightjson: the job path's JSON agrees with the json module both ways."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ti_slurm.core import lightjson

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
documents = st.recursive(scalars, lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=30)


@given(documents)
def test_reads_what_json_writes(value: object) -> None:
    assert lightjson.loads(json.dumps(value)) == value
    assert lightjson.loads(json.dumps(value, indent=2, ensure_ascii=False)) == value


@given(documents)
def test_json_reads_what_it_writes(value: object) -> None:
    text = lightjson.dumps(value)
    assert text.isascii() and "\n" not in text
    assert json.loads(text) == value


@pytest.mark.parametrize("text", ["", "{", '{"a": 1} x', "[1,]", "NaN", "'a'"])
def test_bad_json_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        lightjson.loads(text)


@pytest.mark.parametrize("value", [float("nan"), {1: 2}, {"a": object()}])
def test_what_json_cannot_hold_is_refused(value: object) -> None:
    with pytest.raises((TypeError, ValueError)):
        lightjson.dumps(value)


def test_bad_json_is_a_value_error_where_json_was_never_imported() -> None:
    """On the job path json is not loaded, and the C scanner cannot build its error without it."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(lightjson.__file__).resolve().parents[2]
    probe = (
        f"import sys; sys.path.insert(0, {str(root)!r}); from ti_slurm.core import lightjson\n"
        "for text in ('{not json', '', '[1,]', 'NaN', '[1] x'):\n"
        "    try:\n"
        "        lightjson.loads(text)\n"
        "    except ValueError as exc:\n"
        "        print(type(exc).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-I", "-S", "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["JSONDecodeError", "JSONDecodeError", "JSONDecodeError", "ValueError", "ValueError"]
