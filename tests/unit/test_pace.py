"""Stragglers from the nodes' progress files: a node 30% slower than the others over the window is named once;
nothing is said before a node has been seen for the whole window, nor of a node that stopped (the hang's)."""

from __future__ import annotations

import os
from pathlib import Path

from ti_slurm.job.supervisor.pace import StepPace


def write_step(path: Path, step: int, at: float) -> None:
    path.write_text(f"{step}\n")
    os.utime(path, (at, at))


def run(tmp_path: Path, seconds: dict[str, float], until: float, window: float = 60.0) -> list[dict[str, object]]:
    """Nodes stepping every ``seconds[node]`` from t=0 (their files written as they step), looked at every 5 s."""
    files = {node: tmp_path / f"{node}.progress" for node in seconds}
    pace = StepPace({node: str(path) for node, path in files.items()}, window, since=0.0)
    found, now = [], 0.0
    while now <= until:
        for node, every in seconds.items():
            steps = int(now / every)
            if steps:
                write_step(files[node], steps, steps * every)
        found += pace.look(now)
        now += 5.0
    return found


def test_a_node_40_percent_slower_than_the_other_is_named_once_after_the_window(tmp_path: Path) -> None:
    found = run(tmp_path, {"n0": 1.0, "n1": 1.4}, until=200)
    assert found == [{"node": "n1", "seconds_a_step": 1.4, "others": 1.0, "window": 60.0}]


def test_nothing_is_said_before_the_window_nor_of_nodes_within_30_percent(tmp_path: Path) -> None:
    assert run(tmp_path, {"n0": 1.0, "n1": 1.4}, until=55) == []
    assert run(tmp_path / "", {"a": 1.0, "b": 1.2, "c": 1.1, "d": 1.0}, until=300) == []


def test_one_slow_node_among_many_against_the_median_of_the_others(tmp_path: Path) -> None:
    paces = {f"n{i}": 1.0 for i in range(7)} | {"n7": 1.5}
    found = run(tmp_path, paces, until=120)
    assert [f["node"] for f in found] == ["n7"]


def test_a_node_that_stopped_stepping_is_no_straggler(tmp_path: Path) -> None:
    files = {node: tmp_path / f"{node}.progress" for node in ("n0", "n1")}
    pace = StepPace({node: str(path) for node, path in files.items()}, 30.0, since=0.0)
    found = []
    for now in range(0, 120, 5):
        write_step(files["n0"], now + 1, now)
        write_step(files["n1"], min(now, 20) + 1, min(now, 20))  # stopped at t=20
        found += pace.look(float(now))
    assert found == []
