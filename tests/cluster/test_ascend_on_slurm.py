"""Ascend NPUs on the real test cluster: the rank table (RANK_TABLE_FILE) of a 2-node x 8-NPU job, each
node with its own /etc/hccn.conf (injected per node through the site config's hccn_conf), and a node that
lacks a device IP failing at once, named."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.cluster.test_modes_on_slurm import Job
from tests.conftest import ROOT, run_cli, sbatch_and_wait

pytestmark = pytest.mark.usefixtures("cluster")
NPU_NODES = [f"node{i:02d}" for i in range(1, 5)]  # the test cluster's partition npu


def device_ip(node: str, device: int) -> str:
    return f"192.168.{100 + int(node[4:])}.{10 + device}"


def hccn_site(tmp_path: Path, lacking: tuple[str, int] | None = None) -> dict[str, str]:
    """The cluster's site config, with each NPU node's own hccn.conf (as hccn_tool writes it)."""
    folder = tmp_path / "hccn"
    folder.mkdir()
    for node in NPU_NODES:
        lines = [f"address_{d}={device_ip(node, d)}\nnetmask_{d}=255.255.255.0\n" for d in range(8)]
        if lacking and lacking[0] == node:
            del lines[lacking[1]]
        (folder / f"{node}.conf").write_text("".join(lines))
    site = tmp_path / "site.toml"
    site.write_text(
        (ROOT / "ci" / "slurm-cluster" / "site.toml").read_text() + f'hccn_conf = "{folder}/{{node}}.conf"\n'
    )
    return {"TI_SLURM_CONFIG": str(site)}


def test_a_two_node_eight_npu_job_gets_one_complete_rank_table(tmp_path: Path) -> None:
    cmd = 'cp "$RANK_TABLE_FILE" table-$VC_TASK_INDEX.json; '
    cmd += 'echo "$RANK_SIZE $MA_NUM_GPUS $MA_CURRENT_IP" > ids-$VC_TASK_INDEX'
    body = f"mode: ddp\nplatform: modelarts\nnodes: 2\nnpus_per_node: 8\npartition: npu\ncommand: '{cmd}'"
    job = Job(tmp_path, body, env=hccn_site(tmp_path))
    assert job.result.returncode == 0, job.result.stderr + job.logs()
    copies = [(tmp_path / f"table-{n}.json").read_text() for n in (0, 1)]
    assert copies[0] == copies[1]  # the same file, complete, on both nodes before their commands started
    table = json.loads(copies[0])
    assert (table["status"], table["version"], table["server_count"]) == ("completed", "1.0", "2")
    nodes = job.status()["components"][0]["nodes"]
    for n, (server, node) in enumerate(zip(table["server_list"], nodes, strict=True)):
        size, npus, addr = (tmp_path / f"ids-{n}").read_text().split()
        assert (size, npus, server["server_id"]) == ("16", "8", addr)  # the server is the node's address
        assert server["device"] == [
            {"device_id": str(d), "device_ip": device_ip(node, d), "rank_id": str(8 * n + d)} for d in range(8)
        ]


def test_a_node_without_a_device_ip_fails_the_job_in_seconds_naming_it(tmp_path: Path) -> None:
    started = time.monotonic()
    body = (
        "mode: ddp\nnodes: 2\nnpus_per_node: 8\npartition: npu\nsbatch: {nodelist: 'node[01-02]'}\ncommand: sleep 100"
    )
    job = Job(tmp_path, body, env=hccn_site(tmp_path, lacking=("node02", 5)))
    assert job.result.returncode == 1
    conf = tmp_path / "hccn" / "node02.conf"
    line = f"ddp node node02 (index 1) failed preflight on node02: NPU 5 has no device IP (no address_5= in {conf})"
    assert f"FAILED: {line}" in job.result.stderr, job.result.stderr
    assert time.monotonic() - started < 30


def test_npus_on_a_partition_without_them_are_refused_at_submit(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("mode: ddp\nnodes: 2\nnpus_per_node: 8\npartition: rdma\ncommand: hostname\n")
    res = run_cli("submit", str(spec), cwd=tmp_path, env={"XDG_STATE_HOME": str(tmp_path)})
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert re.search(r"8 NPUs per node asked, no node of partition rdma has NPUs \(GRES npu\)", res.stderr), res.stderr


def rank_lines(text: str) -> list[tuple[str, str, str, str]]:
    return sorted((*line.split()[1:5],) for line in text.splitlines() if line.startswith("npu "))  # type: ignore[misc]


def test_one_process_per_npu_each_with_the_rank_the_table_gives_its_device(tmp_path: Path) -> None:
    cmd = 'echo "npu $(hostname) $DEVICE_ID $RANK_ID $RANK_SIZE"'
    body = f"mode: ddp\nnodes: 2\nnpus_per_node: 8\nprocesses: per-npu\npartition: npu\ncommand: '{cmd}'"
    job = Job(tmp_path, body, env=hccn_site(tmp_path))
    assert job.result.returncode == 0, job.result.stderr + job.logs()
    table = json.loads((job.job_dir / "rank_table.json").read_text())
    nodes = job.status()["components"][0]["nodes"]
    expected = sorted(
        (node, d["device_id"], d["rank_id"], "16")
        for node, server in zip(nodes, table["server_list"], strict=True)
        for d in server["device"]
    )
    assert rank_lines(job.logs()) == expected and len(expected) == 16


def test_exec_per_npu_in_a_hand_written_job(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    script = tmp_path / "npu.sbatch"
    site = hccn_site(tmp_path)["TI_SLURM_CONFIG"]
    script.write_text(
        f"#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --partition=npu\n#SBATCH --gres=npu:8\n#SBATCH --output={out}\n"
        f"export TI_SLURM_CONFIG={site}\n"
        "srun ti-slurm exec --mode ddp --npus-per-node 8 --per-npu -- "
        'bash -c \'echo "npu $(hostname) $DEVICE_ID $RANK_ID $RANK_SIZE"; cat "$RANK_TABLE_FILE" > /dev/null\'\n'
    )
    sbatch_and_wait(script)
    lines = rank_lines(out.read_text())
    assert sorted(int(rank) for _, _, rank, _ in lines) == list(range(16)), out.read_text()
    assert {size for *_, size in lines} == {"16"} and len({node for node, *_ in lines}) == 2
