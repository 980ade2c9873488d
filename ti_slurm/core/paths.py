"""The job directory: one definition of its layout.

Every job has a directory, ``<output_dir>/<job id>/``, on storage that every
node and the submitting machine share::

    plan.json                   the JobPlan, written by the batch script (or the local backend)
    status.jsonl                the supervisor's events: start, step-exit, end
    nodes/<component>.<n>.json  each node's own exit record (the supervisor judges by these)
    nodes/<component>.<n>.started  when its step began and handed over its command (the start timeline)
    logs/<component>-<n>.log    each node's output
    logs/<component>-<n>.usage.json  what its command used: CPU, memory, GPUs (sampled, job/usage.py)
    addresses                   every node's address, resolved once (by the supervisor) for all nodes
    checkpoint/                 TI_SLURM_CHECKPOINT_DIR unless the spec names another: kept across requeues
    stacks                      the supervisor asks every node for its Python stacks (a node hung)
    beat                        the supervisor's UDP port and secret: each node's step says it is alive there too
    heartbeat/<component>-<n>   TI_SLURM_HEARTBEAT_FILE: a command that touches it is not silent (the watchdog)
    heartbeat/<c>-<n>.progress  TI_SLURM_PROGRESS_FILE: the command writes its training step there (the watchdog)
    attempts/<k>/logs, nodes/   an earlier attempt's logs and exit records (the job was requeued)
    hostfile                    MPI and Horovod: ``<node> slots=<N>`` lines
    model/, output/             TI_SLURM_MODEL_DIR, TI_SLURM_OUTPUT_DIR (in <outputs>/<job id>/ with `outputs:`);
    output/tensorboard/         TI_SLURM_TENSORBOARD_DIR: TensorBoard event files (the console's scalar charts);
                                output/failure: the command's own reason, when it fails
    rank_table.json             NPU jobs: the Ascend rank table (RANK_TABLE_FILE), from npus/<attempt>/<n>.json,
                                each NPU node's device ids and device IPs
    bin/ssh, bin/ti-slurm-ssh   MPI and Horovod: the launch agent
    supervisor.log, .pid        the local backend's supervisor process

and beside it Slurm's own output of the batch script, ``<output_dir>/slurm-<job id>.out``. On each node,
inputs with ``stage: local`` are copied to ``<stage_dir>/ti-slurm-<uid>/<job id>/<node>/<channel>``
(:func:`stage_root`).

The sbatch template, each node's step, the supervisor, the backends and
``status`` all take the names from here. Standard library only: this runs in
every job step.
"""

from __future__ import annotations

import os

from ti_slurm.core.record import Record

PLAN = "plan.json"
STATUS = "status.jsonl"
BATCH_OUTPUT = "slurm-%j.out"  # sbatch --output's pattern, in the output directory (%j: the job id)


def runtime_dir() -> tuple[str, str | None]:
    """This user's private runtime folder (``$XDG_RUNTIME_DIR/ti-slurm-<uid>``, else in the temp dir), made when
    missing, and why it cannot be used (None when it can: a folder another user made first, or one others may
    write, is never used)."""
    import tempfile

    from ti_slurm.core.files import private_dir

    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    folder = os.path.join(base, f"ti-slurm-{os.getuid()}")
    return folder, private_dir(folder)


def user_config_path() -> str:
    """This user's own defaults: ``$XDG_CONFIG_HOME/ti-slurm/config.toml``, else ``~/.config/ti-slurm/config.toml``
    (:mod:`ti_slurm.submitting.userconfig` reads it)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "ti-slurm", "config.toml")


def state_home() -> str:
    """This user's ti-slurm state (``$XDG_STATE_HOME/ti-slurm``, else ``~/.local/state/ti-slurm``): the registry of
    jobs and sweeps, the nodes its jobs avoid."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "ti-slurm")


def stage_root(stage_dir: str, uid: int | None = None) -> str:
    """A user's folder in a node's ``stage_dir`` (private: staging refuses one that is not, and the Epilog
    removes a job's copies only inside a real folder of that user's)."""
    return os.path.join(stage_dir, f"ti-slurm-{os.getuid() if uid is None else uid}")


def node_label(component: str, n: object) -> str:
    """``<component>-<n>``: how logs and commands name the n-th node of a component."""
    return f"{component}-{n}"


class JobPaths(Record):
    """The files of one job, below ``root`` (``<output_dir>/<job id>``)."""

    root: str

    @classmethod
    def of(cls, output_dir: str, job_id: str) -> JobPaths:
        """The directory of job ``job_id`` in ``output_dir``; an id that is no job id (from a hostile or broken
        answer: ``../x``, a slash, a dot) is refused before it becomes a path."""
        plain = job_id.replace("_", "").replace("-", "").replace("+", "")
        if not (plain.isascii() and plain.isalnum() and len(job_id) <= 64 and job_id[0].isalnum()):
            from ti_slurm.core.errors import BackendError

            raise BackendError(f"the scheduler answered with a job id of {job_id[:64]!r}, which is no job id: refused")
        return cls(os.path.join(output_dir, job_id))

    def _in(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    @property
    def plan(self) -> str:
        return self._in(PLAN)

    @property
    def status(self) -> str:
        return self._in(STATUS)

    @property
    def nodes_dir(self) -> str:
        return self._in("nodes")

    def node_record(self, component: str, n: int) -> str:
        """The exit record of the n-th node of ``component``."""
        return self._in("nodes", f"{component}.{n}.json")

    def node_started(self, component: str, n: int) -> str:
        """When the n-th node's step began and handed over its command (``<step> <command>``, seconds since
        the epoch): the job's start timeline (the supervisor's ``running`` event)."""
        return self._in("nodes", f"{component}.{n}.started")

    @property
    def logs_dir(self) -> str:
        return self._in("logs")

    def node_usage(self, component: str, n: object) -> str:
        """What the n-th node's command used (CPU, memory, GPUs), sampled while it ran: beside its log."""
        return self._in("logs", f"{node_label(component, n)}.usage.json")

    def node_log(self, component: str, n: object) -> str:
        """The n-th node's log (``n`` may be srun's ``%n``, filled in per node)."""
        return self._in("logs", f"{node_label(component, n)}.log")

    @property
    def addresses(self) -> str:
        """``<name> <address>`` lines: one resolution of every node's name, shared by all nodes."""
        return self._in("addresses")

    @property
    def checkpoint_dir(self) -> str:
        return self._in("checkpoint")

    @property
    def signal(self) -> str:
        """``<attempt> <SIGNAL>``: the checkpoint signal every node's step is to pass to its command (Slurm)."""
        return self._in("signal")

    def stop_request(self, component: str) -> str:
        """``<attempt>``: the supervisor asks every node of ``component`` to stop its command (Slurm)."""
        return self._in(f"stop.{component}")

    @property
    def stacks_request(self) -> str:
        """``<attempt>``: the supervisor asks every node for its command's Python stacks (a node hung)."""
        return self._in("stacks")

    @property
    def beat(self) -> str:
        """The supervisor's port and secret for the node steps' liveness datagrams (``PORT TOKEN``)."""
        return self._in("beat")

    def heartbeat(self, component: str, n: object) -> str:
        """The file the n-th node's command may touch to show it is alive."""
        return self._in("heartbeat", node_label(component, n))

    def progress(self, component: str, n: object) -> str:
        """The file the n-th node's command may write its training step to (the watchdog's progress)."""
        return self._in("heartbeat", node_label(component, n) + ".progress")

    def attempt(self, k: int) -> JobPaths:
        """The files of earlier attempt ``k`` (its ``logs`` and ``nodes``), moved aside when the job restarted."""
        return JobPaths(self._in("attempts", str(k)))

    @property
    def hostfile(self) -> str:
        return self._in("hostfile")

    @property
    def job_id(self) -> str:
        return os.path.basename(self.root.rstrip("/"))

    def results(self, outputs: str) -> str:
        """Where the job's ``model/`` and ``output/`` go: ``<outputs>/<job id>``, or (none) the job directory."""
        return os.path.join(outputs, self.job_id) if outputs else self.root

    def tensorboard(self, outputs: str) -> str:
        """``output/tensorboard``: where the job writes TensorBoard event files (``TI_SLURM_TENSORBOARD_DIR``): the
        console draws their scalars."""
        return os.path.join(self.results(outputs), "output", "tensorboard")

    def failure(self, outputs: str) -> str:
        """``output/failure``: the text a failing command leaves as its reason (the TI platform's convention)."""
        return os.path.join(self.results(outputs), "output", "failure")

    @property
    def staging(self) -> str:
        """The folder of the nodes' staging progress: a file per node copying its inputs (``DONE TOTAL`` bytes)."""
        return self._in("staging")

    @property
    def rank_table(self) -> str:
        """RANK_TABLE_FILE: HCCL's rank table of every NPU of the job, the same file for every node."""
        return self._in("rank_table.json")

    def npu_share(self, attempt: str, n: int) -> str:
        """What the n-th NPU node found of its NPUs in this attempt (its part of the rank table)."""
        return self._in("npus", attempt, f"{n}.json")

    @property
    def agent_dir(self) -> str:
        return self._in("bin")

    @property
    def containers_dir(self) -> str:
        """Per-launch OCI bundles and imported images of the nodes' containers."""
        return self._in("containers")

    @property
    def batch_output(self) -> str:
        """Slurm's output of the batch script: ``<output_dir>/slurm-<job id>.out`` (sbatch --output), beside the job."""
        parent, job_id = os.path.split(self.root.rstrip("/"))
        return os.path.join(parent, BATCH_OUTPUT.replace("%j", job_id))

    @property
    def per_attempt(self) -> tuple[str, ...]:
        """What each attempt has of its own (its logs and exit records), moved aside when the job restarts."""
        return (self.logs_dir, self.nodes_dir)

    @property
    def supervisor_log(self) -> str:
        return self._in("supervisor.log")

    @property
    def supervisor_pid(self) -> str:
        return self._in("supervisor.pid")
