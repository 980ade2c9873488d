"""Why an attempt ended: the causes' fixed vocabulary, and the log signatures that name a failure's cause.

One home for both: the supervisor reads the failed nodes' last log lines with :func:`classify` when an attempt
fails, ``status`` says the cause with its evidence, and the restart decision follows the cause
(:func:`restart_word`, :data:`OWN_CAUSES`). A site adds signatures of its own in the site config
(``failure_signatures``: ``[{cause = "gpu_fault", pattern = "..."}]``), tried before these.

The signatures are data, each tested against real messages (``tests/unit/test_causes.py``: PyTorch, NCCL, CUDA,
Slurm, the kernel, MindSpore/HCCL). A cause is named only from evidence: a failure nothing matched is
``unknown``, never a guess. Standard library only: the supervisor imports it.
"""

from __future__ import annotations

import re

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

# cause -> what it means, in a few words (docs/failures.md says each one's handling)
CAUSES: dict[str, str] = {
    "user_error": "the command's own bug: a Python exception of its code, a missing file, a command not found",
    "gpu_oom": "the GPU (or NPU) ran out of memory",
    "host_oom": "the node's memory ran out: the kernel or Slurm's cgroup killed the command",
    "gpu_fault": "a GPU fault: an Xid, an uncorrectable ECC error, a GPU off the bus",
    "nccl": "the collective library failed: an NCCL/HCCL timeout or error (often a consequence of another rank)",
    "nan": "the training's loss became NaN or Inf",
    "filesystem": "the filesystem failed: no space left, an I/O error, a stale file handle",
    "launch": "Slurm could not start a step on a node",
    "node_fail": "a node was lost (it stopped answering, or Slurm said so)",
    "hang": "the command stopped making progress while alive",
    "timeout": "the time limit came",
    "preempt": "the job was preempted",
    "cancelled": "the job was cancelled",
    "unknown": "the command failed and nothing in its logs said why",
}
OWN_CAUSES = ("user_error", "gpu_oom", "nan")  # the user's own: retried at most once under restart.on's failure
BLAMES_NODE = ("gpu_fault", "launch", "node_fail", "filesystem")  # the node is left out afterwards
CASCADES = ("nccl",)  # a rank's collective error after another rank failed: a consequence, not the root
INDEPENDENT = ("gpu_fault", "host_oom", "gpu_oom", "filesystem", "nan")  # never another rank's consequence
# the failures of a command that exited non-zero: `failure` in restart.on covers them
EXIT_CAUSES = ("user_error", "gpu_oom", "host_oom", "gpu_fault", "nccl", "nan", "filesystem", "unknown")

# a launcher's traceback that only reports its child's exit (torchrun's): the child said what it said before
WRAPPER = re.compile(r"ChildFailedError")
LAST_SAYS_MOST = ("user_error",)  # a traceback's last line names the exception: the evidence is its last match
# (cause, pattern): the first that matches a line names it; the more specific first (an OOM's traceback is
# no user bug; a GPU fault makes NCCL fail too)
SIGNATURES: tuple[tuple[str, str], ...] = (
    ("gpu_fault", r"\bXid\b.{0,40}\b\d{1,3}\b|NVRM: Xid"),
    ("gpu_fault", r"uncorrectable ECC error|ECC error.{0,40}uncorrectable|double.bit ECC"),
    ("gpu_fault", r"GPU has fallen off the bus|fell off the bus|GPU is lost"),
    (
        "gpu_fault",
        r"CUDA error: (?:an illegal memory access|unspecified launch failure|uncorrectable ECC|"
        r"GPU is lost|device-side assert)|cudaErrorECCUncorrectable|cudaErrorDevicesUnavailable",
    ),
    (
        "host_oom",
        r"Detected \d+ oom[-_ ]kill event|oom-kill|Out of memory: Kill(?:ed)? process|"
        r"Memory cgroup out of memory|OUT_OF_MEMORY",
    ),
    (
        "gpu_oom",
        r"CUDA out of memory|OutOfMemoryError: CUDA|CUBLAS_STATUS_ALLOC_FAILED|"
        r"NPU out of memory|HBM out of memory|cudaErrorMemoryAllocation",
    ),
    (
        "filesystem",
        r"No space left on device|Disk quota exceeded|Stale file handle|"
        r"\[Errno 5\] Input/output error|Errno 28\b|ENOSPC|EIO\b",
    ),
    (
        "nan",
        r"\b(?:loss|Loss|LOSS)\b[^\n]{0,40}\b(?:nan|NaN|inf|Inf)\b|non-finite loss|"
        r"Loss is (?:nan|inf)|detected (?:NaN|nan|Inf|inf) in",
    ),
    (
        "nccl",
        r"NCCL (?:error|WARN|timeout)|ncclInternalError|ncclSystemError|ncclRemoteError|"
        r"ProcessGroupNCCL.{0,80}(?:[Tt]imeout|[Ww]atchdog)|Watchdog caught collective operation timeout|"
        r"NCCL communicator was aborted|HCCL.{0,40}(?:[Tt]imeout|error|failed)|EI\d{4}|"
        r"Connection reset by peer|Connection closed by peer|Broken pipe|DistNetworkError|"
        r"gloo/transport|ProcessGroupGloo",
    ),
    (
        "user_error",
        r"^(?:Traceback \(most recent call last\)|\w*(?:Error|Exception): )|"
        r"command not found$|No such file or directory|can't open file|ModuleNotFoundError|"
        r"SyntaxError|Permission denied",
    ),
)


class Evidence:
    """The line that named a cause: where it is (the node, its log, the line's number from 1) and its text."""

    __slots__ = ("cause", "line", "log", "node", "number")

    def __init__(self, cause: str, line: str, number: int, log: str = "", node: str = "") -> None:
        self.cause, self.line, self.number, self.log, self.node = cause, line, number, log, node

    def fields(self) -> dict[str, object]:
        """As the job's record keeps it (``evidence`` of an ``end`` event)."""
        return {"cause": self.cause, "node": self.node, "log": self.log, "line": self.number, "text": self.line}


def compiled(extra: Sequence[tuple[str, str]] = ()) -> list[tuple[str, re.Pattern[str]]]:
    """The signatures a classifier tries: the site's (``extra``) first, then ti-slurm's."""
    return [(cause, re.compile(pattern)) for cause, pattern in (*extra, *SIGNATURES)]


def classify(
    lines: Sequence[str], signatures: Sequence[tuple[str, re.Pattern[str]]], first: int = 1
) -> Evidence | None:
    """The cause the lines of one log say (``first``: the number of ``lines[0]``): the most specific signature
    that matches any line (its first matching line is the evidence; a traceback's, its last); None when none
    matches."""
    found: dict[str, Evidence] = {}
    kept: list[Evidence] = []  # the matches of a cause whose last match says most (a traceback's exception)
    traceback = 0  # where the traceback being read began (its number)
    for k, line in enumerate(lines):
        if line.startswith("Traceback (most recent call last)"):
            traceback = first + k
        if WRAPPER.search(line):  # a launcher's report of its child's exit, not the command's own exception
            kept = [e for e in kept if e.number < traceback]
            continue
        for cause, pattern in signatures:
            if cause in LAST_SAYS_MOST and pattern.search(line):
                kept.append(Evidence(cause, line.strip()[:300], first + k))
            elif cause not in found and pattern.search(line):
                found[cause] = Evidence(cause, line.strip()[:300], first + k)
    for cause in LAST_SAYS_MOST:
        last = [e for e in kept if e.cause == cause]
        if last:
            found[cause] = last[-1]
    order = [cause for cause, _ in signatures]
    return min(found.values(), key=lambda e: order.index(e.cause)) if found else None


def root_of(found: Iterable[tuple[float, Evidence | None]]) -> tuple[Evidence | None, list[Evidence]]:
    """Of the failed nodes' evidence (with when each node's command ended; None: its log said nothing known), the
    root cause and its consequences. A cause no other rank's failure can bring about (a GPU fault or OOM, the host's
    OOM, a filesystem error, a NaN) is the root wherever it is; else the first node to fail whose log says no
    collective's error (an NCCL or gloo error, a peer gone: what the other ranks say once one failed), which
    is ``unknown`` when it said nothing known; else the first collective error."""
    ordered = [e for _, e in sorted(found, key=lambda pair: pair[0])]
    said = [e for e in ordered if e is not None]
    independent = [e for e in said if e.cause in INDEPENDENT]
    own = [e for e in ordered if e is None or e.cause not in CASCADES]
    root = independent[0] if independent else own[0] if own else ordered[0] if ordered else None
    return root, [e for e in said if e is not root]


def restart_word(cause: str) -> str:
    """The ``restart.on`` word that covers ``cause`` besides its own name: ``failure`` for a command's non-zero
    exit, whatever its class; ``node_fail`` for a step Slurm could not start."""
    return "failure" if cause in EXIT_CAUSES else "node_fail" if cause == "launch" else cause


def restart_allowed(cause: str, restart_on: Sequence[str], earlier: Sequence[str]) -> tuple[bool, str]:
    """Whether ``restart.on`` lets an attempt that ended by ``cause`` go on, and why not: listed by name, or
    covered by ``failure``; a cause of the user's own (:data:`OWN_CAUSES`) under ``failure`` only once in a row
    (``earlier``: the causes of the attempts before, oldest first)."""
    if not cause:
        return False, ""
    if cause in restart_on:
        return True, ""
    word = restart_word(cause)
    if word not in restart_on:
        return False, ""
    if cause in OWN_CAUSES and earlier and earlier[-1] == cause:
        why = f"{cause} twice in a row: a bug of the command's own is not retried again (list {cause} in restart.on"
        return False, why + " to retry it anyway)"
    return True, ""


NO_PROGRESS_ATTEMPTS = 3  # attempts in a row that got no further: the job stops


def no_progress(steps: Sequence[str]) -> str:
    """Why a job whose attempts report their steps stops restarting ("" to go on): the last
    :data:`NO_PROGRESS_ATTEMPTS` attempts (``steps``: each one's last step, oldest first, "" when it reported
    none; the one just ended last) each ended at or below the best step before them. A job that reports no
    steps is never stopped so."""
    numbers = [step_number(s) for s in steps]
    if len(numbers) <= NO_PROGRESS_ATTEMPTS or not any(n is not None for n in numbers):
        return ""
    before = [n for n in numbers[:-NO_PROGRESS_ATTEMPTS] if n is not None]
    if not before:
        return ""
    best = max(before)
    if all(n is None or n <= best for n in numbers[-NO_PROGRESS_ATTEMPTS:]):
        return f"no progress in {NO_PROGRESS_ATTEMPTS} attempts (last step {steps[-1] or f'{best:g}'})"
    return ""


def step_number(text: str) -> float | None:
    """A training step as reported (``1200``, ``1200.5``, ``1200 extra``: the first word); None when no number."""
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return None


def blamed_node(cause: str, evidence: Mapping[str, object]) -> str:
    """The node an attempt's cause blames ("" for none): a GPU fault, a step Slurm could not start, a lost node, a
    filesystem error on it, or the root of an NCCL cascade (other ranks failed after it). It is left out of the
    job's next attempt and, for a while, of the user's next jobs."""
    node = evidence.get("node")
    blames = cause in BLAMES_NODE or (cause in CASCADES and bool(evidence.get("consequences")))
    return node if blames and isinstance(node, str) else ""
