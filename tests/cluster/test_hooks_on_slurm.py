"""The Prolog/Epilog hooks as slurm.conf runs them on the test cluster (Prolog=/Epilog= point at ti-slurm)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import fake_sysfs, processes_matching, run_cli, slurm_conf, wait_until_gone
from tests.testcluster import this_cluster

pytestmark = [pytest.mark.usefixtures("cluster"), pytest.mark.whole_cluster]  # the site config, drained nodes
JOBS = Path("/var/lib/ti-slurm/jobs")
HOOK_LOG = Path("/var/log/ti-slurm-hooks.log")


@pytest.fixture(autouse=True)
def hooks_configured() -> None:
    conf = slurm_conf().read_text()
    if "ti-slurm-prolog" not in conf:
        pytest.fail(
            "the test cluster runs without ti-slurm's Prolog/Epilog (reinstall ti-slurm, then ci/slurm-cluster/up)"
        )


def test_job_dir_exists_during_the_job_owned_by_the_user_and_is_removed_after(plain_user: str) -> None:
    import tempfile

    shared = Path(tempfile.mkdtemp(prefix="ti-slurm-hooks-", dir="/tmp"))  # pytest's tmp is root-only
    shared.chmod(0o777)
    out = shared / "out.txt"
    script = 'stat -c "%U %a %F" /var/lib/ti-slurm/jobs/$SLURM_JOB_ID'
    job = subprocess.run(
        ["runuser", "-u", plain_user, "--", "sbatch", "--parsable", "-N2", f"--output={out}", f"--wrap=srun {script}"],
        capture_output=True,
        text=True,
        check=True,
        cwd=shared,
    )
    job_id = job.stdout.strip()
    wait_until_gone(job_id)
    time.sleep(1)
    assert out.read_text().splitlines() == [f"{plain_user} 700 directory"] * 2
    assert not (JOBS / job_id).exists()
    shutil.rmtree(shared)


def test_epilog_cleans_what_escaped_a_killed_job(tmp_path: Path) -> None:
    marker = f"sleep 8{uuid.uuid4().int % 10000:04d}"
    # a daemon that escapes the job's process tree (double fork), like `ray start` without --block
    job = subprocess.run(
        ["sbatch", "--parsable", f"--output={tmp_path / 'o'}", f"--wrap=(setsid {marker} &); sleep 300"],
        capture_output=True,
        text=True,
        check=True,
    )
    job_id = job.stdout.strip()
    deadline = time.monotonic() + 60
    while not processes_matching(marker) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert processes_matching(marker)
    other = subprocess.Popen(["sleep", marker.split()[1]])  # the same command, outside any job: must survive
    try:
        subprocess.run(["scancel", job_id], check=True)
        wait_until_gone(job_id)
        time.sleep(2)
        assert [p for p in processes_matching(marker) if str(other.pid) not in p.split()[0]] == []
        assert other.poll() is None
        assert re.search(rf"epilog: job {job_id}: killed \d+ leftover", HOOK_LOG.read_text())
    finally:
        other.kill()


def test_rdma_port_down_drains_the_node_naming_the_device(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    for node, state in (("node05", "1: DOWN"), ("node06", "4: ACTIVE")):
        fake_sysfs(sysfs / node, {"mlx5_bond_0": state})
    site = this_cluster().site_config  # what this cluster's Prolog reads
    saved = site.read_text()
    site.write_text(saved + f'rdma_devices = ["mlx5_bond_0"]\nrdma_check = "drain"\nsysfs_root = "{sysfs}/{{node}}"\n')
    job_id = ""
    try:
        job = subprocess.run(
            ["sbatch", "--parsable", "-p", "rdma", "-N2", f"--output={tmp_path / 'o'}", "--wrap=true"],
            capture_output=True,
            text=True,
            check=True,
        )
        job_id = job.stdout.strip()
        deadline = time.monotonic() + 60
        reason = ""
        while time.monotonic() < deadline:
            info = subprocess.run(["scontrol", "show", "node", "node05"], capture_output=True, text=True).stdout
            m = re.search(r"Reason=(.*?) \[", info)
            if m and "DRAIN" in info:
                reason = m.group(1)
                break
            time.sleep(0.5)
        assert "ti-slurm prolog: RDMA mlx5_bond_0 port 1 DOWN" in reason
        assert (
            "DRAIN" not in subprocess.run(["scontrol", "show", "node", "node06"], capture_output=True, text=True).stdout
        )
    finally:
        site.write_text(saved)
        if job_id:
            subprocess.run(["scancel", job_id], check=False)
        resume_until_it_stays("node05")  # Slurm may drain it a second time, for the failed launch
        shutil.rmtree(sysfs, ignore_errors=True)


def resume_until_it_stays(node: str) -> None:
    """Return a node the test drained to service, again while Slurm still drains it (25.11 drains a node
    whose Prolog failed once more when the launch failure reaches it, just after the Prolog's own drain)."""
    deadline = time.monotonic() + 30
    calm_since = None
    while time.monotonic() < deadline:
        info = subprocess.run(["scontrol", "show", "node", node], capture_output=True, text=True).stdout
        if "DRAIN" in info:
            subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], check=False)
            calm_since = None
        elif calm_since is None:
            calm_since = time.monotonic()
        elif time.monotonic() - calm_since > 3:
            return
        time.sleep(0.5)
    raise AssertionError(f"{node} stays drained: {info}")


def test_a_node_a_jobs_failure_blamed_is_drained_when_the_site_asks(tmp_path: Path) -> None:
    """``drain_blamed_nodes = true``: rank 1's GPU falls off the bus; its node's Epilog drains it for everyone,
    with the cause as Slurm's reason; the other node stays up."""
    site = this_cluster().site_config
    saved = site.read_text()
    site.write_text(saved + "drain_blamed_nodes = true\n")
    spec = tmp_path / "job.yaml"
    command = "python3 -m ti_slurm.admin.rehearse gpu_fault --rank 1 --after 1"
    spec.write_text(f"mode: ddp\nnodes: 2\npartition: rdma\nrdma: off\ncommand: {command}\noutput_dir: {tmp_path}\n")
    bad = ""
    try:
        res = run_cli("submit", "--wait", str(spec), env={"XDG_STATE_HOME": str(tmp_path / "state")}, timeout=300)
        job_id = res.stdout.split()[0]
        status = json.loads(run_cli("status", job_id, "--json", env={"XDG_STATE_HOME": str(tmp_path / "state")}).stdout)
        bad, good = status["components"][0]["nodes"][1], status["components"][0]["nodes"][0]
        assert status["attempts"][-1]["cause"] == "gpu_fault" and status["attempts"][-1]["evidence"]["node"] == bad
        deadline, reason = time.monotonic() + 60, ""
        while time.monotonic() < deadline:
            info = subprocess.run(["scontrol", "show", "node", bad], capture_output=True, text=True).stdout
            m = re.search(r"Reason=(.*?) \[", info)
            if m and "DRAIN" in info:
                reason = m.group(1)
                break
            time.sleep(0.5)
        assert reason == f"ti-slurm: gpu_fault in job {job_id}"
        assert "DRAIN" not in subprocess.run(["scontrol", "show", "node", good], capture_output=True, text=True).stdout
    finally:
        site.write_text(saved)
        if bad:
            resume_until_it_stays(bad)
