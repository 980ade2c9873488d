"""Preflight: each node checks, in milliseconds, what would otherwise hang or slow the job for hours.

Runs in each node's step before the command (``preflight: off`` in the spec
skips it); the first problem is one line naming the node and the cause, and
the node exits :data:`PREFLIGHT_EXIT` without running the command, which
fails the job at once:

- names and addresses agree: this node resolves the master's (head's) name,
  its own, and, for jobs of at most :data:`ALL_NAMES_UP_TO` nodes, every node's
  name to the address the job's contract uses (one resolution, made by the
  supervisor for every node);
- ports: the ports this node's contract hands out for it to listen on are free;
- GPUs: the GPUs Slurm bound (``CUDA_VISIBLE_DEVICES``) are as many as ``gpus_per_node``;
- RDMA: on an RDMA job, every HCA ``NCCL_IB_HCA`` selects exists and its ports are ACTIVE;
- the launcher: a command that starts with ``mpirun``, ``horovodrun``, ``msrun`` or ``torchrun`` (a
  word in command position) finds it on the command's PATH (on the bare node; a container has its own);
- the framework: where the mode has one (DDP: torch, PS-Worker: tensorflow, Ray: ray, MindSpore: mindspore)
  and the start command runs Python (``python``, ``python3``, a launcher such as ``torchrun``: its interpreter),
  that interpreter imports it: a missing package or a missing system library (``libgomp.so.1``) is one line with
  the import error's own last line and what to install, not a traceback on every node. (It costs one import,
  seconds for TensorFlow, on a bare node only.)
- with ``preflight: {allreduce: true}``, then: a one-element all-reduce across every node of
  the job (gloo; NCCL where CUDA is there) finishes within :data:`ALLREDUCE_SECONDS`.

Standard library only: this is the job path.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from collections.abc import Mapping

    from ti_slurm.core.plan import JobPlan
    from ti_slurm.job.contract import NodeContract

PREFLIGHT_EXIT = 125
ALL_NAMES_UP_TO = 256  # larger jobs check the master's name and their own (each lookup may be DNS)
ALLREDUCE_SECONDS = 60  # torch's import takes seconds on a busy node; a broken fabric never finishes
# Run by the job's Python with its site-packages (torch is the job's, not ti-slurm's).
ALLREDUCE = """
import datetime, os, sys
addr, port, rank, world, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
try:
    import torch
    import torch.distributed as dist
except ImportError:
    print("needs torch in the job's Python", file=sys.stderr, flush=True)
    os._exit(3)
backend = "nccl" if torch.cuda.is_available() else "gloo"
device = torch.device("cuda", 0) if backend == "nccl" else torch.device("cpu")
dist.init_process_group(backend, init_method=f"tcp://{addr}:{port}", rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=seconds))
value = torch.ones(1, device=device)
dist.all_reduce(value)
dist.barrier()
print(int(value.item()), flush=True)
os._exit(0 if int(value.item()) == world else 4)
"""


def problems(plan: JobPlan, component: int, contract: NodeContract, env: Mapping[str, str]) -> str | None:
    """The first preflight problem of this node, as one line; ``None`` when every check passes."""
    for check in (launcher_found, names_agree, ports_free, gpus_match, rdma_ports_active, framework_imports):
        found = check(plan, component, contract, env)
        if found:
            return f"preflight on {contract.node}: {found}"
    return None


def allreduce(plan: JobPlan, contract: NodeContract, env: Mapping[str, str]) -> str | None:
    """Every node of the job takes part in one all-reduce; ``None`` when it finished in time."""
    import subprocess
    import sys

    args = [contract.preflight_addr, str(contract.preflight_port), str(contract.rank), str(contract.world)]
    argv = [sys.executable, "-c", ALLREDUCE, *args, str(ALLREDUCE_SECONDS)]
    try:
        res = subprocess.run(argv, env=dict(env), capture_output=True, text=True, timeout=ALLREDUCE_SECONDS + 15)
    except subprocess.TimeoutExpired:
        return f"an all-reduce across the job's {contract.world} nodes did not finish within {ALLREDUCE_SECONDS}s"
    if res.returncode == 0:
        return None
    last = (res.stderr.strip().splitlines() or [f"exit {res.returncode}"])[-1]
    return f"an all-reduce across the job's {contract.world} nodes failed: {last[:200]}"


# what to install for each launcher a start command may name
LAUNCHERS = {
    "mpirun": "Open MPI (Debian: apt install openmpi-bin)",
    "horovodrun": "Horovod in the job's Python (pip install horovod)",
    "msrun": "MindSpore in the job's Python (docs/modelarts.md: its own environment)",
    "torchrun": "PyTorch in the job's Python (pip install torch)",
}


def runs(command: str, program: str) -> bool:
    """Whether shell text ``command`` runs ``program`` as a command (first, or after ``;``, ``&&``, ``|``,
    ``(``, ``exec``, ``then``, ``do``), not merely names it in an argument."""
    import re

    return re.search(rf"(?:^|[;&|(]|\bexec|\bthen|\bdo)\s*{re.escape(program)}(?:\s|$)", command, re.M) is not None


def launcher_found(plan: JobPlan, component: int, contract: NodeContract, env: Mapping[str, str]) -> str | None:
    """The launcher the start command begins a command with, missing from the command's PATH."""
    import shutil

    if plan.components[component].container is not None:
        return None  # the image has its own launcher
    command = plan.command_of(component)
    for name, what in LAUNCHERS.items():
        if runs(command, name) and shutil.which(name, path=env.get("PATH")) is None:
            return f"{name} (the start command's launcher) is not on this node's PATH: install {what}"
    return None


def names_agree(plan: JobPlan, component: int, contract: NodeContract, env: Mapping[str, str]) -> str | None:
    """This node resolves the names that matter to the addresses the whole job uses."""
    if not contract.addresses or env.get("TI_SLURM_NODE_ADDR"):
        return None  # no shared resolution (a hand-written script), or addresses pinned (the local runner)
    names = list(contract.addresses) if len(contract.addresses) <= ALL_NAMES_UP_TO else []
    names += [n for n in (contract.first_node, contract.node) if n not in names]
    return resolution_mismatch(names, contract.addresses, "the job uses")


def resolution_mismatch(names: list[str], addresses: Mapping[str, str], whose: str) -> str | None:
    """The first of ``names`` this machine resolves other than ``addresses`` says (``ti-slurm doctor`` too)."""
    import _socket  # the C module: ``socket`` would import enum, 9 ms more on every node

    for name in names:
        want = addresses.get(name)
        if want is None:
            continue
        try:
            got = _socket.gethostbyname(name)
        except OSError as exc:
            return f"cannot resolve {name} ({exc}); {whose} {want} for it"
        if got != want:
            return f"resolves {name} to {got}, but {whose} {want} for it (check /etc/hosts or DNS on this node)"
    return None


def ports_free(plan: JobPlan, component: int, contract: NodeContract, env: Mapping[str, str]) -> str | None:
    """The ports this node will listen on are free (a server binds the wildcard address)."""
    from ti_slurm.job.net import port_is_free

    for port, what in contract.listen_ports:
        if not port_is_free(port):
            return f"port {port} ({what}) is taken on this node; another program holds it"
    return None


def gpus_match(plan: JobPlan, component: int, contract: NodeContract, env: Mapping[str, str]) -> str | None:
    """Slurm bound as many GPUs as the job asked for (a node that shows 7 of 8 trains with fewer ranks)."""
    wanted = plan.components[component].gpus_per_node
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if not wanted or visible is None:
        return None
    count = len([d for d in visible.split(",") if d.strip()])
    if count != wanted:
        return f"sees {count} GPU(s) (CUDA_VISIBLE_DEVICES={visible[:60]}), the job asked for {wanted} per node"
    return None


def rdma_ports_active(plan: JobPlan, component: int, contract: NodeContract, env: Mapping[str, str]) -> str | None:
    """On an RDMA job, the HCAs NCCL will use exist and their ports are ACTIVE."""
    hca = env.get("NCCL_IB_HCA")
    if not contract.defaults or not hca or env.get("NCCL_IB_DISABLE") == "1":
        return None  # not an RDMA job here (or the user turned InfiniBand off)
    from ti_slurm.job.rdma import nccl_devices, port_problems

    root = plan.sysfs_root.replace("{node}", contract.node)
    devices, unmatched = nccl_devices(hca, root)
    if unmatched:
        return f"no RDMA device matches {', '.join(unmatched)} (NCCL_IB_HCA={hca}) under {root}/class/infiniband"
    found = port_problems(root, devices)
    if found:
        return f"RDMA {'; '.join(found)} (NCCL_IB_HCA={hca})"
    return None


# each mode's framework: the module its command's Python must import, and what to install when it does not
FRAMEWORKS = {
    "ddp": ("torch", "PyTorch in the job's Python (pip install torch; the CPU build: --index-url"
            " https://download.pytorch.org/whl/cpu)"),
    "ps-worker": ("tensorflow", "TensorFlow in the job's Python (pip install tensorflow-cpu)"),
    "ray": ("ray", "Ray in the job's Python (pip install 'ray[default]')"),
    "mindspore": ("mindspore", "MindSpore in its own environment (docs/modelarts.md)"),
}  # fmt: skip
# a system library an import names as missing: the Debian package that has it
LIBRARIES = {
    "libgomp.so.1": "libgomp1",
    "libnuma.so.1": "libnuma1",
    "libgfortran.so.5": "libgfortran5",
    "libstdc++.so.6": "libstdc++6",
    "libmpi.so.40": "libopenmpi3",
    "libGL.so.1": "libgl1",
    "libcudart.so": "the CUDA runtime (NVIDIA's packages)",
}
PYTHON_LAUNCHERS = ("torchrun", "msrun", "horovodrun", "deepspeed", "accelerate")
PREFIX_WORDS = ("exec", "then", "do", "else", "time", "nohup", "env", "command", "if", "while", "!", "{")
IMPORT_SECONDS = 120  # a cold import of TensorFlow on a busy node


def command_python(command: str, path: str | None) -> str | None:
    """The Python interpreter the start command runs first: ``python3 train.py`` its ``python3``, ``torchrun ...``
    the interpreter of torchrun's script (its ``#!`` line), each found on ``path``; None when it runs none."""
    import os
    import re
    import shutil

    for segment in re.split(r"[;&|()\n]", command):
        words = segment.split()
        while words and ("=" in words[0] or words[0] in PREFIX_WORDS):
            words = words[1:]
        if not words:
            continue
        program, name = words[0], os.path.basename(words[0])
        if re.fullmatch(r"python[0-9.]*", name):
            return shutil.which(program, path=path) if "/" not in program else program
        if name in PYTHON_LAUNCHERS:
            script = shutil.which(program, path=path)
            return shebang_python(script, path) if script else None
    return None


def inline_code(command: str) -> bool:
    """Whether the start command's first Python runs inline code (``python3 -c '...'``), which says itself what
    it imports."""
    import re

    return re.search(r"(^|[;&|(\s])(\S*/)?python[0-9.]*\s+-c\s", command) is not None


def shebang_python(script: str, path: str | None) -> str | None:
    """The Python a script's ``#!`` line names (``#!/usr/bin/env python3``: found on ``path``)."""
    import shutil

    try:
        with open(script, "rb") as fh:
            first = fh.readline(512).decode(errors="replace")
    except OSError:
        return None
    words = first.removeprefix("#!").split()
    if not first.startswith("#!") or not words:
        return None
    if words[0].endswith("/env") and len(words) > 1:
        return shutil.which(words[1], path=path)
    return words[0] if "python" in words[0] else None


def import_hint(last: str, install: str) -> str:
    """What to install: the Debian package of a missing system library the error names, else the framework."""
    for library, package in LIBRARIES.items():
        if library in last:
            return f"install {package} (Debian: apt install {package})" if " " not in package else f"install {package}"
    return f"install {install}"


LOCATE = """
import importlib.util, os, sys
spec = importlib.util.find_spec(sys.argv[1])
origin = spec.origin if spec is not None and spec.origin else ""
print(os.path.realpath(sys.executable), origin, os.stat(origin).st_mtime_ns if origin else 0, sep="\\0")
"""  # where a Python finds a package, without importing it (tens of milliseconds)


def known_good(python: str, module: str, stage_dir: str, env: Mapping[str, str]) -> str | None:
    """The marker of a good import of ``module`` by ``python`` on this node, in this user's private folder
    (:func:`ti_slurm.core.paths.stage_root`), named by the interpreter (a pyenv shim's own Python) and the
    package's file and its time: a package installed or changed since has another. None where it cannot be
    told (the import is then tried)."""
    import hashlib
    import subprocess

    from ti_slurm.core.files import private_dir
    from ti_slurm.core.paths import stage_root

    try:
        res = subprocess.run([python, "-c", LOCATE, module], env=dict(env), capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = res.stdout.strip().split("\0")
    if res.returncode != 0 or len(found) != 3 or not found[1]:
        return None
    folder = os.path.join(stage_root(stage_dir), "imports")
    if private_dir(stage_root(stage_dir)) or private_dir(folder):
        return None
    key = hashlib.sha256("\0".join([*found, module]).encode()).hexdigest()
    return os.path.join(folder, key[:32])


def framework_imports(plan: JobPlan, component: int, contract: NodeContract, env: Mapping[str, str]) -> str | None:
    """The mode's framework, where its command runs Python: imported by that Python, else why not (a good import
    is remembered on the node until the package changes: :func:`known_good`)."""
    import contextlib
    import subprocess

    if plan.mode not in FRAMEWORKS or plan.components[component].container is not None:
        return None
    module, install = FRAMEWORKS[plan.mode]
    command = plan.command_of(component)
    python = command_python(command, env.get("PATH"))
    if python is None or (inline_code(command) and module not in command):  # `python -c '...'` without it
        return None
    marker = known_good(python, module, plan.stage_dir, env)
    if marker is not None and os.path.exists(marker):
        return None  # imported here before, the package unchanged since
    try:
        res = subprocess.run([python, "-c", f"import {module}"], env=dict(env), capture_output=True, text=True,
                             timeout=IMPORT_SECONDS)  # fmt: skip
    except subprocess.TimeoutExpired:
        return f"{python} did not import {module} within {IMPORT_SECONDS} s"
    except OSError as exc:
        return f"the start command's Python {python} does not run: {exc.strerror}"
    if res.returncode == 0:
        if marker is not None:
            with contextlib.suppress(OSError):
                os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))
        return None
    last = (res.stderr.strip().splitlines() or [f"exit {res.returncode}"])[-1][:300]
    return f"{python} cannot import {module} (the {plan.mode} mode's framework): {last}; {import_hint(last, install)}"

