"""Staging, as ModelArts copies data before training: each input channel with ``stage: local`` is copied to
this node's local disk (the site's ``stage_dir``) before the command starts, so no rank meets the others in
``init_process_group`` while another is still copying; ``TI_SLURM_INPUT_<CHANNEL>`` names the copy. Every
node copies its own at once. A copy that fails ends the node before its command, naming the node and the
path; the node's copies are removed when its step ends. Standard library only: this runs in job steps.
"""

from __future__ import annotations

import os
import shutil

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from collections.abc import Mapping

    from ti_slurm.core.plan import JobPlan


def stage(plan: JobPlan, node: str, env: Mapping[str, str]) -> str | None:
    """Copy every staged channel to where this node's contract says it is; a problem as one line."""
    for name in plan.staged:
        source, target = plan.inputs[name], env[f"TI_SLURM_INPUT_{name.upper()}"]
        partial = f"{target}.part"
        try:
            shutil.rmtree(partial, ignore_errors=True)
            os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
            if os.path.isdir(source):
                shutil.copytree(source, partial, symlinks=True)
            else:
                shutil.copy2(source, partial)
            os.replace(partial, target)
        except OSError as exc:
            shutil.rmtree(partial, ignore_errors=True)
            why = exc.strerror or str(exc)
            return f"staging on {node}: cannot copy input {name} ({source}) to {os.path.dirname(target)}: {why}"
    return None


def unstage(plan: JobPlan, env: Mapping[str, str]) -> None:
    """Remove this node's staged copies (and the job's folder for them, once empty)."""
    for name in plan.staged:
        target = env[f"TI_SLURM_INPUT_{name.upper()}"]
        for path in (target, f"{target}.part"):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.lexists(path):
                os.unlink(path)
        for folder in (os.path.dirname(target), os.path.dirname(os.path.dirname(target))):  # node's, job's
            try:
                os.rmdir(folder)
            except OSError:
                break  # another channel's or another node step's copy is still there
