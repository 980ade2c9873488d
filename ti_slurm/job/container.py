"""A node's commands inside its component's training image (``container:`` in the spec).

The node's step stays on the host, outside the image: it computes the contract,
writes the hostfile, watches the command and records its exit as for a bare
node, and only the command itself (and the processes a mode starts for it, such
as Ray's daemons) runs in the image. So the image needs nothing of ti-slurm,
not even a Python: a shell at ``/bin/bash`` and the framework.

Two runtimes, the two that Slurm sites run images with:

- ``pyxis``: enroot, the engine pyxis drives (``srun --container-image``). A
  squashfs file is started directly (``enroot start IMAGE``: mounted, nothing
  unpacked and nothing left behind); an enroot-importable reference
  (``docker://...``) is imported once per node into the job directory first.
  The container shares the host's network and process table.
- ``oci``: the OCI runtime the site configured for Slurm's ``--container``
  (``oci.conf`` beside ``slurm.conf``, its ``RunTimeRun`` command line), given
  a per-launch bundle made from the image bundle's ``config.json`` as Slurm
  makes it: the image's root, the command, the environment, the mounts. The
  container shares the host's process table (``/proc`` bound in), so signals
  reach the command as on a bare node.

Every launch gets the job directory (and the checkpoint directory, and the
job's workdir unless ``container.workdir`` names another) mounted at the same
path, the spec's ``mounts``, and the command's environment except the host's
search paths (``PATH``, ``LD_LIBRARY_PATH``, ``PYTHONPATH``, ...): the image's
own apply, with the launch agent's directory first on ``PATH`` where the mode has one.
"""

from __future__ import annotations

import os

from ti_slurm.core.choices import CONTAINER_RUNTIMES
from ti_slurm.core.errors import ContainerError
from ti_slurm.core.paths import JobPaths, node_label
from ti_slurm.slurm.text import read_conf

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from collections.abc import Mapping

    from ti_slurm.core.plan import Container, JobPlan

# the host's search paths and shell state: the image has its own
HOST_ONLY = frozenset(
    (
        "PATH LD_LIBRARY_PATH LD_PRELOAD PYTHONPATH PYTHONHOME PYTHONSTARTUP PYTHONUSERBASE VIRTUAL_ENV "
        "CONDA_PREFIX CONDA_DEFAULT_ENV CONDA_EXE CONDA_PYTHON_EXE CONDA_SHLVL MANPATH INFOPATH CPATH "
        "LIBRARY_PATH PKG_CONFIG_PATH PWD OLDPWD SHLVL _"
    ).split()
)


# The shell that is the container's first process. The image's files live as long as it does (enroot ties its
# squashfuse to it), so it outlives its command: a stop signal ends it only once the command has exited (with the
# code bash reports for that signal), the checkpoint signal not at all; and after either it waits for every other
# process of the container (torch's launcher dies of the checkpoint signal while its workers, in sessions of their
# own, are still saving). Bash builtins only: the image may have nothing else.
HOLDER = r"""__ti_slurm_wait() {
  local p argv0; exec {__ti_slurm_fd}<> <(:)
  while :; do
    for p in /proc/[0-9]*; do
      [[ ${p#/proc/} != "$$" && $p/ns/mnt -ef /proc/$$/ns/mnt ]] || continue
      IFS= read -r -d '' argv0 < "$p/cmdline" 2>/dev/null || continue
      case ${argv0##*/} in fuse-shim|squashfuse*|fuse-overlayfs) continue ;; esac
      read -rt 0.2 -u "$__ti_slurm_fd"; continue 2
    done
    break
  done
}
trap '__ti_slurm_rc=$?; [[ -z ${__ti_slurm_signalled-} ]] || __ti_slurm_wait; exit $__ti_slurm_rc' EXIT
trap '__ti_slurm_signalled=1; exit 143' TERM; trap '__ti_slurm_signalled=1; exit 130' INT
trap '__ti_slurm_signalled=1; exit 129' HUP"""


def image_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables a command in the image gets: the node's, without the host's search paths."""
    return {k: v for k, v in env.items() if k not in HOST_ONLY}


def own_dirs(plan: JobPlan, container: Container, job_dir: str, env: Mapping[str, str]) -> list[str]:
    """The job's own directories, mounted at their own paths: the job directory, the checkpoint directory,
    Ray's node directory (its daemons and the driver, each a launch and so a container of its own, share its
    sockets), and the job's workdir unless ``container.workdir`` names another."""
    own = [os.path.abspath(job_dir)]
    shares = ("TI_SLURM_CHECKPOINT_DIR", "TI_SLURM_RAY_TEMP_DIR", "TI_SLURM_MODEL_DIR", "TI_SLURM_OUTPUT_DIR")
    for shared in (env.get(name, "") for name in shares):
        if shared and not any(_inside(shared, d) for d in own):
            own.append(shared)
    if not container.workdir and plan.workdir and not any(_inside(plan.workdir, d) for d in own):
        own.append(plan.workdir)
    return own


def data_mounts(plan: JobPlan, env: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """The code snapshot and the input channels at their own paths, read-only (so ``TI_SLURM_CODE_DIR`` and
    ``TI_SLURM_INPUT_*`` hold in the image too), then the platform's own places for them (TI: ``/opt/ml``)."""
    from ti_slurm.job.platforms import get_platform

    mounts = [(os.path.dirname(plan.code_dir),) * 2 + ("ro",)] if plan.code_dir else []
    for name in plan.inputs:
        path = env[f"TI_SLURM_INPUT_{name.upper()}"]
        mounts.append((path, path, "ro"))
    return mounts + get_platform(plan.platform).image_mounts(plan, env)


def split_mount(text: str) -> tuple[str, str, str]:
    """``SRC:DST[:ro|rw]`` as (source, destination, option; rw when none is given). The spec checks the rest."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not all(parts[:2]):
        raise ValueError(f"{text!r} is not SRC:DST or SRC:DST:ro (paths may not hold ':')")
    return parts[0], parts[1], parts[2] if len(parts) == 3 else "rw"


def spec_mounts(plan: JobPlan, container: Container) -> list[tuple[str, str, str]]:
    """(source, destination, ro|rw) of the spec's ``mounts`` (a relative source: from the workdir)."""
    out = []
    for text in container.mounts:
        src, dst, option = split_mount(text)
        src = src if src.startswith("/") else os.path.join(plan.workdir or os.getcwd(), src)
        out.append((os.path.normpath(src), dst, option))
    return out


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


class ImageRun:
    """One node's way into its component's image: checks, the argv of each launch, cleanup."""

    def __init__(
        self, plan: JobPlan, component: int, index: int | str, node: str, job_dir: str, env: Mapping[str, str]
    ) -> None:
        container = plan.components[component].container
        if container is None:
            raise ValueError("component has no container")
        self.plan, self.container, self.node, self.env = plan, container, node, env
        self.runtime = container.runtime or _site_runtime()
        self.paths = JobPaths(job_dir)
        self.label = node_label(plan.components[component].name, index)
        self.workdir = container.workdir or plan.workdir or "/"
        self.own = own_dirs(plan, container, job_dir, env)
        self.mounts = [(d, d, "rw") for d in self.own] + data_mounts(plan, env) + spec_mounts(plan, container)
        image = container.image
        if "://" not in image and not image.startswith("/"):
            image = os.path.join(plan.workdir or os.getcwd(), image)
        self.image = image
        self.launches = 0
        self.oci_conf: dict[str, str] = {}

    # -- before the command -------------------------------------------------------
    def check(self) -> str | None:
        """Why this node cannot run the image (runtime, image, mounts), or None; only looks, in milliseconds."""
        try:
            if self.runtime not in CONTAINER_RUNTIMES:
                raise ContainerError(f"runtime {self.runtime!r} is not one of {', '.join(CONTAINER_RUNTIMES)}")
            if self.runtime == "pyxis":
                self._check_pyxis()
            else:
                self._check_oci()
            for src, _dst, _option in spec_mounts(self.plan, self.container):
                if not os.path.exists(src):
                    raise ContainerError(f"mount {src}: no such file or directory on this node")
        except ContainerError as exc:
            return f"container on {self.node}: {exc}"
        return None

    def _check_pyxis(self) -> None:
        import shutil

        if shutil.which("enroot", path=self.env.get("PATH", os.defpath)) is None:
            raise ContainerError("runtime pyxis needs enroot, which is not on this node's PATH")
        if "://" in self.image:
            return
        if not os.path.isfile(self.image):
            raise ContainerError(f"image {self.image}: no such file (pyxis takes a squashfs file or docker://...)")
        if not os.access(self.image, os.R_OK):
            raise ContainerError(f"image {self.image}: not readable")

    def _check_oci(self) -> None:
        import shlex
        import shutil

        conf = oci_conf_path(self.env)
        self.oci_conf = read_conf(conf)
        run = self.oci_conf.get("RunTimeRun")
        if not run:
            raise ContainerError(f"runtime oci needs RunTimeRun in {conf} (Slurm's OCI containers are not set up)")
        program = shlex.split(run)[0]
        if shutil.which(program, path=self.env.get("PATH", os.defpath)) is None:
            raise ContainerError(f"runtime oci: {program} (RunTimeRun in {conf}) is not on this node")
        for part in ("config.json", "rootfs"):
            if not os.path.exists(os.path.join(self.image, part)):
                raise ContainerError(f"image {self.image}: no {part} (oci takes an OCI bundle directory)")

    # -- each launch --------------------------------------------------------------
    def argv(self, command: str) -> list[str]:
        """The argv that runs ``bash -c command`` in the image, from its workdir, with the node's environment."""
        for path in self.own:  # the job's own: Ray's node directory is new
            os.makedirs(path, exist_ok=True)
        self.launches += 1
        if self.runtime == "pyxis":
            return self._enroot_argv(command)
        return self._oci_argv(command)

    def _script(self, command: str) -> str:
        """The shell text run in the image: the holder (:data:`HOLDER`), into the workdir, the launch agent first
        on PATH, then the command."""
        from ti_slurm.core.shell import shell_quote

        lines = [HOLDER]
        if self.plan.checkpoint_signal:
            lines.append(f"trap __ti_slurm_signalled=1 {self.plan.checkpoint_signal}")
        lines.append(f"cd -- {shell_quote(self.workdir)} || exit 1")
        agent = self.env.get("TI_SLURM_AGENT_DIR")
        if agent:
            lines.append(f'PATH={shell_quote(agent)}:"$PATH"')
        return "\n".join([*lines, command])

    def _enroot_argv(self, command: str) -> list[str]:
        image = self.image
        if "://" in image:
            image = self._import()
        argv = ["enroot", "start"]
        for src, dst, option in self.mounts:
            argv += ["--mount", f"{src}:{dst}:none:x-create=auto,rbind,{option}"]
        for name in image_env(self.env):
            argv += ["--env", name]  # from enroot's own environment: values never pass through a command line
        return [*argv, image, "/bin/bash", "-c", self._script(command)]

    def _import(self) -> str:
        """An enroot reference imported into this node's squashfs (once per node and attempt)."""
        import subprocess

        target = os.path.join(self.paths.containers_dir, f"{self.label}.sqsh")
        if not os.path.exists(target):
            os.makedirs(self.paths.containers_dir, exist_ok=True)
            done = subprocess.run(
                ["enroot", "import", "--output", target, self.image], capture_output=True, text=True, check=False
            )
            if done.returncode != 0:
                why = (done.stderr.strip().splitlines() or ["failed"])[-1]
                raise ContainerError(f"container on {self.node}: enroot import {self.image}: {why}")
        return target

    def _oci_argv(self, command: str) -> list[str]:
        import json

        with open(os.path.join(self.image, "config.json"), encoding="utf-8") as fh:
            config = json.load(fh)
        process = config.setdefault("process", {})
        own = image_env(self.env)
        process["env"] = [e for e in process.get("env", []) if e.split("=", 1)[0] not in own]
        process["env"] += [f"{k}={v}" for k, v in own.items()]
        process["args"] = ["/bin/bash", "-c", self._script(command)]
        process["cwd"] = "/"
        process["terminal"] = False
        config.setdefault("root", {})["path"] = os.path.join(self.image, "rootfs")
        linux = config.setdefault("linux", {})
        # the host's process table, as with enroot: the node's step signals and watches the command's processes
        linux["namespaces"] = [n for n in linux.get("namespaces", []) if n.get("type") != "pid"]
        binds = [m for m in config.get("mounts", []) if m.get("destination") != "/proc"]
        binds.insert(0, {"destination": "/proc", "type": "none", "source": "/proc", "options": ["rbind"]})
        for src, dst, option in self.mounts:
            binds.append({"destination": dst, "type": "none", "source": src, "options": ["rbind", option]})
        config["mounts"] = binds
        config.pop("hostname", None)
        bundle = self._bundle(self.launches)
        os.makedirs(bundle, exist_ok=True)
        with open(os.path.join(bundle, "config.json"), "w", encoding="utf-8") as fh:
            json.dump(config, fh)
        return self._oci_command("RunTimeRun", self.launches)

    # -- after the command --------------------------------------------------------
    def _bundle(self, launch: int) -> str:
        return os.path.join(self.paths.containers_dir, f"{self.label}.{launch}")

    def _oci_command(self, key: str, launch: int) -> list[str]:
        """oci.conf's ``key`` command line for launch number ``launch``, its ``%`` patterns filled in."""
        import shlex

        values = {
            "%%": "%",
            "%b": self._bundle(launch),
            "%j": self.env.get("SLURM_JOB_ID", "0"),
            "%n": self.node,
            "%r": os.path.join(self.image, "rootfs"),
            "%s": self.env.get("SLURM_STEP_ID", "0"),
            "%t": f"{self.env.get('SLURM_PROCID', '0')}x{launch}",  # one container per launch
            "%u": self.env.get("USER") or _user(),
            "%U": str(os.getuid()),
            "%m": self.paths.containers_dir,
        }
        self.oci_conf = self.oci_conf or read_conf(oci_conf_path(self.env))  # check() reads it first
        return [_fill(word, values) for word in shlex.split(self.oci_conf[key])]

    # -- after the command --------------------------------------------------------
    def cleanup(self) -> None:
        """Remove what the launches left: OCI containers (RunTimeKill, RunTimeDelete) and their bundles."""
        if self.runtime != "oci" or not self.launches:
            return
        import shutil
        import subprocess

        for launch in range(1, self.launches + 1):
            for key in ("RunTimeKill", "RunTimeDelete"):
                if self.oci_conf.get(key):
                    subprocess.run(self._oci_command(key, launch), capture_output=True, check=False, timeout=30)
            shutil.rmtree(self._bundle(launch), ignore_errors=True)


def _fill(word: str, values: Mapping[str, str]) -> str:
    """``word`` with oci.conf's ``%x`` patterns replaced."""
    out, i = [], 0
    while i < len(word):
        pair = word[i : i + 2]
        if pair in values:
            out.append(values[pair])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return "".join(out)


def _user() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def _site_runtime() -> str:
    from ti_slurm.core.site import load_site_config

    return load_site_config().container_runtime


def oci_conf_path(env: Mapping[str, str]) -> str:
    """Slurm's ``oci.conf``: beside the ``slurm.conf`` this node's Slurm reads."""
    return os.path.join(os.path.dirname(env.get("SLURM_CONF") or "/etc/slurm/slurm.conf"), "oci.conf")
