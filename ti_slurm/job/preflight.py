"""Preflight: each node checks, in milliseconds, what would otherwise hang or slow the job for hours.

Runs in each node's step before the command (``preflight: off`` in the spec
skips it); the first problem is one line naming the node and the cause, and
the node exits :data:`PREFLIGHT_EXIT` without running the command, which
fails the job at once:

- names and addresses agree: this node resolves the master's (head's) name,
  its own, and, for jobs of at most :data:`ALL_NAMES_UP_TO` nodes, every node's
  name to the address the job's contract uses (one resolution, made by the
  supervisor for every node);
- ports: the ports this node's contract hands out for it to listen on are free;
- GPUs: the GPUs Slurm bound (``CUDA_VISIBLE_DEVICES``) are as many as ``gpus_per_node``;
- RDMA: on an RDMA job, every HCA ``NCCL_IB_HCA`` selects exists and its ports are ACTIVE.

Standard library only: this is the job path.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from collections.abc import Mapping

    from ti_slurm.job.contract import NodeContract
    from ti_slurm.job.plan import JobPlan

PREFLIGHT_EXIT = 125
ALL_NAMES_UP_TO = 256  # larger jobs check the master's name and their own (each lookup may be DNS)


def problems(plan: JobPlan, component: int, contract: NodeContract, env: Mapping[str, str]) -> str | None:
    """The first preflight problem of this node, as one line; ``None`` when every check passes."""
    for check in (names_agree, ports_free, gpus_match, rdma_ports_active):
        found = check(plan, component, contract, env)
        if found:
            return f"preflight on {contract.node}: {found}"
    return None


def names_agree(plan: JobPlan, component: int, contract: NodeContract, env: Mapping[str, str]) -> str | None:
    """This node resolves the names that matter to the addresses the whole job uses."""
    if not contract.addresses or env.get("TI_SLURM_NODE_ADDR"):
        return None  # no shared resolution (a hand-written script), or addresses pinned (the local runner)
    names = list(contract.addresses) if len(contract.addresses) <= ALL_NAMES_UP_TO else []
    names += [n for n in (contract.first_node, contract.node) if n not in names]
    return resolution_mismatch(names, contract.addresses, "the job uses")


def resolution_mismatch(names: list[str], addresses: Mapping[str, str], whose: str) -> str | None:
    """The first of ``names`` this machine resolves other than ``addresses`` says (``ti-slurm doctor`` too)."""
    import socket

    for name in names:
        want = addresses.get(name)
        if want is None:
            continue
        try:
            got = socket.gethostbyname(name)
        except OSError as exc:
            return f"cannot resolve {name} ({exc}); {whose} {want} for it"
        if got != want:
            return f"resolves {name} to {got}, but {whose} {want} for it (check /etc/hosts or DNS on this node)"
    return None


def ports_free(plan: JobPlan, component: int, contract: NodeContract, env: Mapping[str, str]) -> str | None:
    """The ports this node will listen on are free (a server binds the wildcard address)."""
    import socket

    for port, what in contract.listen_ports:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("0.0.0.0", port))
            except OSError:
                return f"port {port} ({what}) is taken on this node; another program holds it"
    return None


def gpus_match(plan: JobPlan, component: int, contract: NodeContract, env: Mapping[str, str]) -> str | None:
    """Slurm bound as many GPUs as the job asked for (a node that shows 7 of 8 trains with fewer ranks)."""
    wanted = plan.components[component].gpus_per_node
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if not wanted or visible is None:
        return None
    count = len([d for d in visible.split(",") if d.strip()])
    if count != wanted:
        return f"sees {count} GPU(s) (CUDA_VISIBLE_DEVICES={visible[:60]}), the job asked for {wanted} per node"
    return None


def rdma_ports_active(plan: JobPlan, component: int, contract: NodeContract, env: Mapping[str, str]) -> str | None:
    """On an RDMA job, the HCAs NCCL will use exist and their ports are ACTIVE."""
    hca = env.get("NCCL_IB_HCA")
    if not contract.defaults or not hca or env.get("NCCL_IB_DISABLE") == "1":
        return None  # not an RDMA job here (or the user turned InfiniBand off)
    from ti_slurm.job.rdma import nccl_devices, port_problems

    root = plan.sysfs_root.replace("{node}", contract.node)
    devices, unmatched = nccl_devices(hca, root)
    if unmatched:
        return f"no RDMA device matches {', '.join(unmatched)} (NCCL_IB_HCA={hca}) under {root}/class/infiniband"
    found = port_problems(root, devices)
    if found:
        return f"RDMA {'; '.join(found)} (NCCL_IB_HCA={hca})"
    return None
