"""A Slurm multi-cluster setup: the 22.05 test cluster and its twin (`ci/slurm-cluster/up --accounting`, then
`up --twin`) registered with one slurmdbd, as a site that runs `sbatch -M` has them. `cluster: tistwin` names the
twin with no user config at all (it is one of this machine's Slurm clusters); a `[[cluster]]` table reaches it
with `slurm_cluster`, here or over SSH. Run from the 22.05 tier only."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.sshd import Sshd, ssh_config
from tests.testcluster import this_cluster

pytestmark = pytest.mark.usefixtures("cluster")
TWIN = Path("/etc/slurm-twin/test-cluster.env")


@pytest.fixture
def twin(tmp_path: Path) -> dict[str, str]:
    """The environment of a user with no user config on the 22.05 cluster's login, its twin up beside it."""
    if this_cluster().version != "22.05":
        pytest.skip("run from the 22.05 tier (the twin registers with the 22.05 cluster's slurmdbd)")
    if not TWIN.exists():
        if os.environ.get("TI_SLURM_REQUIRE_CLUSTER") == "1":
            pytest.fail("the twin test cluster is not up (ci/slurm-cluster/up --accounting; up --twin)")
        pytest.skip("the twin test cluster is not up (ci/slurm-cluster/up --accounting; up --twin)")
    return {"XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state")}


def spec(tmp_path: Path, name: str, command: str, more: str = "") -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\nmode: ddp\nnodes: 2\noutput_dir: {tmp_path / 'out'}\ncommand: {command}\n{more}")
    return str(path)


def twin_queue() -> str:
    """The twin's queue as Slurm's own squeue shows it from this login."""
    return subprocess.run(["squeue", "-M", "tistwin", "-h", "-o", "%i %T"], capture_output=True, text=True).stdout


SAYS = "echo rank $RANK of $WORLD_SIZE on $(hostname) at $MASTER_ADDR in $SLURM_CLUSTER_NAME"


def test_cluster_names_a_slurm_cluster_of_the_multi_cluster_setup(tmp_path: Path, twin: dict[str, str]) -> None:
    # the spec names the twin; nobody wrote a [[cluster]] table
    job = run_cli("submit", "--wait", spec(tmp_path, "there", SAYS, "cluster: tistwin\n"), env=twin, timeout=120)
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.split()[0]
    assert re.fullmatch(r"tistwin:\d+", job_id), job.stdout
    logs = run_cli("logs", job_id, env=twin).stdout
    said = sorted(re.findall(r"rank (\d) of 2 on node0[12] at 10\.79\.0\.11 in tistwin", logs))
    assert said == ["0", "1"], logs  # both nodes of the twin (its bridge is 10.79.0.0/24), MASTER_ADDR there
    status = json.loads(run_cli("status", job_id, "--json", env=twin).stdout)
    assert status["state"] == "COMPLETED", status

    listed = run_cli("clusters", env=twin)
    rows = {line.split()[0]: line for line in listed.stdout.splitlines()[1:]}
    assert set(rows) == {this_cluster().name, "tistwin"}, listed.stdout
    assert re.search(r"--clusters=tistwin +yes +debug:\d", rows["tistwin"]), listed.stdout

    # cancelled there; a pipeline's next step waits there, on the job it names
    long = run_cli("submit", spec(tmp_path, "long", "sleep 300", "cluster: tistwin\n"), env=twin)
    assert long.returncode == 0, long.stderr
    long_id = long.stdout.split()[0]
    try:
        after = run_cli("submit", "--after", long_id, spec(tmp_path, "after", "hostname"), env=twin)
        assert after.returncode == 0, after.stderr
        after_id = after.stdout.split()[0]
        assert after_id.startswith("tistwin:"), after_id
        assert f"{after_id.split(':')[1]} PENDING" in twin_queue()
        shown = run_cli("list", env=twin).stdout
        assert {row.split()[0] for row in shown.splitlines()[1:]} == {job_id, long_id, after_id}, shown
    finally:
        cancel = run_cli("cancel", long_id, env=twin)
    assert cancel.returncode == 0, cancel.stderr
    assert "CANCELLED" in run_cli("wait", long_id, env=twin, timeout=120).stderr
    assert "CANCELLED" in run_cli("wait", after_id, env=twin, timeout=120).stderr  # its dependency can never hold
    assert long_id.split(":")[1] not in twin_queue().replace(" CANCELLED", "")


def test_a_cluster_table_reaches_a_slurm_cluster_here_and_over_ssh(
    tmp_path: Path, twin: dict[str, str], sshd: Sshd
) -> None:
    (tmp_path / "config" / "ti-slurm").mkdir(parents=True)
    (tmp_path / "config" / "ti-slurm" / "config.toml").write_text(
        '[[cluster]]\nname = "far"\nslurm_cluster = "tistwin"\npartition = "rdma"\n\n'
        '[[cluster]]\nname = "farssh"\nhost = "login"\nslurm_cluster = "tistwin"\npartition = "rdma"\n'
    )
    config = str(ssh_config(tmp_path, sshd))
    env = {**twin, "SSH_AUTH_SOCK": "", "TI_SLURM_SSH_TIMEOUT": "5"}
    for name in ("far", "farssh"):
        argv = ["submit", "--cluster", name, "--ssh-config", config, "--wait", spec(tmp_path, name, SAYS)]
        job = run_cli(*argv, env=env, timeout=120)
        assert job.returncode == 0, job.stderr
        job_id = job.stdout.split()[0]
        assert job_id.startswith(f"{name}:"), job.stdout
        logs = run_cli("logs", job_id, "--ssh-config", config, env=env).stdout
        # the table's partition: the twin's rdma nodes
        assert sorted(re.findall(r"on (node0[34]) at 10\.79\.0\.13 in tistwin", logs)) == ["node03", "node04"], logs
