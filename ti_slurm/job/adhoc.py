"""Hand-written sbatch scripts (``ti-slurm exec`` and ``ti-slurm env``): a plan without a spec.

The mode and GPUs per node come from flags (or ``SLURM_GPUS_ON_NODE``), the
nodes of each component from this step's Slurm variables, and the job
directory from the Prolog's or a private per-user one.
"""

from __future__ import annotations

import os
import sys

from ti_slurm.core.errors import ContractError
from ti_slurm.core.hostlist import expand, is_number
from ti_slurm.core.plan import Component, JobPlan
from ti_slurm.job.modes import get_mode

MAX_HET_COMPONENTS = 128  # Slurm's MAX_HET_JOB_COMPONENTS
MAX_GPUS_PER_NODE = 64  # as the spec's gpus_per_node

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from collections.abc import Mapping


def adhoc_plan(
    mode: str,
    env: Mapping[str, str],
    gpus_per_node: int | None,
    master_port: int | None,
    rdma: str,
    component: int | None,
    rendezvous_timeout: int,
) -> tuple[JobPlan, int]:
    """A plan and this step's component index, from flags and this step's Slurm variables."""
    from ti_slurm.core.site import load_site_config

    if gpus_per_node is None:
        on_node = env.get("SLURM_GPUS_ON_NODE", "0")
        gpus_per_node = int(on_node) if is_number(on_node) else 0
        if gpus_per_node > MAX_GPUS_PER_NODE:
            why = f"more than {MAX_GPUS_PER_NODE} GPUs per node (pass --gpus-per-node)"
            raise ContractError(f"SLURM_GPUS_ON_NODE={on_node[:40]!r}: {why}")
    counts, component = component_counts(env, component)
    names = get_mode(mode).component_names(len(counts))
    if len(names) != len(counts):
        raise ContractError(f"mode {mode} needs {len(names)} component(s); this job has {len(counts)}")
    site = load_site_config()
    components = tuple(Component(n, c, gpus_per_node, 1) for n, c in zip(names, counts, strict=True))
    plan = JobPlan(
        name=env.get("SLURM_JOB_NAME", "ti-slurm"),
        mode=mode,
        command="",
        components=components,
        rdma=rdma,
        master_port=master_port,
        **site.plan_fields(),
        rendezvous_timeout=rendezvous_timeout,
        python=site.python or sys.executable,
    )
    return plan, component


def component_counts(env: Mapping[str, str], component: int | None) -> tuple[list[int], int]:
    """Nodes per component of this step's job (from Slurm's node lists), and this step's component."""
    het_size = env.get("SLURM_HET_SIZE", "1") or "1"
    if not is_number(het_size):
        raise ContractError(f"SLURM_HET_SIZE={het_size[:40]!r} is not a number")
    het = int(het_size)
    if het > MAX_HET_COMPONENTS:
        raise ContractError(f"SLURM_HET_SIZE={het_size[:40]!r}: Slurm makes at most {MAX_HET_COMPONENTS} components")
    if het > 1:
        lists = [env.get(f"SLURM_JOB_NODELIST_HET_GROUP_{c}", "") for c in range(het)]
        unset = [c for c, text in enumerate(lists) if not text]
        if unset:
            raise ContractError(
                f"SLURM_JOB_NODELIST_HET_GROUP_{unset[0]} is not set (SLURM_HET_SIZE={het}): run this inside a "
                "step of the heterogeneous job"
            )
        counts = [len(expand(text)) for text in lists]
        if component is None:  # inside `srun --het-group=N`, SLURM_JOB_NODELIST is component N's list
            matches = [c for c, text in enumerate(lists) if text == env.get("SLURM_JOB_NODELIST")]
            if len(matches) != 1:
                raise ContractError("cannot tell this step's component: pass --group N")
            component = matches[0]
    else:
        nodelist = env.get("SLURM_JOB_NODELIST")
        if not nodelist:
            raise ContractError("SLURM_JOB_NODELIST is not set: run this inside a Slurm job (srun ti-slurm ...)")
        counts = [len(expand(nodelist))]
        component = component or 0
    return counts, component


def adhoc_job_dir(env: Mapping[str, str]) -> str:
    """Where ``ti-slurm exec``/``env`` put the job's files.

    ``TI_SLURM_JOB_DIR`` if set; else the directory the site's Prolog made
    (``<job_dir_base>/<job id>``, when it exists and is this user's); else a
    private per-user, per-job directory under ``$TMPDIR``.
    """
    if env.get("TI_SLURM_JOB_DIR"):
        return _usable("TI_SLURM_JOB_DIR", env["TI_SLURM_JOB_DIR"])

    job_id = env.get("SLURM_JOB_ID", "")
    if not is_number(job_id):
        raise ContractError(f"SLURM_JOB_ID={job_id[:40]!r} is not a job id: run this inside a Slurm job step")
    import stat
    import tempfile

    from ti_slurm.core.site import load_site_config

    prolog_dir = os.path.join(load_site_config().job_dir_base, job_id)
    try:
        info = os.lstat(prolog_dir)
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077:
            return prolog_dir
    except OSError:
        pass

    from ti_slurm.core.files import private_dir

    tmp = env.get("TMPDIR") or tempfile.gettempdir()
    base = os.path.join(tmp, f"ti-slurm-{os.getuid()}")
    refused = private_dir(base)  # a TMPDIR that does not exist on this node, or a folder another user made
    if refused:
        raise ContractError(f"TMPDIR={tmp!r}: cannot hold the job's files: {refused}")
    return _usable("TMPDIR", os.path.join(base, job_id))


def _usable(variable: str, job_dir: str) -> str:
    """``job_dir``, made if missing; one line naming ``variable`` when it cannot hold the job's files."""
    try:
        os.makedirs(job_dir, mode=0o700, exist_ok=True)
        if not os.access(job_dir, os.W_OK | os.X_OK):
            raise PermissionError(13, "not writable")
    except OSError as exc:
        raise ContractError(f"{variable}: {job_dir!r} cannot hold the job's files ({exc.strerror})") from None
    return job_dir
