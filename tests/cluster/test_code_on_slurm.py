"""``code:`` on the real test cluster: a job held in the queue while its code is edited runs the code as
submitted, on every node and in its requeued attempt too."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.cluster.test_modes_on_slurm import Job

pytestmark = pytest.mark.usefixtures("cluster")


def test_a_held_job_runs_the_code_as_submitted_on_every_node_and_attempt(tmp_path: Path) -> None:
    code = tmp_path / "proj"
    code.mkdir()
    (code / "msg.txt").write_text("as submitted\n")
    cmd = 'cat msg.txt; if [ "$TI_SLURM_RESTART_COUNT" = 0 ]; then exit 3; fi'
    body = f"mode: ddp\nnodes: 2\ncode: {code}\nsbatch: {{hold: true}}\nrestart: {{max: 1, on: [failure]}}\n"
    body += f"command: '{cmd}'"
    job = Job(tmp_path, body, wait=False)
    assert job.result.returncode == 0, job.result.stderr
    (code / "msg.txt").write_text("edited while the job was held\n")
    subprocess.run(["scontrol", "release", job.id], check=True)
    deadline = time.monotonic() + 240
    while (status := job.status())["state"] not in ("COMPLETED", "FAILED") and time.monotonic() < deadline:
        time.sleep(1)
    assert status["state"] == "COMPLETED", status
    assert [a["attempt"] for a in status["attempts"]] == [0, 1]  # the first failed and was requeued
    logs = [
        *sorted((job.job_dir / "attempts" / "0" / "logs").glob("*.log")),
        *sorted((job.job_dir / "logs").glob("*.log")),
    ]
    assert len(logs) == 4 and all(log.read_text().splitlines()[0] == "as submitted" for log in logs)
