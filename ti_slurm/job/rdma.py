"""InfiniBand/RoCE ports, from sysfs: the admin hooks' check and the preflight's.

``<root>/class/infiniband/<device>/ports/<n>/state`` reads ``4: ACTIVE`` on a
working port. ``root`` is ``/sys`` on a node (the site's ``sysfs_root``, where
``{node}`` stands for the node's name on test clusters). Standard library only,
without ``glob``: the preflight runs in every job step.
"""

from __future__ import annotations

import os


def device_dir(root: str) -> str:
    return os.path.join(root, "class", "infiniband")


def port_problems(root: str, devices: list[str]) -> list[str]:
    """``<device> missing`` or ``<device> port <n> <STATE>`` for each device or port that is not ACTIVE."""
    problems = []
    for device in devices:
        ports_dir = os.path.join(device_dir(root), device, "ports")
        try:
            ports = sorted(os.listdir(ports_dir))
        except OSError:
            ports = []
        if not ports:
            problems.append(f"{device} missing")
        for port in ports:
            try:
                with open(os.path.join(ports_dir, port, "state")) as fh:
                    state = fh.read().strip()
            except OSError as exc:
                state = f"unreadable ({exc.strerror})"
            if not state.endswith("ACTIVE"):
                problems.append(f"{device} port {port} {state.split(':')[-1].strip()}")
    return problems


def nccl_devices(hca: str, root: str) -> tuple[list[str], list[str]]:
    """The devices ``NCCL_IB_HCA`` selects here, and the entries that select none.

    As NCCL reads it: comma-separated names, each a prefix of device names
    (``mlx5_bond`` selects ``mlx5_bond_0``...) unless the list starts with ``=``
    (exact names); ``:<port>`` suffixes are ignored here. A list starting with
    ``^`` excludes devices, so it demands none.
    """
    if hca.startswith("^"):
        return [], []
    exact = hca.startswith("=")
    try:
        present = sorted(os.listdir(device_dir(root)))
    except OSError:
        present = []
    chosen: list[str] = []
    unmatched: list[str] = []
    for entry in hca.lstrip("=").split(","):
        name = entry.split(":")[0].strip()
        if not name:
            continue
        matches = [d for d in present if (d == name if exact else d.startswith(name))]
        if not matches:
            unmatched.append(name)
        chosen += [d for d in matches if d not in chosen]
    return chosen, unmatched
