"""MPI: one component, node 0 the launcher; the command runs on every node.

Each node gets a hostfile of ``<node name> slots=<N>`` lines (named by
``OMPI_MCA_orte_default_hostfile`` and, for Open MPI 5,
``PRTE_MCA_prte_default_hostfile``) and ``NODE_IP_SLOT_LIST`` (``ip:slots,...``).

Inside a Slurm allocation Open MPI maps hosts by Slurm's node names and
rejects the seed's ``-H $NODE_IP_SLOT_LIST``. So Open MPI is told to start
its daemons through ti-slurm's launch agent (``rsh`` launcher, Slurm's host
list ignored): ``ti-slurm-ssh HOST CMD`` maps an address or name of the job
to its node and runs CMD there with ``srun --overlap``. The agent is also
first on PATH as ``ssh``, so ``horovodrun`` and a plain ``ssh <ip> cmd`` reach
the job's nodes the same way.
"""

from __future__ import annotations

import os

from ti_slurm.core.paths import JobPaths
from ti_slurm.job.modes.base import Mode

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from ti_slurm.core.plan import JobPlan
    from ti_slurm.job.modes.base import NodeContext


class MPI(Mode):
    name = "mpi"
    env_names = frozenset(
        {
            "NODE_IP_SLOT_LIST",
            "OMPI_MCA_orte_default_hostfile",
            "PRTE_MCA_prte_default_hostfile",
            "OMPI_MCA_plm",
            "OMPI_MCA_plm_rsh_agent",
            "OMPI_MCA_ras",
            "PRTE_MCA_plm_ssh_agent",
            "PRTE_MCA_ras",
        }
    )

    def role(self, ctx: NodeContext) -> str:
        return "launcher" if ctx.global_index == 0 else "worker"

    def node_env(self, ctx: NodeContext) -> dict[str, str]:
        slots, addr = ctx.plan.components[0].slots, ctx.layout.addr
        paths = JobPaths(ctx.job_dir)
        agent = os.path.join(paths.agent_dir, "ssh")
        return {
            "NODE_IP_SLOT_LIST": ",".join(f"{addr(name)}:{slots}" for name in ctx.layout.nodes[0]),
            "OMPI_MCA_orte_default_hostfile": paths.hostfile,
            "PRTE_MCA_prte_default_hostfile": paths.hostfile,
            "OMPI_MCA_plm": "rsh",
            "OMPI_MCA_plm_rsh_agent": agent,
            "OMPI_MCA_ras": "^slurm",
            "PRTE_MCA_plm_ssh_agent": agent,
            "PRTE_MCA_ras": "^slurm",
            "TI_SLURM_AGENT_DIR": paths.agent_dir,  # put first on PATH, so `ssh` is the agent
        }

    def hostfile(self, ctx: NodeContext) -> str | None:
        slots = ctx.plan.components[0].slots
        return "".join(f"{name} slots={slots}\n" for name in ctx.layout.nodes[0])

    def env_bounds(self, plan: JobPlan) -> dict[str, int]:
        from ti_slurm.core.environ import env_string_size

        slots = max(c.slots for c in plan.components)
        worst = ",".join([f"255.255.255.255:{slots}"] * plan.total_nodes)
        return {"NODE_IP_SLOT_LIST": env_string_size("NODE_IP_SLOT_LIST", worst)}


MODE = MPI()
