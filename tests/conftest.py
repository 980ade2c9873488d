"""Shared fixtures. Tiers: tests/unit, tests/golden, tests/local (real processes), tests/cluster (real Slurm)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


# the modules of the longest tests (minutes each, mostly waiting on Slurm): run first, so that parallel
# workers (pytest -n) do not end the run waiting on one of them started last
LONG_FIRST = ("test_restart_on_slurm.py", "test_containers_on_slurm.py", "test_multi_role_on_slurm.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = Path(str(item.fspath)).parent.name
        if tier in ("unit", "golden", "local", "cluster"):
            item.add_marker(getattr(pytest.mark, tier))
    items.sort(key=_long_first)


def _long_first(item: pytest.Item) -> int:
    module = Path(str(item.fspath)).name
    return LONG_FIRST.index(module) if module in LONG_FIRST else len(LONG_FIRST)


@pytest.fixture
def write_spec(tmp_path: Path):
    """Write a YAML spec into a temporary directory and return its path."""

    def write(text: str, name: str = "job.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


@pytest.fixture
def fake_dns(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Node names resolve as this table says (``gpu001``..``gpu019`` -> ``10.1.0.N``), through the call the job
    path resolves with; a test may add names or change addresses."""
    addresses = {f"gpu{i:03d}": f"10.1.0.{i}" for i in range(1, 20)}
    monkeypatch.setattr("_socket.gethostbyname", lambda name: addresses[name])
    return addresses


SmallDisk = Callable[..., Path]  # the small_disk fixture: small_disk(size, name, full) -> the mounted folder


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    """Make a filesystem of its own: ``small_disk("2m")`` mounts a tmpfs of that size under ``tmp_path`` (root
    only; the test is skipped elsewhere), ``full=True`` fills it first; each is unmounted after the test."""
    mounted: list[Path] = []

    def make(size: str = "2m", name: str = "disk", full: bool = False) -> Path:
        disk = tmp_path / name
        disk.mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(disk)], check=False).returncode:
            pytest.skip("cannot mount a tmpfs here (needs root)")
        mounted.append(disk)
        if full:
            with open(disk / "filler", "wb") as fh, contextlib.suppress(OSError):
                while True:
                    fh.write(b"x" * 65536)
        return disk

    yield make
    for disk in mounted:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.fixture
def own_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The API records jobs in a registry of this test's own, and works in its own directory."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)


def fake_sysfs(root: Path, states: dict[str, str]) -> None:
    """InfiniBand devices under ``root`` as sysfs shows them: ``{device: "4: ACTIVE"}``, port 1 each."""
    for device, state in states.items():
        port = root / "class" / "infiniband" / device / "ports" / "1"
        port.mkdir(parents=True, exist_ok=True)
        (port / "state").write_text(state + "\n")


def api_spec(tmp_path: Path, **fields: object) -> dict[str, object]:
    """A spec for the Python API whose jobs' directories go below ``tmp_path``."""
    return {"output_dir": str(tmp_path / "out"), **fields}


def run_cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 600):
    """Run the real ``ti-slurm`` command line: the installed one, or where none is on PATH (a plain copy of the
    source tree, as the unit tier may run), ``python3 -m ti_slurm`` from this tree."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    argv = ["ti-slurm"]
    if shutil.which("ti-slurm", path=full_env.get("PATH")) is None:
        argv = [sys.executable, "-m", "ti_slurm"]
        full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), full_env.get("PYTHONPATH")]))
    return subprocess.run(
        [*argv, *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout, check=False
    )


def scontrol_hostnames(text: str) -> list[str] | None:
    """``scontrol show hostnames`` on ``text``; None where scontrol is not installed."""
    if shutil.which("scontrol") is None:
        return None
    env = dict(os.environ)
    if not Path("/etc/slurm/slurm.conf").exists() and "SLURM_CONF" not in env:
        conf = Path("/tmp/ti-slurm-test-slurm.conf")
        conf.write_text("ClusterName=x\nSlurmctldHost=localhost\nNodeName=n1\nPartitionName=p Nodes=n1\n")
        env["SLURM_CONF"] = str(conf)
    res = subprocess.run(["scontrol", "show", "hostnames", text], capture_output=True, text=True, env=env, check=False)
    if "Invalid" in res.stderr or "error" in res.stderr:
        return []
    return res.stdout.split()


def slurm_conf() -> Path:
    """The slurm.conf the Slurm commands on PATH read (``/etc/slurm`` for 22.05, ``/etc/slurm-25.11`` for 25.11)."""
    if os.environ.get("SLURM_CONF"):
        return Path(os.environ["SLURM_CONF"])
    res = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=20, check=False)
    for line in res.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "SLURM_CONF":
            return Path(value.strip())
    return Path("/etc/slurm/slurm.conf")


def slurm_version() -> tuple[int, int]:
    """The version of the Slurm commands on PATH: (22, 5) or (25, 11)."""
    from ti_slurm.slurm.text import parse_version

    return parse_version(subprocess.run(["sinfo", "--version"], capture_output=True, text=True, check=False).stdout)


@pytest.fixture(scope="session")
def cluster() -> None:
    """The test Slurm cluster (ci/slurm-cluster/up); skip without it, unless CI requires it."""
    ok = shutil.which("sinfo") is not None
    if ok:
        res = subprocess.run(["sinfo", "-h", "-o", "%P %T"], capture_output=True, text=True, timeout=20, check=False)
        ok = res.returncode == 0 and bool(res.stdout.strip())
    if not ok:
        if os.environ.get("TI_SLURM_REQUIRE_CLUSTER") == "1":
            pytest.fail("the test Slurm cluster is not up (run ci/slurm-cluster/up)")
        pytest.skip("the test Slurm cluster is not up (run ci/slurm-cluster/up as root)")


def slurm_partitions() -> str:
    """The cluster's partitions as ti-slurm lists them in a refusal: sorted, comma-separated."""
    out = subprocess.run(["sinfo", "-h", "-o", "%R"], capture_output=True, text=True, check=True).stdout
    return ", ".join(sorted(set(out.split())))


def ray_processes(job_id: str) -> list[str]:
    """Live processes of job ``job_id``'s Ray (its raylets, GCS, dashboard: all name the job's Ray temp dirs)."""
    return processes_matching(rf"/ti-ray-{job_id}-\d+/")


def processes_matching(pattern: str) -> list[str]:
    """Live processes whose command line matches ``pattern`` (all test nodes share this machine's process table).

    Zombies are left out: they have exited, and this container's PID 1 may be slow to reap orphans.
    """
    import re

    out = subprocess.run(["ps", "-ww", "-eo", "pid=,stat=,args="], capture_output=True, text=True, check=False).stdout
    rx = re.compile(pattern)
    live = []
    for line in out.splitlines():
        pid, state, args = ([*line.strip().split(None, 2), "", ""])[:3]
        if not state.startswith("Z") and rx.search(args) and "ps -eo" not in args and int(pid) != os.getpid():
            live.append(line.strip())
    return live


def wait_until_gone(job_id: str, timeout: float = 300) -> None:
    """Wait until Slurm no longer lists the job."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        res = subprocess.run(["squeue", "-h", "-j", job_id], capture_output=True, text=True, check=False)
        if not res.stdout.strip():
            return
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} still queued after {timeout:.0f}s")


def sbatch_and_wait(script: Path, cwd: Path | None = None) -> str:
    """Submit a batch script with plain sbatch and wait for it to end; return its id."""
    res = subprocess.run(["sbatch", "--parsable", str(script)], cwd=cwd, capture_output=True, text=True, check=True)
    job_id = res.stdout.strip()
    wait_until_gone(job_id)
    return job_id
