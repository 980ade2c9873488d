"""Site config: the file cluster admins own (``/etc/ti-slurm/config.toml``).

``TI_SLURM_CONFIG`` points elsewhere. Example::

    rdma_partitions = ["rdma"]
    port_min = 61000
    port_max = 65535
    python = "/opt/ti-slurm/bin/python"

    [nccl.rdma]            # overrides of the seed's NCCL values on one partition
    NCCL_IB_GID_INDEX = "5"
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ti_slurm.errors import SpecError

DEFAULT_PATH = "/etc/ti-slurm/config.toml"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PARTITION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+-]*|\*")


@dataclass(frozen=True)
class SiteConfig:
    """Admin settings; every key is optional."""

    rdma_partitions: tuple[str, ...] = ()
    nccl: dict[str, dict[str, str]] = field(default_factory=dict)
    port_min: int = 61000
    port_max: int = 65535
    python: str | None = None


def load_site_config(path: str | None = None) -> SiteConfig:
    """Read the site config; a missing default file means defaults."""
    explicit = path or os.environ.get("TI_SLURM_CONFIG")
    p = Path(explicit or DEFAULT_PATH)
    if not p.exists():
        if explicit:
            raise SpecError("site config", str(p), "no such file")
        return SiteConfig()
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SpecError("site config", str(p), f"cannot read: {exc}") from None
    return parse_site_config(data, str(p))


def parse_site_config(data: dict[str, object], where: str = "site config") -> SiteConfig:
    """Validate a decoded site config."""
    known = {"rdma_partitions", "nccl", "port_min", "port_max", "python"}
    for key in data:
        if key not in known:
            raise SpecError(f"{where}: {key}", data[key], f"unknown key; known keys: {', '.join(sorted(known))}")
    parts = data.get("rdma_partitions", [])
    if not isinstance(parts, list) or not all(isinstance(x, str) and _PARTITION.fullmatch(x) for x in parts):
        raise SpecError(f"{where}: rdma_partitions", parts, "expected a list of partition names")
    nccl = data.get("nccl", {})
    if not isinstance(nccl, dict):
        raise SpecError(f"{where}: nccl", nccl, "expected a table of partitions")
    for part, table in nccl.items():
        if not _PARTITION.fullmatch(part) or not isinstance(table, dict):
            raise SpecError(f"{where}: nccl.{part}", table, 'expected [nccl.<partition>] with NAME = "value" lines')
        for name, value in table.items():
            if not _ENV_NAME.fullmatch(name) or not isinstance(value, str) or "\x00" in value:
                raise SpecError(f"{where}: nccl.{part}.{name}", value, 'expected NAME = "string value"')
    lo, hi = data.get("port_min", 61000), data.get("port_max", 65535)
    if not (isinstance(lo, int) and isinstance(hi, int) and lo >= 1024 and lo + 63 <= hi <= 65535):
        raise SpecError(
            f"{where}: port_min/port_max", (lo, hi), "need 1024 <= port_min, port_min + 63 <= port_max <= 65535"
        )
    python = data.get("python")
    if python is not None and (not isinstance(python, str) or not python.startswith("/")):
        raise SpecError(f"{where}: python", python, "expected an absolute path to a Python with ti-slurm installed")
    return SiteConfig(
        rdma_partitions=tuple(parts),
        nccl={k: dict(v) for k, v in nccl.items()},
        port_min=lo,
        port_max=hi,
        python=python,
    )
