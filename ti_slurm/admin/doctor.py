"""``ti-slurm doctor``: is this node ready for every training mode?

Checks the Slurm version, that heterogeneous jobs can be scheduled (backfill),
partitions and which are RDMA, GPU gres, authentication (munge or auth/slurm), Open MPI / PMIx, the site
config, and on a compute node its RDMA devices. Prints a table; exits 1 when
something a mode needs is missing.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from ti_slurm.core.errors import TiSlurmError
from ti_slurm.slurm.text import (
    NODE_ADDRESSES_FORMAT,
    PARTITIONS_FORMAT,
    Partition,
    conf_lines,
    parse_config,
    parse_node_pairs,
    parse_partitions,
    parse_version,
    read_conf,
)


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    needed_by: str = ""  # modes that fail without it; empty: informational


def _run(argv: list[str], stdin: str | None = None) -> tuple[int, str]:
    if shutil.which(argv[0]) is None:
        return 127, f"{argv[0]} not found"
    try:
        res = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=20, check=False)
    except subprocess.TimeoutExpired:
        return 124, f"{argv[0]} timed out"
    return res.returncode, (res.stdout or res.stderr).strip()


def run_checks() -> list[Check]:
    from ti_slurm.admin.hooks import rdma_port_problems
    from ti_slurm.core.site import SiteConfig, load_site_config

    checks: list[Check] = []
    try:
        site = load_site_config()
        rdma = ", ".join(site.rdma_partitions) or "none"
        rule = f"jobs of >= {site.rdma_min_nodes} nodes with >= {site.rdma_min_gpus_per_node} GPUs each"
        checks.append(Check("site config", True, f"rdma partitions: {rdma} ({rule})"))
    except TiSlurmError as exc:
        site = SiteConfig()
        checks.append(Check("site config", False, str(exc), "all"))
    checks.append(slurm_version_check())
    code, out = _run(["scontrol", "show", "config"])
    config = parse_config(out) if code == 0 else {}
    sched = config.get("SchedulerType", "")
    ok = code == 0 and sched == "sched/backfill"
    checks.append(Check("heterogeneous jobs", ok, f"SchedulerType={sched or '?'}", "ps-worker, ray"))
    checks += partition_checks(site.rdma_partitions)
    checks.append(auth_check(config.get("AuthType", "")))
    checks.append(expedited_requeue_check(site.expedited_requeue, config.get("SlurmctldParameters", "")))
    if site.rest_url:
        checks.append(rest_url_check(site.rest_url))
    code, out = _run(["mpirun", "--version"])
    checks.append(Check("open mpi", code == 0, out.splitlines()[0] if code == 0 and out else out, "mpi, horovod"))
    code, out = _run(["srun", "--mpi=list"])
    checks.append(Check("srun mpi plugins", code == 0, " ".join(out.split())[:100]))
    checks += node_name_checks()
    checks += container_checks(site.container_runtime, config.get("SLURM_CONF", ""))
    if site.rdma_devices:
        problems = rdma_port_problems(site, socket.gethostname())
        checks.append(Check("rdma devices", not problems, ", ".join(problems) or "all ports ACTIVE", "rdma"))
    return checks


def rest_url_check(url: str) -> Check:
    """slurmrestd's address: tokens sent over plain TCP go to whoever holds that port (on a shared host, any user
    while slurmrestd is down); its Unix socket, or TLS, keeps them for slurmrestd."""
    scheme = url.partition(":")[0]
    if scheme in ("unix", "https"):
        return Check("slurmrestd address", True, f"{url}: tokens go to slurmrestd only")
    why = (f"{url}: tokens go over plain TCP to whoever holds that port (on a shared host: any user, while"
           " slurmrestd is down); serve slurmrestd on its Unix socket (rest_url = \"unix:/run/slurmrestd/"
           "slurmrestd.socket\") or over TLS (https://)")
    return Check("slurmrestd address", False, why)


def slurm_version_check() -> Check:
    code, out = _run(["sinfo", "--version"])
    if code != 0:
        return Check("slurm", False, out, "all")
    try:
        major, minor = parse_version(out)
    except TiSlurmError as exc:
        return Check("slurm", False, str(exc), "all")
    ok = (major, minor) >= (22, 5)
    return Check("slurm", ok, out + ("" if ok else " (ti-slurm needs 22.05 or newer)"), "all")


def partition_checks(rdma_partitions: Sequence[str]) -> list[Check]:
    code, out = _run(["sinfo", "-h", "-o", PARTITIONS_FORMAT])
    partitions = parse_partitions(out) if code == 0 else {}
    if not partitions:
        return [Check("partitions", False, out or "no partitions", "all")]

    def described(p: Partition) -> str:
        gres = ",".join(f"{name}:{count}" for name, count in p.max_per_node.items()) or "none"
        return f"{p.name}{' (rdma)' if p.name in rdma_partitions else ''}: {p.nodes} nodes, gres {gres}"

    checks = [
        Check("partitions", True, ", ".join(described(p) for p in partitions.values())),
        Check("gpu gres", any(p.max_gpus_per_node for p in partitions.values()), "GPU counts flow through gres", ""),
    ]
    missing = [p for p in rdma_partitions if p not in partitions]
    if missing:
        checks.append(Check("rdma partitions", False, f"site config names unknown partitions: {missing}", "rdma"))
    return checks


def node_name_checks() -> list[Check]:
    """The preflight's check: this node resolves the nodes as the controller addresses them."""
    code, out = _run(["sinfo", "-N", "-h", "-o", NODE_ADDRESSES_FORMAT])
    if code != 0 or not out:
        return []
    from ti_slurm.job.preflight import resolution_mismatch

    addresses = parse_node_pairs(out)
    by_ip = {n: a for n, a in addresses.items() if a.replace(".", "").isdigit()}
    found = resolution_mismatch(list(by_ip), by_ip, "the controller has")
    return [Check("node names", found is None, found or f"{len(by_ip)} node addresses agree", "all")]


def expedited_requeue_check(asked: bool, slurmctld_parameters: str) -> Check:
    """Slurm 25.11's expedited requeue: the site config's ``expedited_requeue`` against slurm.conf's
    ``SlurmctldParameters=enable_expedited_requeue`` (without it, Slurm refuses a job that asks for it)."""
    enabled = "enable_expedited_requeue" in slurmctld_parameters.split(",")
    if asked and not enabled:
        why = "the site config asks for it, but slurm.conf has no SlurmctldParameters=enable_expedited_requeue"
        return Check("expedited requeue", False, f"{why} (Slurm >= 25.11): Slurm refuses jobs with restarts", "restart")
    if asked:
        return Check("expedited requeue", True, "on: a requeued job may start again at once, first in the queue")
    if enabled:
        return Check("expedited requeue", True, "allowed by slurm.conf; expedited_requeue = true in the site config")
    return Check("expedited requeue", True, "off: a requeued job waits the requeue delay (cred_expire) first")


def auth_check(auth_type: str) -> Check:
    """How Slurm authenticates: munge (a round trip through munged here), or Slurm's own ``auth/slurm``."""
    if auth_type == "auth/slurm":  # 23.11+: a shared slurm.key, no munged; clients go through the daemons' SACK
        return Check("auth", True, "auth/slurm (Slurm's own; no munge needed)", "all")
    code, out = _run(["munge", "-n"])
    if code == 0:
        code, out = _run(["unmunge"], stdin=out)
    detail = "credential round trip ok" if code == 0 else out[:80]
    return Check("auth", code == 0, f"{auth_type or 'auth/munge'}: {detail}", "all")


def container_checks(default_runtime: str, slurm_conf: str = "") -> list[Check]:
    """Whether this node can run training images: enroot (runtime pyxis), Slurm's oci.conf (runtime oci).

    ``slurm_conf``: the ``slurm.conf`` Slurm reads (``scontrol show config``'s SLURM_CONF); its
    directory holds ``plugstack.conf`` and ``oci.conf``.
    """
    import os
    import shlex

    from ti_slurm.job.container import oci_conf_path

    env = dict(os.environ)
    if slurm_conf and not env.get("SLURM_CONF"):
        env["SLURM_CONF"] = slurm_conf
    mark = {default_runtime: " (the site's default runtime)"}
    code, out = _run(["enroot", "version"])
    if code == 0:
        plugin = _pyxis_plugin(os.path.join(os.path.dirname(oci_conf_path(env)), "plugstack.conf"))
        detail = f"enroot {out}; " + (f"pyxis {plugin}" if plugin else "no pyxis in plugstack (not needed by ti-slurm)")
    else:
        detail = f"{out}: specs with container runtime pyxis cannot run here"
    checks = [Check("container: pyxis", code == 0, detail + mark.get("pyxis", ""))]
    conf = oci_conf_path(env)
    run = read_conf(conf).get("RunTimeRun", "")
    program = shlex.split(run)[0] if run else ""
    usable = bool(run) and shutil.which(program) is not None
    if not run:
        detail = f"no RunTimeRun in {conf}: specs with container runtime oci cannot run here"
    elif not usable:
        detail = f"{program} (RunTimeRun in {conf}) not found"
    else:
        detail = f"{conf}: {program}"
    checks.append(Check("container: oci", usable, detail + mark.get("oci", "")))
    return checks


def _pyxis_plugin(plugstack: str) -> str:
    """The pyxis line of this node's ``plugstack`` (``plugstack.conf`` beside slurm.conf, and its includes), if any."""
    import glob

    todo, seen = [plugstack], set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for line in conf_lines(path):
            words = line.split()
            if words[:1] == ["include"] and len(words) > 1:
                todo += glob.glob(words[1])
            elif len(words) > 1 and "pyxis" in words[1]:
                return f"{words[1]} ({words[0]})"
    return ""


def format_checks(checks: list[Check]) -> str:
    lines = [f"{'check':<20} {'':<4} {'needed by':<15} detail"]
    for c in checks:
        mark = "ok" if c.ok else ("FAIL" if c.needed_by else "warn")
        lines.append(f"{c.name:<20} {mark:<4} {c.needed_by or '-':<15} {c.detail}")
    return "\n".join(lines)


def doctor() -> int:
    checks = run_checks()
    print(format_checks(checks))
    return 1 if any(not c.ok and c.needed_by for c in checks) else 0
