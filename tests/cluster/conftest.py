"""The cluster tier may run in several pytest-xdist workers at once (``python3 -m pytest -n 3``).

Most tests only submit jobs and wait: they share the cluster, and Slurm queues whatever does not fit.
A test that preempts or kills nodes, puts a fault on one (a wrong /etc/hosts, a held port, a missing
runtime) or times how long its own job took needs only nodes no other job uses: it asks for an
``island`` (ci/slurm-cluster/up's groups of nodes with partitions of their own) and runs beside the
others, one test per island at a time.

A test that changes what every job would meet (the site config the hooks read, a drained node, a
frozen shared filesystem) is marked ``whole_cluster`` and runs alone: it takes the cluster's lock
exclusively, the others take it shared.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.sshd import LOGIN_PATH, Sshd, start_sshd


def lock_file(name: str, slurm_conf: str | None = None) -> str:
    """A lock of the test cluster this process talks to (or of the one ``slurm_conf`` names): two may be up at
    once, each with tests of its own (``SLURM_CONF`` tells them apart: ci/slurm-cluster/env)."""
    conf = slurm_conf or os.environ.get("SLURM_CONF", "default")
    cluster = re.sub(r"\W+", "_", conf).strip("_")
    return os.path.join(tempfile.gettempdir(), f"ti-slurm-{cluster}-{name}.lock")


@pytest.fixture(autouse=True)
def cluster_turn(request: pytest.FixtureRequest) -> Iterator[None]:
    """Hold the cluster's lock for the test: shared, or exclusive for a ``whole_cluster`` test."""
    with turn_on(None, alone=request.node.get_closest_marker("whole_cluster") is not None):
        yield


@contextlib.contextmanager
def turn_on(slurm_conf: str | None, alone: bool = False) -> Iterator[None]:
    """The lock of the cluster ``slurm_conf`` names (this process's own: None), shared or ``alone``: a test that
    uses another cluster too (the two-cluster tests) takes that one's as well, so that cluster's
    ``whole_cluster`` tests do not run beneath it."""
    fd = os.open(lock_file("tests", slurm_conf), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Island:
    """Nodes of the test cluster that no other test uses meanwhile, in partitions of their own."""

    name: str  # its plain partition: island1
    nodes: tuple[str, ...]

    @property
    def lowprio(self) -> str:
        """Its partition whose jobs are preempted (requeued, 30 s grace) by jobs in :attr:`urgent`."""
        return f"{self.name}-lowprio"

    @property
    def urgent(self) -> str:
        return f"{self.name}-urgent"

    def preempt(self) -> str:
        """A job in :attr:`urgent` that needs every node: the jobs in :attr:`lowprio` are preempted."""
        return subprocess.run(
            ["sbatch", "--parsable", "-p", self.urgent, f"-N{len(self.nodes)}", "--exclusive", "-o", "/dev/null",
             "--wrap", "sleep 5"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip


def islands() -> list[Island]:
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%R %N"], capture_output=True, text=True, check=True).stdout
    members: dict[str, list[str]] = {}
    for line in out.splitlines():
        partition, _, node = line.partition(" ")
        if re.fullmatch(r"island\d+", partition):
            members.setdefault(partition, []).append(node.strip())
    return [Island(name, tuple(sorted(set(nodes)))) for name, nodes in sorted(members.items())]


@pytest.fixture
def island() -> Iterator[Island]:
    """An island of the test cluster for this test alone (waits for one to be free)."""
    found = islands()
    if not found:
        pytest.fail("the test cluster has no islands (bring it up with ci/slurm-cluster/up)")
    fds = {i: os.open(lock_file(i.name), os.O_RDWR | os.O_CREAT, 0o600)
           for i in found}  # fmt: skip
    try:
        while True:
            for candidate, fd in fds.items():
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue
                try:
                    yield candidate
                finally:  # whatever the test left queued or running there goes before the next test's turn
                    parts = ",".join((candidate.name, candidate.lowprio, candidate.urgent))
                    subprocess.run(["scancel", "-p", parts], capture_output=True, check=False)
                return
            time.sleep(0.5)
    finally:
        for fd in fds.values():
            os.close(fd)


@pytest.fixture(scope="session")
def plain_user() -> str:
    """Another real user of the cluster's login and nodes (not root): their jobs, their files."""
    name = "tisuser"
    if subprocess.run(["id", name], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--system", "--no-create-home", name], check=True)
    return name


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """A real sshd on loopback in front of the test cluster, for a module's tests (a login node)."""
    server = start_sshd(tmp_path_factory.mktemp("sshd"), LOGIN_PATH)
    yield server
    server.stop()
