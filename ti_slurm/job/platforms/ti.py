"""Tencent Cloud's TI platform: the contract every mode speaks as it is, and, in a training image, the job's
data where TI's containers have it: the code snapshot at ``/opt/ml/code``, each input channel at
``/opt/ml/input/data/<channel>``, the model and output directories at ``/opt/ml/model`` and ``/opt/ml/output``
(so the seeds' ``cd /opt/ml/code; python job.py`` and ``--data-dir /opt/ml/input/data`` work as written)."""

from __future__ import annotations

from ti_slurm.job.platforms.base import Platform

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from collections.abc import Mapping

    from ti_slurm.core.plan import JobPlan

ML = "/opt/ml"


class TI(Platform):
    name = "ti"

    def image_mounts(self, plan: JobPlan, env: Mapping[str, str]) -> list[tuple[str, str, str]]:
        mounts = [(plan.code_dir, f"{ML}/code", "ro")] if plan.code_dir else []
        mounts += [(env[f"TI_SLURM_INPUT_{name.upper()}"], f"{ML}/input/data/{name}", "ro") for name in plan.inputs]
        results = {"TI_SLURM_MODEL_DIR": f"{ML}/model", "TI_SLURM_OUTPUT_DIR": f"{ML}/output"}
        return mounts + [(env[name], place, "rw") for name, place in results.items() if name in env]


PLATFORM = TI()
