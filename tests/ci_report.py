"""What CI prints at the end of a test run (``pytest -p tests.ci_report``): the tests of each tier by outcome,
and how long each pytest-xdist worker waited at the end for the slowest one (time the run could not use)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import PurePosixPath

import pytest

_outcomes: Counter[tuple[str, str]] = Counter()  # (tier, outcome) -> tests
_last_report: dict[str, float] = {}  # worker -> when its last test ended


def _tier(nodeid: str) -> str:
    parts = PurePosixPath(nodeid.split("::", 1)[0]).parts
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else "other"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    gateway = getattr(getattr(report, "node", None), "gateway", None)
    _last_report[gateway.id if gateway else "main"] = time.monotonic()
    tier = _tier(report.nodeid)
    if report.when == "call":
        _outcomes[tier, "xfailed" if hasattr(report, "wasxfail") else report.outcome] += 1
    elif report.when == "setup" and not report.passed:
        _outcomes[tier, "skipped" if report.skipped else "error"] += 1
    elif report.when == "teardown" and report.failed:
        _outcomes[tier, "error"] += 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _outcomes:
        return
    write = terminalreporter.write_line
    tiers = sorted({tier for tier, _ in _outcomes})
    counts = "; ".join(
        f"{tier} " + ", ".join(f"{n} {outcome}" for (t, outcome), n in sorted(_outcomes.items()) if t == tier)
        for tier in tiers
    )
    write(f"tests by tier: {counts}")
    if len(_last_report) > 1:
        last = max(_last_report.values())
        waits = ", ".join(f"{w} {last - t:.0f} s" for w, t in sorted(_last_report.items()))
        write(f"waiting at the end for the slowest worker: {waits}")
