"""The test Slurm cluster this process talks to (ci/slurm-cluster/up): its paths, addresses and namespaces.

Two test clusters may be up at once, one per Slurm version, told apart by ``SLURM_CONF`` alone
(``ci/slurm-cluster/env VERSION``). ``up`` writes what tests need to know of a cluster beside its
``slurm.conf`` (``test-cluster.env``); this module reads it, so no test spells a path of one cluster.
"""

from __future__ import annotations

import functools
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import slurm_conf

CLUSTER_SCRIPTS = Path(__file__).resolve().parent.parent / "ci" / "slurm-cluster"


@dataclass(frozen=True)
class ClusterFacts:
    version: str  # 22.05 or 25.11
    name: str  # slurm.conf's ClusterName
    state: Path  # fault files, each node's hosts file (hosts-<node>), placeholder devices
    ctl_addr: str  # the controller's address on the cluster's bridge: every node reaches it
    ns_prefix: str  # node NODE's network namespace is /run/netns/<prefix>NODE
    log_dir: Path  # slurmctld.log, slurmd-<node>.log
    site_config: Path  # the ti-slurm site config its Prolog/Epilog and its jobs read
    stallable: Path  # the filesystem `stall-fs` freezes

    @property
    def node_addr_rx(self) -> str:
        """A regular expression for the address of one of its nodes (10\\.77\\.0\\.\\d+ on 22.05's bridge)."""
        return re.escape(self.ctl_addr.rsplit(".", 1)[0]) + r"\.\d+"

    def netns(self, node: str) -> str:
        return f"/run/netns/{self.ns_prefix}{node}"

    def hosts_file(self, node: str) -> Path:
        """Node ``node``'s own /etc/hosts (bind-mounted: edit it in place, not by replacing the file)."""
        return self.state / f"hosts-{node}"

    def node_addr(self, node: str) -> str:
        """The address the controller has for ``node`` (the host's /etc/hosts names only one cluster's nodes)."""
        out = subprocess.run(["scontrol", "show", "node", node], capture_output=True, text=True, check=True).stdout
        return out.split("NodeAddr=", 1)[1].split()[0]


@functools.cache
def this_cluster() -> ClusterFacts:
    facts_file = slurm_conf().parent / "test-cluster.env"
    facts = dict(line.split("=", 1) for line in facts_file.read_text().splitlines() if "=" in line)
    return ClusterFacts(
        version=facts["VERSION"],
        name=facts["NAME"],
        state=Path(facts["STATE"]),
        ctl_addr=facts["CTL_ADDR"],
        ns_prefix=facts["NS_PREFIX"],
        log_dir=Path(facts["LOG_DIR"]),
        site_config=Path(facts["SITE_CONFIG"]),
        stallable=Path(facts["STALLABLE"]),
    )
