"""The Ascend rank table (RANK_TABLE_FILE): each NPU node's device IPs from its hccn.conf, gathered into
HCCL's v1.0 format, checked field by field against the published format."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.factories import plan_from, single
from ti_slurm.job.contract import node_contract
from ti_slurm.job.ranktable import device_ips, rank_table, share, visible_devices

HCCN = "address_{d}=192.168.{n}.{d}\nnetmask_{d}=255.255.255.0\n"


pytestmark = pytest.mark.usefixtures("fake_dns")


def hccn_files(root: Path, nodes: dict[str, int], missing: tuple[str, int] | None = None) -> str:
    """An hccn.conf per node (as the test cluster injects them), ``{node}`` in the path the site config names."""
    for n, (node, devices) in enumerate(nodes.items()):
        text = "".join(HCCN.format(d=d, n=n + 100) for d in range(devices) if (node, d) != missing)
        (root / f"{node}.conf").write_text("# written by the NPU driver's hccn_tool\n" + text)
    return str(root / "{node}.conf")


def test_hccn_conf_lines_give_each_device_its_ip() -> None:
    text = "address_0=192.168.100.101\nnetmask_0=255.255.255.0\n address_7 = 192.168.100.108 \naddress_x=1\n"
    assert device_ips(text) == {0: "192.168.100.101", 7: "192.168.100.108"}


@pytest.mark.parametrize(
    "env,result",
    [
        ({}, [0, 1, 2, 3]),
        ({"ASCEND_VISIBLE_DEVICES": "4,5,6,7"}, [4, 5, 6, 7]),
        ({"ASCEND_RT_VISIBLE_DEVICES": "1,0,3,2"}, [0, 1, 2, 3]),
        (
            {"ASCEND_VISIBLE_DEVICES": "0,1"},
            "2 NPUs visible (ASCEND_VISIBLE_DEVICES=0,1), the job asked for 4 per node",
        ),
        ({"ASCEND_VISIBLE_DEVICES": "a,b"}, "ASCEND_VISIBLE_DEVICES='a,b' is not a list of NPU ids"),
    ],
)
def test_the_node_uses_the_npus_a_runtime_made_visible(env: dict[str, str], result: object) -> None:
    assert visible_devices(env, 4) == result


def test_rank_ids_follow_the_node_rank_then_the_device_id() -> None:
    table = rank_table([("10.0.0.1", [(0, "192.168.1.0"), (1, "192.168.1.1")]), ("10.0.0.2", [(0, "192.168.2.0")])])
    assert table == {
        "status": "completed",
        "version": "1.0",
        "server_count": "2",
        "server_list": [
            {
                "server_id": "10.0.0.1",
                "device": [
                    {"device_id": "0", "device_ip": "192.168.1.0", "rank_id": "0"},
                    {"device_id": "1", "device_ip": "192.168.1.1", "rank_id": "1"},
                ],
            },
            {"server_id": "10.0.0.2", "device": [{"device_id": "0", "device_ip": "192.168.2.0", "rank_id": "2"}]},
        ],
    }


def run_nodes(tmp_path: Path, hccn: str) -> tuple[list[str | None], list[dict[str, str]]]:
    """Both nodes of a 2 x 8-NPU job at once, each in its own thread, as their steps run."""
    plan = plan_from({"mode": "ddp", "nodes": 2, "npus_per_node": 8, "rendezvous_timeout": 2}).replace(hccn_conf=hccn)
    contracts = [node_contract(plan, single("gpu[009-010]", i), 0, str(tmp_path)) for i in range(2)]
    problems: list[str | None] = [None, None]

    def node(i: int) -> None:
        c = contracts[i]
        problems[i] = share(plan, 0, c.index, c.addr, c.node, c.env)

    threads = [threading.Thread(target=node, args=(i,)) for i in (1, 0)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return problems, [c.env for c in contracts]


def test_two_nodes_of_eight_npus_write_one_complete_table(tmp_path: Path) -> None:
    problems, envs = run_nodes(tmp_path, hccn_files(tmp_path, {"gpu009": 8, "gpu010": 8}))
    assert problems == [None, None]
    assert {e["RANK_TABLE_FILE"] for e in envs} == {str(tmp_path / "rank_table.json")}
    assert {e["RANK_SIZE"] for e in envs} == {"16"}
    table = json.loads((tmp_path / "rank_table.json").read_text())
    assert (table["status"], table["version"], table["server_count"]) == ("completed", "1.0", "2")
    assert [s["server_id"] for s in table["server_list"]] == ["10.1.0.9", "10.1.0.10"]
    for n, server in enumerate(table["server_list"]):
        assert [d["device_id"] for d in server["device"]] == [str(d) for d in range(8)]
        assert [d["device_ip"] for d in server["device"]] == [f"192.168.{n + 100}.{d}" for d in range(8)]
        assert [d["rank_id"] for d in server["device"]] == [str(8 * n + d) for d in range(8)]
    assert not list(tmp_path.glob("*.tmp.*"))  # written by rename: no half file left


def test_a_node_missing_a_device_ip_is_named_and_the_other_gives_up(tmp_path: Path) -> None:
    hccn = hccn_files(tmp_path, {"gpu009": 8, "gpu010": 8}, missing=("gpu010", 5))
    problems, _ = run_nodes(tmp_path, hccn)
    assert problems[1] == f"preflight on gpu010: NPU 5 has no device IP (no address_5= in {tmp_path}/gpu010.conf)"
    assert problems[0] == "preflight on gpu009: the rank table lacks NPU node(s) 1 of 2: not reported within 2s"
    assert not (tmp_path / "rank_table.json").exists()


def test_one_process_per_npu_each_with_its_device_and_rank() -> None:
    from ti_slurm.job.ranktable import per_npu_command

    script = per_npu_command('echo "$DEVICE_ID $ASCEND_DEVICE_ID $RANK_ID $RANK_SIZE $LOCAL_RANK"', [4, 5, 6], 8, 12)
    res = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.splitlines()) == ["4 4 8 12 0", "5 5 9 12 1", "6 6 10 12 2"]


def test_the_first_npu_process_to_fail_stops_the_others_and_gives_the_node_its_code() -> None:
    from ti_slurm.job.ranktable import per_npu_command

    command = 'if [ "$RANK_ID" = 1 ]; then exit 7; fi; sleep 60'
    started = time.monotonic()
    res = subprocess.run(["bash", "-c", per_npu_command(command, [0, 1, 2], 0, 3)], timeout=30)
    assert res.returncode == 7 and time.monotonic() - started < 10
