"""Record: the frozen dataclass the job path uses instead of importing dataclasses."""

from __future__ import annotations

import pytest

from ti_slurm.core.plan import Component, JobPlan
from ti_slurm.core.record import Record


class Point(Record):
    x: int
    y: int = 0
    tags: dict[str, str] = {}  # noqa: RUF012 - copied per instance, as default_factory=dict would


def test_positional_keyword_and_defaults() -> None:
    assert Point(1) == Point(x=1, y=0) == Point(1, 0, {})
    assert Point(1, y=2).y == 2
    assert repr(Point(1, 2)) == "Point(x=1, y=2, tags={})"


def test_mutable_defaults_are_not_shared() -> None:
    a, b = Point(1), Point(2)
    a.tags["k"] = "v"
    assert b.tags == {}


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((), {}, "Point() is missing 'x'"),
        ((1, 2, {}, 4), {}, "Point() takes 3 arguments, 4 given"),
        ((1,), {"x": 2}, "Point() got 'x' twice"),
        ((1,), {"z": 2}, "Point() has no field 'z'"),
    ],
)
def test_bad_construction_names_the_field(args: tuple[object, ...], kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(TypeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Point(*args, **kwargs)


def test_frozen_and_replace() -> None:
    p = Point(1)
    with pytest.raises(AttributeError, match="frozen"):
        p.x = 2  # type: ignore[misc]
    q = p.replace(y=5)
    assert (p.y, q.y, q.x) == (0, 5, 1)
    assert hash(Component("a", 1, 2, 3)) == hash(Component("a", 1, 2, 3))
    with pytest.raises(TypeError, match="unhashable"):
        hash(Point(1))  # a dict field makes it unhashable, as with dataclasses


def test_equality_is_per_class() -> None:
    class Other(Record):
        x: int
        y: int = 0
        tags: dict[str, str] = {}  # noqa: RUF012

    assert Point(1) != Other(1)
    assert Point(1) != Point(2)


def test_a_field_without_default_after_one_with_is_refused() -> None:
    with pytest.raises(TypeError, match=r"Bad\.b: a field without a default follows one with a default"):

        class Bad(Record):
            a: int = 0
            b: int


def test_plan_round_trips_through_json_with_nested_components() -> None:
    plan = JobPlan(
        name="n",
        mode="ps-worker",
        command="python a.py",
        components=(Component("ps", 1, 0, 1), Component("worker", 3, 8, 4, mem="8G")),
        env={"A": "1"},
        rdma_partitions=("rdma",),
        nccl_overrides={"*": {"NCCL_DEBUG": "WARN"}},
    )
    back = JobPlan.from_json(plan.to_json())
    assert back == plan
    assert back.components[1].slots == 8
    assert plan.as_dict()["components"][1]["mem"] == "8G"


def test_a_status_line_nested_thousands_deep_is_skipped_not_a_crash() -> None:
    from ti_slurm.core.events import parse_events

    deep = '{"a": ' * 100_000 + "1" + "}" * 100_000
    assert parse_events(f'{deep}\n{{"event": "start", "time": 1}}\n') == [{"event": "start", "time": 1}]
