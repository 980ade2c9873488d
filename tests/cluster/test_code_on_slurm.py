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
    # the first attempt fails on both nodes once each has printed (a node stopped early prints nothing)
    cmd = 'cat msg.txt; if [ "$TI_SLURM_RESTART_COUNT" = 0 ]; then sleep 5; exit 3; fi'
    body = f"mode: ddp\nnodes: 2\ncode: {code}\nsbatch: {{hold: true}}\nrestart: {{max: 1, on: [failure]}}\n"
    body += f"command: '{cmd}'"
    job = Job(tmp_path, body, wait=False)
    assert job.result.returncode == 0, job.result.stderr
    (code / "msg.txt").write_text("edited while the job was held\n")
    subprocess.run(["scontrol", "release", job.id], check=True)
    deadline = time.monotonic() + 240
    while (status := job.status())["state"] not in ("COMPLETED", "FAILED") and time.monotonic() < deadline:
        time.sleep(1)
    assert status["state"] == "COMPLETED", job.explain()
    assert [a["attempt"] for a in status["attempts"]] == [0, 1]  # the first failed and was requeued
    logs = [
        *sorted((job.job_dir / "attempts" / "0" / "logs").glob("*.log")),
        *sorted((job.job_dir / "logs").glob("*.log")),
    ]
    assert len(logs) == 4 and all("as submitted" in log.read_text().splitlines() for log in logs)
    assert not any("edited" in log.read_text() for log in logs)


def staging_site(tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "site.toml"
    cluster_site = (Path(__file__).resolve().parents[2] / "ci" / "slurm-cluster" / "site.toml").read_text()
    site.write_text(cluster_site + f'stage_dir = "{tmp_path / "local-disk"}"\n')
    (tmp_path / "local-disk").mkdir()
    return {"TI_SLURM_CONFIG": str(site)}


def test_a_staged_channel_is_on_every_node_before_its_command_and_gone_after(tmp_path: Path) -> None:
    data = tmp_path / "datasets" / "big"
    data.mkdir(parents=True)
    with open(data / "blob", "wb") as fh:  # 200 MiB, as a shard of a dataset
        for _ in range(200):
            fh.write(b"\1" * (1 << 20))
    cmd = 'echo "$(hostname) $(stat -c %s $TI_SLURM_INPUT_BIG/blob) $TI_SLURM_INPUT_BIG"'
    body = f"mode: ddp\nnodes: 2\ninputs: {{big: {{path: {data}, stage: local}}}}\ncommand: '{cmd}'"
    job = Job(tmp_path, body, env=staging_site(tmp_path))
    assert job.result.returncode == 0, job.result.stderr + job.logs()
    seen = sorted(line.split() for line in job.logs().splitlines() if line.startswith("node"))
    assert [size for _, size, _ in seen] == [str(200 << 20)] * 2 and len({n for n, _, _ in seen}) == 2
    assert all(path.startswith(str(tmp_path / "local-disk")) for _, _, path in seen)
    assert list((tmp_path / "local-disk").rglob("blob")) == []  # each node removed its copy


def test_a_cancelled_job_leaves_no_staged_copy(tmp_path: Path) -> None:
    data = tmp_path / "datasets" / "small"
    data.mkdir(parents=True)
    (data / "part-0").write_text("x" * 4096)
    body = f"mode: ddp\nnodes: 2\ninputs: {{small: {{path: {data}, stage: local}}}}\ncommand: sleep 300"
    job = Job(tmp_path, body, wait=False, env=staging_site(tmp_path))
    deadline = time.monotonic() + 120
    # each node stages its own copy, not necessarily at the same moment: wait for both
    while len(list((tmp_path / "local-disk").rglob("part-0"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert len(list((tmp_path / "local-disk").rglob("part-0"))) == 2  # staged on both nodes
    subprocess.run(["scancel", job.id], check=True)
    while list((tmp_path / "local-disk").rglob("part-0")) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert list((tmp_path / "local-disk").rglob("part-0")) == []
