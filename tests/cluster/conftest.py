"""The cluster tier may run in several pytest-xdist workers at once (``python3 -m pytest -n 3``).

Most tests only submit jobs and wait: they share the cluster, and Slurm queues whatever does not fit.
A test that changes what other jobs would meet (a fault on a node, a node killed or drained, the
site config, a preemption of every lowprio node, a frozen filesystem) or that times how long its own
job took, is marked ``whole_cluster`` and runs alone: it takes the cluster's lock exclusively, the
others take it shared.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator

import pytest

LOCK = os.path.join(tempfile.gettempdir(), "ti-slurm-cluster-tests.lock")


@pytest.fixture(autouse=True)
def cluster_turn(request: pytest.FixtureRequest) -> Iterator[None]:
    """Hold the cluster's lock for the test: shared, or exclusive for a ``whole_cluster`` test."""
    alone = request.node.get_closest_marker("whole_cluster") is not None
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)
