"""Huawei's ModelArts: its start-command conventions on top of the modes' contract.

PS-Worker: ModelArts tells each task its role with the hyperparameter ``--task_name=ps|worker``,
appended to the start command of every node of that role.
"""

from __future__ import annotations

from ti_slurm.job.platforms.base import Platform


class ModelArts(Platform):
    name = "modelarts"

    def component_command(self, mode: str, component: str, command: str) -> str:
        return f"{command} --task_name={component}" if mode == "ps-worker" else ""


PLATFORM = ModelArts()
