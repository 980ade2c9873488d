"""A node step stopped (a cancel, a requeue) at any point of a staged run removes its copies: also when the
stop comes as the copy ends, before the command's own signal forwarding is in place (seen on the test
cluster: the copy stayed on the node)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

STEP = """
import os, signal, sys, time
from tests.factories import plan_from, single
from ti_slurm.core.site import SiteConfig
from ti_slurm.job import node

base = sys.argv[1]
inputs = {"d": {"path": f"{base}/data", "stage": "local"}}
plan = plan_from({"mode": "ddp", "nodes": 1, "inputs": inputs}, SiteConfig(stage_dir=f"{base}/disk"), preflight=False)

class CancelledAsTheCopyEnds:
    def run_node(self, run):
        print("staged", *os.listdir(run.env["TI_SLURM_INPUT_D"]), flush=True)
        os.kill(os.getpid(), signal.SIGTERM)  # Slurm's SIGTERM, before the mode forwards it to a command
        time.sleep(5)
        return 0

node.get_mode = lambda name: CancelledAsTheCopyEnds()
sys.exit(node.run_node(plan, 0, f"{base}/job", {**os.environ, **single("localhost", 0)}))
"""


def test_a_stop_between_the_copy_and_the_command_removes_the_copy(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "part-0").write_text("shard")
    (tmp_path / "disk").mkdir()
    done = subprocess.run(
        [sys.executable, "-c", STEP, str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.stdout == "staged part-0\n", done.stderr
    assert done.returncode == 128 + 15  # stopped by the signal, not finished
    assert list((tmp_path / "disk").rglob("part-0")) == []
