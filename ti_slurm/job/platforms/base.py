"""What a platform is: the cloud training platform whose contract a job's nodes see.

A mode decides the roles, the success rule and the framework wiring (DDP's master, MPI's hostfile,
TF_CONFIG, Ray's head); a platform decides what the platform calls things: the extra variables each
node gets beside the mode's, and its start-command conventions. TI's contract is the one every
mode already speaks (``MASTER_ADDR``, ``NODE_IP_SLOT_LIST``, ``TF_CONFIG``, ``HEAD_ADDR``, ...);
ModelArts adds its own on top. Standard library only: this runs in every job step.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import ClassVar

    from ti_slurm.core.plan import JobPlan
    from ti_slurm.job.modes.base import NodeContext


class Platform:
    """A platform. Subclasses set ``name`` and override what differs from TI's contract."""

    name: ClassVar[str]
    reserved_prefixes: ClassVar[tuple[str, ...]] = ()  # the platform's own variables: a spec's `env:` may not set them

    # -- at submit (pure) ------------------------------------------------------------
    def component_command(self, mode: str, component: str, command: str) -> str:
        """The start command of a component's nodes, when the platform gives it its own ("": the job's)."""
        return ""

    # -- on every node -----------------------------------------------------------------
    def node_env(self, ctx: NodeContext, contract: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
        """Variables the platform adds on this node, given the contract's (the mode's win: they are kept) and
        the environment the node's step started with."""
        return {}

    def image_mounts(self, plan: JobPlan, env: Mapping[str, str]) -> list[tuple[str, str, str]]:
        """(source, destination, ro|rw) a training image also gets: the platform's fixed paths of the job's data
        (``env`` is the node's contract); the job's own directories are mounted at their own paths anyway."""
        return []
