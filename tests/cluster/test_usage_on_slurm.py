"""Resource use on the real cluster, through the CLI: ``top`` while a job runs, and the end summary telling
a CPU-bound job from an idle one (the GPU path is unit-tested against recorded NVML and nvidia-smi answers:
the test cluster's GPUs are Slurm GRES without devices)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import ti_slurm
from tests.conftest import run_cli
from ti_slurm import JobState

pytestmark = pytest.mark.usefixtures("cluster", "own_registry")  # ids may repeat across test clusters

SPEC = "name: {name}\nmode: ddp\nnodes: 2\ncpus_per_node: 1\nmem: 500M\ncommand: '{command}'\n"
BUSY = 'timeout 15 sh -c "while :; do :; done"; true'  # one CPU busy on each node
IDLE = "sleep 15"


def submit(folder: Path, name: str, command: str) -> str:
    (folder / f"{name}.yaml").write_text(SPEC.format(name=name, command=command))
    res = run_cli("submit", f"{name}.yaml", cwd=folder)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_top_and_the_summary_tell_a_cpu_bound_job_from_an_idle_one(tmp_path: Path) -> None:
    busy, idle = submit(tmp_path, "busy", BUSY), submit(tmp_path, "idle", IDLE)
    deadline = time.monotonic() + 90
    while True:  # each node samples every 5 s once its command runs
        table = run_cli("top", busy, "--once").stdout
        rows = [line for line in table.splitlines()[2:] if " ddp-" in line]
        if len(rows) == 2 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert table.splitlines()[0].startswith(f"job {busy}  busy  RUNNING"), table
    assert len(rows) == 2 and {row.split()[1] for row in rows} == {"ddp-0", "ddp-1"}, table
    for job in (busy, idle):
        assert ti_slurm.get_job(job).wait(timeout=120).state is JobState.COMPLETED
    busy_status, idle_status = (run_cli("status", job).stdout for job in (busy, idle))
    assert "efficiency: CPU" in busy_status and "warning" not in busy_status, busy_status
    assert "of 500 MiB asked" in busy_status, busy_status
    warnings = [line for line in idle_status.splitlines() if "warning:" in line]
    assert len(warnings) == 2 and all("averaged 0% of its 1" in w for w in warnings), idle_status
    usage = ti_slurm.get_job(busy).usage()  # the API's figures, each node's
    assert len(usage) == 2 and all(u.cpu_seconds > 1.5 and u.cpus == 1 for u in usage), usage
    assert all(0 < u.peak_rss < u.mem_request == 500 << 20 for u in usage), usage
