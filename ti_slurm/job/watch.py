"""What each node's step watches while its command runs: its own liveness, silence, and stop requests.

- Liveness: the step rewrites ``heartbeat/<component>-<n>.step`` every
  :data:`ALIVE_EVERY` seconds, and sends the supervisor a datagram as often
  (:mod:`ti_slurm.job.beat`: a stalled shared filesystem makes every file late
  at once). A node whose step fell silent on both and left no exit record was
  lost (its node, or its step, died): the supervisor tells that from a failed
  command without waiting for Slurm's ``SlurmdTimeout``.
- Silence (the spec's ``watchdog: {silence: N}``): a command that wrote nothing
  to its log and did not touch ``TI_SLURM_HEARTBEAT_FILE`` for N seconds is
  hung. Its Python stacks go to its log (``py-spy dump`` when installed, else
  SIGABRT, on which ``PYTHONFAULTHANDLER=1`` prints every thread's stack), then
  it is stopped and its node recorded as hung.
- Progress (``watchdog: {progress: true}``): a command that writes its training step to
  ``TI_SLURM_PROGRESS_FILE`` is hung when the step has not advanced for max(3x the 99th percentile of its
  step intervals so far, :data:`PROGRESS_FLOOR` s), once it has stepped :data:`PROGRESS_LEARN` times: long
  before NCCL's own 30-minute timeout, whatever the command prints. Then as silence: stacks, stop, recorded.
- Stacks on request: once one node hung, the supervisor asks every node for its stacks (``stacks``, see
  :mod:`ti_slurm.job.supervisor.stacks`, which groups them), so the odd node stands out.
- Stop requests: the supervisor stops a component's nodes by writing
  ``stop.<component>`` (see :func:`watch_stop_request`), not by signalling
  ``srun``: Slurm 25.11 cancels a whole heterogeneous job when one of its
  ``srun`` gets SIGTERM, and an ``srun`` kills its tasks at once (no grace).

Standard library only: this runs on every node.
"""

from __future__ import annotations

import os
import time

from ti_slurm.core.paths import JobPaths
from ti_slurm.job.beat import ALIVE_EVERY, start_beating

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    import threading

    from ti_slurm.job.modes.base import NodeRunView
    from ti_slurm.job.usage import UsageSampler

HUNG_EXIT = 124  # a hung command's exit code (as timeout(1) reports a command it stopped)
PROGRESS_FLOOR = 60.0  # seconds without a step that are never a hang
PROGRESS_FACTOR = 3.0  # ... nor less than this many times the 99th percentile step interval
PROGRESS_LEARN = 3  # steps seen before the watchdog judges (a first step may come after a long start)
STACKS_MARK = "the stacks of its processes follow"  # the line before a node's stack dump in its log


def note_first_step(path: str, step: str, at: float) -> None:
    """Write ``<progress file>.first``: this attempt's first step and when it came."""
    try:
        fd = os.open(path + ".first", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        os.write(fd, f"{step} {at:.3f}\n".encode())
        os.close(fd)
    except OSError:
        pass


def read_progress(path: str, since: float) -> dict[str, object]:
    """What a node's progress files say of the attempt that began at ``since``: its first and last step and when
    ({} when it reported none)."""
    out: dict[str, object] = {}
    last_at = mtime(path)
    try:
        if last_at >= since:
            with open(path) as fh:
                out.update(last=fh.read(64).strip(), last_at=round(last_at, 3))
        with open(path + ".first") as fh:
            step, at = fh.read(128).split()
        if float(at) >= since:
            out.update(first=step, first_at=round(float(at), 3))
    except (OSError, ValueError):
        pass
    return out


class ProgressWatch:
    """One node's training steps, as its command writes them to ``TI_SLURM_PROGRESS_FILE`` (``what``: how the
    hang is worded; :class:`ti_slurm.job.tensorboard.TensorBoardWatch` reads the job's TensorBoard steps)."""

    what = "step"

    def __init__(self, path: str, started: float = 0.0) -> None:
        self.path, self.seen, self.started = path, 0.0, started  # a write before ``started``: an earlier attempt's
        self.step: str = ""
        self.stepped_at = 0.0  # when the step last advanced (time.time())
        self.intervals: list[float] = []  # seconds between steps, the latest 256

    def look(self, now: float) -> str:
        """Why the command is hung ("" while it steps, or before it has stepped :data:`PROGRESS_LEARN` times)."""
        step = self.read_step()
        if step is not None and step != self.step:
            if self.stepped_at:
                self.intervals = [*self.intervals[-255:], now - self.stepped_at]
            else:  # this attempt's first step: where it resumed, and when (goodput: core/goodput.py)
                self.first(step, self.seen or now)  # when it was written
            self.step, self.stepped_at = step, now
        if len(self.intervals) < PROGRESS_LEARN:
            return ""
        ordered = sorted(self.intervals)
        p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
        limit = max(PROGRESS_FACTOR * p99, PROGRESS_FLOOR)
        if now - self.stepped_at < limit:
            return ""
        return (
            f"hung: no {self.what} for {now - self.stepped_at:.0f} s after step {self.step} (its steps came every"
            f" {ordered[len(ordered) // 2]:.1f} s; the watchdog's limit {limit:.0f} s)"
        )

    def read_step(self) -> str | None:
        """The step the file holds, when it was written again since the last look (None: not)."""
        changed = mtime(self.path)
        if not changed or changed == self.seen or changed < self.started:
            return None
        self.seen = changed
        try:
            with open(self.path) as fh:
                return fh.read(64).strip()
        except OSError:
            return None

    def first(self, step: str, at: float) -> None:
        note_first_step(self.path, step, at)


STOP_POLL = 0.25  # seconds between a node step's looks for the supervisor's stop request


def watch_stop_request(path: str, attempt: str) -> threading.Event:
    """From now on, SIGTERM this step's main thread once ``path`` holds ``attempt``: the step then stops as
    it does when Slurm signals it (its command gets SIGTERM, then SIGKILL after the spec's grace).
    The event returned is set once the request came."""
    import signal
    import threading

    main = threading.main_thread().ident or 0
    requested = threading.Event()

    def look() -> None:
        while True:
            try:
                with open(path) as fh:
                    if fh.read().strip() == attempt:
                        requested.set()
                        signal.pthread_kill(main, signal.SIGTERM)  # interrupts a blocking call there too
                        return
            except OSError:
                pass
            time.sleep(STOP_POLL)

    threading.Thread(target=look, name="stop-request", daemon=True).start()
    return requested


def step_alive_file(paths: JobPaths, component: str, index: object) -> str:
    """The file a node's step touches while it runs."""
    return paths.heartbeat(component, index) + ".step"


def last_output(path: str) -> float | None:
    """When a node's command last wrote, as its step last noted in its liveness file (watchdog only)."""
    try:
        with open(path) as fh:
            return float(fh.read().strip())
    except (OSError, ValueError):
        return None


def mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def usage_sampler(run: NodeRunView, path: str) -> UsageSampler:
    """The node's usage sampler: its CPUs and memory as Slurm gave them (else as the plan asked)."""
    from ti_slurm.job.usage import UsageSampler
    from ti_slurm.slurm.text import mem_bytes

    comp = run.plan.components[run.component]
    cpus = int(run.env.get("SLURM_CPUS_ON_NODE", "") or 0) or int(comp.cpus_per_node) or 1
    mem = run.env.get("SLURM_MEM_PER_NODE", "")
    request = int(mem) << 20 if mem.isdigit() else mem_bytes(comp.mem or "")
    return UsageSampler(path, run.contract.node, cpus, request, run.env, comp.npus_per_node)


class NodeWatch:
    """Called about twice a second while a node's command runs (see :func:`ti_slurm.job.process.run_command`)."""

    def __init__(self, run: NodeRunView, watch_silence: bool, signals: bool = False) -> None:
        paths = JobPaths(run.job_dir)
        # the supervisor's checkpoint signal (Slurm): this attempt's line in the signal file, once
        self.signal_file = paths.signal if signals else ""
        self.attempt = run.env.get("TI_SLURM_RESTART_COUNT", "0")
        self.signal_seen = 0.0
        name = run.plan.components[run.component].name
        self.alive_file = step_alive_file(paths, name, run.contract.index)
        self.watched = (paths.node_log(name, run.contract.index), run.env.get("TI_SLURM_HEARTBEAT_FILE", ""))
        self.silence = run.plan.watchdog_silence if watch_silence else 0
        self.started = time.time()
        progress = run.env.get("TI_SLURM_PROGRESS_FILE", "")
        self.progress = ProgressWatch(progress, self.started) if watch_silence and progress else None
        self.judges_progress = run.plan.watchdog_progress  # a stall is a hang (else steps are only noted)
        self.node = run.contract.node
        self.touched = 0.0
        self.paths, self.components = paths, run.plan.components
        # only a job with a watchdog is ever asked for its stacks (a node hung): none other looks at the request
        watched = run.plan.watchdog_silence or run.plan.watchdog_progress
        self.stacks_request = paths.stacks_request
        self.stacks_seen = mtime(self.stacks_request) if watched else -1.0
        self.error = ""  # why the command was stopped, once it was
        self.usage = usage_sampler(run, paths.node_usage(name, run.contract.index))
        host = os.environ.get("SLURM_LAUNCH_NODE_IPADDR") or "127.0.0.1"  # where srun, and so the supervisor, runs
        start_beating(paths.beat, host, name, run.contract.index)

    def check_signal(self) -> None:
        """When the supervisor wrote this attempt's checkpoint signal, send it to this step (whose handler passes
        it to the command's processes, see :func:`ti_slurm.job.process.run_command`)."""
        changed = mtime(self.signal_file)
        if changed == self.signal_seen:
            return
        self.signal_seen = changed
        try:
            with open(self.signal_file) as fh:
                attempt, name = fh.read().split()
        except (OSError, ValueError):
            return
        if attempt == self.attempt:
            import signal

            self.signal_file = ""  # once per attempt
            os.kill(os.getpid(), int(getattr(signal, name)))

    def mark_alive(self, text: str) -> None:
        """Rewrite the liveness file (its time says the step is alive; ``text``: when the command last wrote)."""
        try:
            fd = os.open(self.alive_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
            os.write(fd, text.encode())
            os.close(fd)
        except OSError:
            pass  # the record of liveness matters less than the command

    def tick(self, pgid: int) -> int | None:
        """Mark the step alive when due, pass on the checkpoint signal when it came; return :data:`HUNG_EXIT`
        once the command is found hung."""
        if self.signal_file:
            self.check_signal()
        self.usage.tick(pgid)
        now = time.time()
        watching = bool(self.silence) and not self.error
        last = max(self.started, *(mtime(path) for path in self.watched if path)) if watching else now
        if now - self.touched >= ALIVE_EVERY:
            self.touched = now
            # with the watchdog, when the command last wrote: the supervisor names every silent node
            self.mark_alive(f"{last:.3f}\n" if watching else "")
        if not self.error and self.stacks_seen >= 0 and mtime(self.stacks_request) != self.stacks_seen:
            self.answer_stacks_request(pgid)
        stalled = self.progress.look(now) if self.progress is not None and not self.error else ""
        stalled = stalled if self.judges_progress else ""
        if stalled:
            self.error = stalled
        elif not watching or now - last < self.silence:
            return None
        else:
            self.error = f"hung: printed nothing for {int(now - last)} s (watchdog silence {self.silence} s)"
        import sys

        self.stacks_seen = -1.0  # it asks every node for theirs (srun ends the other tasks once this one exits)
        write_request(self.stacks_request, self.attempt)
        print(f"ti-slurm: node {self.node}: {self.error}; {STACKS_MARK}", file=sys.stderr)
        sys.stderr.flush()
        dump_stacks(pgid)
        wait_for_stacks([self.paths.node_log(c.name, i) for c in self.components for i in range(c.nodes)])
        return HUNG_EXIT

    def answer_stacks_request(self, pgid: int) -> None:
        """Print the command's stacks once the supervisor asked for this attempt's (another node hung)."""
        self.stacks_seen = mtime(self.stacks_request)
        try:
            with open(self.stacks_request) as fh:
                asked = fh.read().strip() == self.attempt
        except OSError:
            return
        if asked:
            import sys

            self.stacks_seen = -1.0  # once an attempt
            said = f"ti-slurm: node {self.node}: asked for its stacks (another node hung); {STACKS_MARK}"
            print(said, file=sys.stderr)
            sys.stderr.flush()
            dump_stacks(pgid)


STACKS_WAIT = 15.0  # seconds to wait for every node's stacks (py-spy takes ~1 s a process)
READ_BYTES = 256 * 1024  # a stack dump is in the last part of a log


def write_request(path: str, attempt: object) -> None:
    """Ask every node's step of ``attempt`` for something (its stacks): the request file holds the attempt."""
    from ti_slurm.core.files import write_atomic

    try:  # noqa: SIM105 (contextlib: one more import on every node's path)
        write_atomic(path, f"{attempt}\n", 0o644)
    except OSError:
        pass


def log_end(path: str) -> str:
    """A log's last :data:`READ_BYTES` ("" when it cannot be read)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - READ_BYTES))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


def wait_for_stacks(logs: list[str], most: float = STACKS_WAIT) -> None:
    """Wait until every log holds a stack dump after :data:`STACKS_MARK` and stopped growing (``most`` s at most)."""
    deadline = time.monotonic() + most
    waiting = list(logs)
    while waiting and time.monotonic() < deadline:
        waiting = [log for log in waiting if STACKS_MARK not in log_end(log)]
        time.sleep(0.25)
    settled(logs, max(0.5, deadline - time.monotonic()))  # a dump being written: until the logs stop growing


LOG_SETTLE = 2.0  # seconds a log may still grow after its command ended (slurmstepd writes it on)


def settled(paths: list[str], most: float = LOG_SETTLE) -> None:
    """Wait until the logs stop growing (at most ``most`` seconds): a command's last words reach its log through
    slurmstepd, which may write them after the node's exit record is there."""

    def sizes() -> list[int]:
        found = []
        for path in paths:
            try:
                found.append(os.stat(path).st_size)
            except OSError:
                found.append(-1)
        return found

    deadline, last = time.monotonic() + most, sizes()
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = sizes()
        if now == last:
            return
        last = now


def dump_stacks(pgid: int) -> None:
    """Print the Python stacks of the group's processes to this step's output (the node's log)."""
    import shutil
    import signal
    import subprocess

    from ti_slurm.job.process import process_tree

    pids = process_tree(pgid)  # torch's launcher puts its workers in sessions of their own
    py_spy = shutil.which("py-spy")
    for pid in pids:
        try:
            exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
        except OSError:
            continue
        if not exe.startswith("python"):
            continue
        if py_spy:
            subprocess.run([py_spy, "dump", "--pid", str(pid)], timeout=30, check=False)
        else:  # faulthandler (PYTHONFAULTHANDLER=1) prints every thread's stack, then the process ends
            try:  # noqa: SIM105
                os.kill(pid, signal.SIGABRT)
            except ProcessLookupError:
                pass
    if not py_spy:
        time.sleep(1.0)  # let faulthandler finish writing
