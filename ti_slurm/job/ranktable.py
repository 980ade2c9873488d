"""The Ascend rank table: HCCL's file listing every NPU of the job, which ModelArts writes and names with
``RANK_TABLE_FILE`` (MindSpore and torch_npu read it to build their communicators).

Format v1.0, as Huawei's HCCL guide and ModelArts' launchers have it::

    {"status": "completed", "version": "1.0", "server_count": "2",
     "server_list": [{"server_id": "10.0.0.1",
                      "device": [{"device_id": "0", "device_ip": "192.168.100.101", "rank_id": "0"}, ...]},
                     ...]}

Every value is a string. Servers follow the node rank, devices their id, and rank ids run over both.
A device's IP is the NPU's own network address, which each node reads from its ``/etc/hccn.conf``
(``address_<device id>=<ip>`` lines; the site's ``hccn_conf``). So each NPU node writes what it found to
``npus/<attempt>/<n>.json`` in the job directory, waits until every NPU node has, and writes the table
(atomically: a reader never sees half a file) before its command starts; every node builds the same bytes
from the same parts. A node whose NPUs or device IPs are missing ends before its command, naming the
device. Standard library only: this runs in the job step of every NPU node.
"""

from __future__ import annotations

import os
import time

from ti_slurm.core import lightjson
from ti_slurm.core.files import open_regular, write_atomic
from ti_slurm.core.paths import JobPaths

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ti_slurm.core.plan import JobPlan

VERSION = "1.0"
VISIBLE = ("ASCEND_RT_VISIBLE_DEVICES", "ASCEND_VISIBLE_DEVICES")  # set where a runtime bound some NPUs
POLL = 0.1  # seconds between looks for the other nodes' parts
Devices = list[tuple[int, str]]  # (device id, device IP) of one node, by device id


def device_ips(text: str) -> dict[int, str]:
    """``address_<id>=<ip>`` lines of an hccn.conf (other lines are other settings of the NPUs' network)."""
    found: dict[int, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        key = key.strip()
        number = key[len("address_") :]
        if sep and key.startswith("address_") and number.isdigit() and value.strip():
            found[int(number)] = value.strip()
    return found


def visible_devices(env: Mapping[str, str], count: int) -> list[int] | str:
    """This node's NPU ids: those a runtime made visible, else 0..count-1; a problem as a string."""
    for name in VISIBLE:
        text = env.get(name, "").strip()
        if text:
            words = [word.strip() for word in text.split(",")]
            if not all(word.isdigit() for word in words):
                return f"{name}={text[:80]!r} is not a list of NPU ids"
            if len(words) != count:
                return f"{len(words)} NPUs visible ({name}={text[:80]}), the job asked for {count} per node"
            return sorted(int(word) for word in words)
    return list(range(count))


def node_devices(plan: JobPlan, node: str, env: Mapping[str, str], count: int) -> Devices | str:
    """This node's NPUs with their device IPs, or the first problem as a string."""
    ids = visible_devices(env, count)
    if isinstance(ids, str):
        return ids
    path = plan.hccn_conf.replace("{node}", node)
    try:
        with open_regular(path) as fh:
            ips = device_ips(fh.read(1 << 20).decode(errors="replace"))
    except OSError as exc:
        return f"cannot read {path} (the NPUs' device IPs): {exc.strerror or exc}"
    for device in ids:
        if device not in ips:
            return f"NPU {device} has no device IP (no address_{device}= in {path})"
    return [(device, ips[device]) for device in ids]


def rank_table(servers: Sequence[tuple[str, Devices]]) -> dict[str, object]:
    """The v1.0 table of ``servers`` (server id and devices, in node rank order)."""
    server_list, rank = [], 0
    for server_id, devices in servers:
        listed = []
        for device, ip in devices:
            listed.append({"device_id": str(device), "device_ip": ip, "rank_id": str(rank)})
            rank += 1
        server_list.append({"server_id": server_id, "device": listed})
    return {"status": "completed", "version": VERSION, "server_count": str(len(servers)), "server_list": server_list}


def npu_nodes(plan: JobPlan) -> list[tuple[int, int]]:
    """(component, node index) of every NPU node, in node rank order: the table's servers."""
    return [(k, i) for k, comp in enumerate(plan.components) if comp.npus_per_node for i in range(comp.nodes)]


def first_rank(plan: JobPlan, component: int, index: int) -> int:
    """The rank id of this node's first NPU: the NPUs of every NPU node before it in node rank order."""
    servers = npu_nodes(plan)
    return sum(plan.components[k].npus_per_node for k, _ in servers[: servers.index((component, index))])


def per_npu_command(command: str, devices: Sequence[int], first: int, total: int) -> str:
    """``command`` once per NPU of this node, each with its DEVICE_ID (ASCEND_DEVICE_ID), RANK_ID, RANK_SIZE
    and LOCAL_RANK, as Ascend's rank-table launchers start them: a bash script, so it runs in a training
    image too. Each process leads a session of its own; the first to fail has the others' sessions stopped
    (SIGTERM), and the node ends with its code (0 once all ended well)."""
    from ti_slurm.core.shell import shell_quote

    lines = ["ti_npu_pids=()"]
    for local, device in enumerate(devices):
        values = f"DEVICE_ID={device} ASCEND_DEVICE_ID={device} RANK_ID={first + local} RANK_SIZE={total}"
        lines.append(f"{values} LOCAL_RANK={local} setsid /bin/bash -c {shell_quote(command)} &")
        lines.append('ti_npu_pids+=("$!")')
    lines += [
        'ti_npu_all=("${ti_npu_pids[@]}") ti_npu_code=0',
        "while [ ${#ti_npu_pids[@]} -gt 0 ]; do",
        "  ti_npu_left=()",
        '  for ti_npu_pid in "${ti_npu_pids[@]}"; do',
        '    if [ -e "/proc/$ti_npu_pid" ]; then ti_npu_left+=("$ti_npu_pid"); continue; fi',
        '    wait "$ti_npu_pid"; ti_npu_last=$?',
        '    if [ "$ti_npu_last" -ne 0 ] && [ "$ti_npu_code" -eq 0 ]; then',
        "      ti_npu_code=$ti_npu_last",
        # the session's group, and the process itself: one not yet past setsid is in no group of its own
        '      for ti_npu_o in "${ti_npu_all[@]}"; do kill -TERM -- "-$ti_npu_o" "$ti_npu_o" 2>/dev/null; done',
        "    fi",
        "  done",
        '  ti_npu_pids=("${ti_npu_left[@]}"); [ ${#ti_npu_pids[@]} -gt 0 ] && sleep 0.2',
        "done",
        'exit "$ti_npu_code"',
    ]
    return "\n".join(lines) + "\n"


def share(plan: JobPlan, component: int, index: int, server_id: str, node: str, env: Mapping[str, str]) -> str | None:
    """Publish this node's NPUs, gather every NPU node's, write the rank table; a problem as one line."""
    count = plan.components[component].npus_per_node
    if not count:
        return None
    devices = node_devices(plan, node, env, count)
    if isinstance(devices, str):
        return f"preflight on {node}: {devices}"
    paths = JobPaths(env["TI_SLURM_JOB_DIR"])
    attempt = env.get("TI_SLURM_RESTART_COUNT", "0")
    servers = npu_nodes(plan)
    mine = paths.npu_share(attempt, servers.index((component, index)))
    os.makedirs(os.path.dirname(mine), exist_ok=True)
    write_atomic(mine, lightjson.dumps({"server_id": server_id, "device": [list(d) for d in devices]}))
    parts = gather(paths, attempt, len(servers), plan.rendezvous_timeout)
    if isinstance(parts, str):
        return f"preflight on {node}: {parts}"
    table = rank_table(parts)
    write_atomic(paths.rank_table, lightjson.dumps(table) + "\n")
    return None


def gather(paths: JobPaths, attempt: str, count: int, timeout: float) -> list[tuple[str, Devices]] | str:
    """Every NPU node's part, in order, once all are there; a problem after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        missing = [n for n in range(count) if not os.path.exists(paths.npu_share(attempt, n))]
        if not missing:
            break
        if time.monotonic() > deadline:
            which = ", ".join(map(str, missing[:8]))
            return f"the rank table lacks NPU node(s) {which} of {count}: not reported within {timeout:g}s"
        time.sleep(POLL)
    parts = []
    for n in range(count):
        with open_regular(paths.npu_share(attempt, n)) as fh:
            part = lightjson.loads(fh.read().decode())
        parts.append((str(part["server_id"]), [(int(device), str(ip)) for device, ip in part["device"]]))
    return parts
