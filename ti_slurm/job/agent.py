"""Launch agent: ``ssh``-compatible entry that reaches a job's nodes through Slurm.

Open MPI (``OMPI_MCA_plm_rsh_agent``), ``horovodrun`` and plain ``ssh <ip> cmd``
call it as they would call ssh. It finds the target among the job's nodes
(by name or address, from the job's hostfile and ``NODE_IP_SLOT_LIST``) and
runs the command there with ``srun --overlap``, inside the job's allocation:
no sshd, no keys. A host outside the job goes to the real ``ssh``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

# ssh options that take an argument (from ssh(1)); the others are flags.
_WITH_ARG = set("BbcDEeFIiJLlmOoPpQRSWw")
_REAL_SSH = "/usr/bin/ssh"
# Step-shaping variables of the calling step that would leak into the new step.
_STEP_VARS = (
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "SLURM_NNODES",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE",
    "SLURM_DISTRIBUTION",
    "SLURM_CPU_BIND",
    "SLURM_CPU_BIND_LIST",
    "SLURM_CPU_BIND_TYPE",
    "SLURM_CPU_BIND_VERBOSE",
    "SLURM_STEP_NUM_NODES",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_STEP_NODELIST",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_NODELIST",
    "SLURM_GPUS_ON_NODE",
    "SLURM_EXPORT_ENV",
)


def _options_end(argv: list[str], i: int) -> int:
    """The index of the first word at or after ``i`` that is not an ssh option or its argument."""
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return i + 1
        if not arg.startswith("-") or arg == "-":
            return i
        flags = arg[1:]
        for j, ch in enumerate(flags):
            if ch in _WITH_ARG:
                if j == len(flags) - 1:
                    i += 1  # the argument is the next word
                break
        i += 1
    return i


def parse_ssh_args(argv: list[str]) -> tuple[str, list[str]]:
    """Return (host, command words) from an ssh command line.

    Like OpenSSH, options may also follow the host (``ssh host -p 22 cmd``, as
    horovodrun writes it); the command starts at the first word after that.
    """
    i = _options_end(argv, 0)
    if i >= len(argv):
        from ti_slurm.core.errors import AgentError

        raise AgentError("ti-slurm-ssh: no host given")
    host = argv[i].rsplit("@", 1)[-1]
    return host, argv[_options_end(argv, i + 1) :]


def job_nodes(env: Mapping[str, str]) -> dict[str, str]:
    """Map every name and address of the job's nodes to the Slurm node name."""
    names: list[str] = []
    hostfile = env.get("OMPI_MCA_orte_default_hostfile")
    if hostfile and os.path.exists(hostfile):
        with open(hostfile) as fh:
            names = [line.split()[0] for line in fh if line.strip()]
    mapping = {n: n for n in names}
    ips = [item.rsplit(":", 1)[0] for item in env.get("NODE_IP_SLOT_LIST", "").split(",") if item]
    if len(ips) == len(names):
        mapping.update(zip(ips, names, strict=True))
    return mapping


def remote_argv(words: list[str], env: Mapping[str, str]) -> list[str]:
    """What runs on the target node: ``words`` joined as ssh joins them, by ``sh``, or in the node's image."""
    command = " ".join(words) if words else "exec ${SHELL:-/bin/sh} -l"
    if env.get("TI_SLURM_AGENT_IN_IMAGE") == "1":
        from ti_slurm.job import main_command

        return main_command(sys.executable, "in-image", env["TI_SLURM_JOB_DIR"], env["TI_SLURM_COMPONENT"], command)
    return ["/bin/sh", "-c", command]


def srun_command(node: str, words: list[str], env: Mapping[str, str]) -> list[str]:
    """The srun line that runs ``words`` on ``node``."""
    job = env.get("SLURM_JOB_ID", "")
    return [
        "srun",
        "--overlap",
        f"--jobid={job}",
        "--nodes=1",
        "--ntasks=1",
        f"--nodelist={node}",
        "--kill-on-bad-exit=0",
        "--quiet",
        *remote_argv(words, env),
    ]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    host, words = parse_ssh_args(argv)
    env = dict(os.environ)
    node = job_nodes(env).get(host)
    if node is None and host not in ("localhost", "127.0.0.1"):
        os.execv(_REAL_SSH, [_REAL_SSH, *argv])
    if env.get("TI_SLURM_LOCAL") == "1" or node is None:
        argv = remote_argv(words, env)
        os.execvpe(argv[0], argv, env)
    for name in _STEP_VARS:
        env.pop(name, None)
    cmd = srun_command(node, words, env)
    os.execvpe(cmd[0], cmd, env)
    return 127  # not reached
