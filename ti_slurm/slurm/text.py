"""What ti-slurm reads from Slurm: every format it asks for beside the one parser of its answer.

Slurm's commands print text for people; each kind of answer ti-slurm reads is parsed here and nowhere else,
so a change between Slurm releases is fixed once (``tests/unit/test_slurm_text.py`` feeds each parser what
Slurm 22.05 and 25.11 print, recorded in ``tests/data/slurm/``):

- ``scontrol -o show job``: :func:`show_job_records`, a record per line (a job, an array task or a
  heterogeneous component);
- ``sinfo``: each format ti-slurm asks for is a constant next to its parser (:data:`PARTITIONS_FORMAT`
  with :func:`parse_partitions`, ...);
- ``squeue --me -o``: :data:`COMMENTS_FORMAT` with :func:`parse_comments`;
- ``scontrol show config`` and ``.conf`` files: :func:`parse_config`, :func:`read_conf`, :func:`conf_lines`;
- ``sbatch --parsable`` and ``--version``: :func:`parse_job_id`, :func:`parse_version`;
- time strings (``--time``, ``TimeLimit=``, sinfo's ``%l``): :func:`time_seconds` decides once what means
  "no limit"; points in time (``EndTime=``): :func:`clock_time`;
- ``sbatch --test-only``: :func:`parse_test_only`; ``sinfo`` idle nodes: :func:`parse_idle`;
- ``sacctmgr list clusters``: :func:`parse_cluster_names`; ``scontrol token``: :func:`token_from_text`.

Standard library only: the batch step reads the queue with these too.
"""

from __future__ import annotations

import math
import os
import re

from ti_slurm.core.errors import BackendError, SubmissionError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

NULL = "(null)"  # what scontrol prints for a field that holds nothing

# -- scontrol -o show job ---------------------------------------------------------------------------------
# a field starts where a word that begins with a capital letter is followed by "=" (``JobId=``, ``CPUs/Task=``,
# ``ReqB:S:C:T=``); everything up to the next such word is its value, so ``JobName=my run`` keeps its space
_FIELD_START = re.compile(r"(?:^| )([A-Z][A-Za-z0-9_:/]*)=")


def show_job_record(line: str) -> dict[str, str]:
    """One line of ``scontrol -o show job`` as its fields (the first of a key given twice counts).

    A value that itself holds `` Word=`` (a job name chosen so) is cut there: the format cannot tell.
    """
    starts = list(_FIELD_START.finditer(line))
    fields: dict[str, str] = {}
    for here, after in zip(starts, [*starts[1:], None], strict=True):
        end = after.start() if after else len(line)
        fields.setdefault(here.group(1), line[here.end() : end].rstrip(" "))
    return fields


def show_job_records(text: str) -> list[dict[str, str]]:
    """``scontrol -o show job`` (one line per job, array task or heterogeneous component) as records."""
    return [show_job_record(line) for line in text.splitlines() if line.startswith("JobId=")]


def value(fields: Mapping[str, str], key: str) -> str:
    """A field of a record, ``""`` for one Slurm prints as ``(null)`` or not at all."""
    found = fields.get(key, "")
    return "" if found == NULL else found


def owner_uid(fields: Mapping[str, str]) -> int | None:
    """The numeric user of ``UserId=alice(1000)``."""
    owner = fields.get("UserId", "")
    number = owner.rpartition("(")[2].rstrip(")")
    return int(number) if owner.endswith(")") and number.isdigit() else None


def array_task_ids(array_id: object, tasks: object) -> list[str]:
    """The ids of the array tasks a queue entry stands for, as ti-slurm names a sweep's points (``100_3``):
    a running task's one, or each of a pending entry's (``ArrayTaskId=2-5%2``, ``1,3``); none for a job
    that is no array task."""
    array, spec = str(array_id or ""), str(tasks or "").split("%")[0]
    if not array.isdigit() or not spec:
        return []
    ids: list[str] = []
    for part in spec.split(","):
        first, _, rest = part.partition("-")
        last, _, step = rest.partition(":")
        if first.isdigit() and (not last or last.isdigit()) and (not step or step.isdigit()):
            ids += [f"{array}_{n}" for n in range(int(first), int(last or first) + 1, int(step or 1))]
    return ids


def output_dir(fields: Mapping[str, str]) -> str | None:
    """The folder of a job's batch output (``StdOut=<output dir>/slurm-<id>.out``)."""
    path = value(fields, "StdOut")
    return os.path.dirname(path) if path else None


def preempted(fields: Mapping[str, str]) -> bool:
    """Whether the record says the job is being (or was) preempted."""
    return fields.get("PreemptTime", "None") not in ("None", "", "Unknown")


# -- srun ------------------------------------------------------------------------------------------------
# srun (22.05 and 25.11) on stderr: "srun: error: Task launch for StepId=7.0 failed on node node02: Communication
# connection failure", one line per node Slurm could not start the step's task on
_LAUNCH_FAILED = re.compile(r"Task launch for \S+ failed on node (\S+): (.+?)\s*$")


def launch_failure(line: str) -> tuple[str, str] | None:
    """A line of srun's stderr saying it could not start the step on a node: (the node, Slurm's words)."""
    found = _LAUNCH_FAILED.search(line)
    return (found.group(1), found.group(2)) if found else None


# -- sbatch, versions ---------------------------------------------------------------------------------------
_VERSION = re.compile(r"slurm[- ](?:wlm )?(\d+)\.(\d+)")
_JOB_ID = re.compile(r"(\d+)(?:;\S+)?")


def parse_version(text: str) -> tuple[int, int]:
    """``slurm 22.05.8`` (``sinfo --version``) -> (22, 5)."""
    m = _VERSION.search(text)
    if m is None:
        raise BackendError(f"cannot read a Slurm version from {text.strip()[:80]!r}")
    return int(m.group(1)), int(m.group(2))


def parse_job_id(text: str) -> str:
    """The job id from ``sbatch --parsable`` output (``123`` or ``123;cluster``)."""
    line = text.strip().splitlines()[-1] if text.strip() else ""
    m = _JOB_ID.fullmatch(line)
    if m is None:
        raise SubmissionError(f"sbatch printed no job id: {text.strip()[:200]!r}")
    return m.group(1)


# -- time strings -------------------------------------------------------------------------------------------
NO_LIMIT = ("UNLIMITED", "INFINITE", "NONE", "N/A", "")


def time_seconds(text: str | None) -> int | None:
    """A Slurm time (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH[:MM[:SS]]``) in seconds; ``None`` for no limit.

    No limit is what sbatch makes of ``0``, ``UNLIMITED`` and ``INFINITE``, and what sinfo and scontrol print
    as ``infinite``, ``UNLIMITED``, ``NONE`` or ``N/A``. Raises ``ValueError`` for text that is no time.
    """
    text = (text or "").strip()
    if text.upper() in NO_LIMIT or text.strip("0:-") == "":
        return None
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if len(parts) > 3 or (days and not days.isdigit()) or any(p < 0 for p in parts):
        raise ValueError(f"not a Slurm time: {text!r}")
    if days:  # D-HH, D-HH:MM, D-HH:MM:SS
        hours, minutes, seconds = [*parts, 0, 0][:3]
    elif len(parts) == 3:
        hours, minutes, seconds = parts
    elif len(parts) == 2:
        hours, (minutes, seconds) = 0, parts
    else:
        hours, minutes, seconds = 0, parts[0], 0
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds


def time_minutes(text: str | None) -> int | None:
    """:func:`time_seconds` in whole minutes, rounded up (as Slurm counts a limit)."""
    seconds = time_seconds(text)
    return None if seconds is None else math.ceil(seconds / 60)


def clock_time(text: str) -> float | None:
    """A point in time as Slurm prints it (``2026-11-30T07:56:27``, local time: ``EndTime=``, ``sbatch
    --test-only``'s start) as seconds since the epoch; ``None`` for what is no such time (``Unknown``)."""
    import time

    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


# -- sbatch --test-only -------------------------------------------------------------------------------------
_WOULD_START = re.compile(r"to start at (\S+) .*?in partition (\S+)")  # 25.11 says "at <time> a using ..."


def parse_test_only(text: str, now: float) -> tuple[str, str] | None:
    """``sbatch --test-only``'s answer: (when, partition), or None when it says no start, or a time that is no
    time Slurm would give (``0000-...``: before a day ago; a far one, 2537-..., is Slurm's "when running jobs
    without a limit end": kept, it ranks last)."""
    found = _WOULD_START.search(text)
    when = clock_time(found[1]) if found else None
    if found is None or when is None:
        return None
    return (found[1], found[2]) if now - 86400 <= when else None


# -- sinfo ------------------------------------------------------------------------------------------------
class Partition:
    """What ``sinfo`` says of a partition (summed over its groups of alike nodes).

    A plain class, not a dataclass: importing ``dataclasses`` costs the job path 8 ms.
    """

    def __init__(
        self, name: str, nodes: int, max_per_node: dict[str, int], max_minutes: int | None, default: bool = False
    ) -> None:
        self.name, self.nodes, self.default = name, nodes, default
        self.max_per_node = max_per_node  # GRES name -> the most one node of the partition has
        self.max_minutes = max_minutes  # None: no limit

    def __repr__(self) -> str:
        return f"Partition({self.name!r}, {self.nodes}, {self.max_per_node}, {self.max_minutes}, {self.default})"

    @property
    def max_gpus_per_node(self) -> int:
        return self.max_per_node.get("gpu", 0)


PARTITIONS_FORMAT = "%P|%D|%G|%l"  # partition (* = default), nodes, gres, time limit: a line per group of alike nodes


def parse_partitions(text: str) -> dict[str, Partition]:
    """``sinfo -h -o PARTITIONS_FORMAT`` as partitions."""
    out: dict[str, Partition] = {}
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 4 or not fields[1].isdigit():
            continue
        name, nodes, gres, limit = fields
        default = name.endswith("*")
        name = name.rstrip("*")
        counts = gres_counts(gres)
        part = out.get(name)
        if part is None:
            out[name] = Partition(name, int(nodes), counts, time_minutes(limit), default)
        else:
            part.nodes += int(nodes)
            for kind, count in counts.items():
                part.max_per_node[kind] = max(part.max_per_node.get(kind, 0), count)
    return out


def sinfo_text(partitions: list[dict[str, Any]], node_gres: Mapping[str, str]) -> str:
    """Partitions as ``sinfo -h -o '%P|%D|%G|%l'`` prints them (see :func:`parse_partitions`): what pyslurm
    and slurmrestd say of them, made into the text the partition check reads.

    ``partitions``: ``name``, ``default``, ``nodes`` (names), ``max_time`` (minutes, or None);
    ``node_gres``: each node's configured gres (``gpu:8``).
    """
    lines = []
    for part in partitions:
        limit = part["max_time"]
        limit_text = "infinite" if limit is None else str(limit)
        by_gres: dict[str, int] = {}
        for node in part["nodes"]:
            gres = node_gres.get(node) or "(null)"
            by_gres[gres] = by_gres.get(gres, 0) + 1
        for gres, count in sorted(by_gres.items()):
            lines.append(f"{part['name']}{'*' if part['default'] else ''}|{count}|{gres}|{limit_text}")
    return "\n".join(lines) + ("\n" if lines else "")


def gres_counts(gres: str) -> dict[str, int]:
    """sinfo's ``%G`` of a group of nodes: ``gpu:8,npu:8``, ``gpu:a100:8(S:0-1)`` -> {name: count per node}."""
    counts: dict[str, int] = {}
    for item in gres.split(","):
        words = item.split("(")[0].split(":")
        if len(words) > 1 and words[-1].isdigit():
            counts[words[0]] = counts.get(words[0], 0) + int(words[-1])
    return counts


NODE_STATES_FORMAT = "%N %T"  # a line per node: its name and state (``idle``, ``down*``, ``mixed+drain``...)
NODE_ADDRESSES_FORMAT = "%N %o"  # a line per node: its name and the address the controller reaches it at
# Slurm's node states (sinfo %T, lower case) of a node that is gone; a trailing "*" means not responding
UNREACHABLE_STATES = ("down", "fail", "failing", "unknown", "no_respond", "not_responding")


IDLE_FORMAT = "%P %t %D"  # a line per partition and node state: how many of its nodes are in it


def parse_idle(text: str) -> dict[str, int]:
    """``sinfo -h -o IDLE_FORMAT``: idle nodes per partition (every partition named, 0 when none is idle)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 3 or not parts[2].isdigit():
            continue
        name = parts[0].rstrip("*")
        out[name] = out.get(name, 0) + (int(parts[2]) if parts[1] == "idle" else 0)
    return out


def parse_node_pairs(text: str) -> dict[str, str]:
    """``sinfo -h -N -o NODE_STATES_FORMAT`` (or ``NODE_ADDRESSES_FORMAT``) as node name -> its value."""
    pairs = (line.split() for line in text.splitlines())
    return {words[0]: words[1] for words in pairs if len(words) == 2}


def unreachable(state: str) -> bool:
    """Whether an ``sinfo %T`` node state says the node is gone (``down*``, ``idle*``, ``fail``...)."""
    state = state.strip().lower()
    return state.endswith("*") or state.rstrip("*~#!%$@^-").split("+")[0] in UNREACHABLE_STATES


# what Slurm's commands print when no controller answers (none runs, the config names another, a version
# that speaks another protocol)
_NO_CONTROLLER = (
    "Unable to contact slurm controller",
    "Insane message length",
    "Zero Bytes were transmitted or received",
    "Connection refused",
    "Could not establish a configuration source",
)


def no_controller(message: str) -> bool:
    """Whether a Slurm command's error says no controller could be reached."""
    return any(sign in message for sign in _NO_CONTROLLER)


def no_jobs(message: str) -> bool:
    """Whether ``scontrol show job``'s non-zero answer only says the controller holds no job at all."""
    return "No jobs in the system" in message


# -- squeue ------------------------------------------------------------------------------------------------
COMMENTS_FORMAT = "%i|%k"  # job id (``123``, ``123+0``, ``123_[1-4]``) and its comment


def parse_comments(text: str) -> dict[str, str]:
    """``squeue -h -o COMMENTS_FORMAT`` as job id (a heterogeneous job's, not its components') -> comment."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        job_id, sep, comment = line.partition("|")
        if sep:
            out.setdefault(job_id.split("+", 1)[0].strip(), comment.strip())
    return out


# -- sacctmgr, scontrol token -------------------------------------------------------------------------------
CLUSTERS_ARGV = ("sacctmgr", "-n", "-P", "list", "clusters", "format=cluster")
_CLUSTER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,31}")


def parse_cluster_names(text: str) -> list[str]:
    """``sacctmgr -n -P list clusters format=cluster``: the clusters of the multi-cluster setup (a line each); none
    when a line is no name (sacctmgr's words when there is no slurmdbd)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines if all(_CLUSTER_NAME.fullmatch(line) for line in lines) else []


def token_from_text(text: str) -> str:
    """The token in ``scontrol token``'s output (``SLURM_JWT=...``) or in a file holding just the token."""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("SLURM_JWT="):
            return line.split("=", 1)[1]
        if line and "=" not in line:
            return line
    return ""


# -- scontrol show config, .conf files -------------------------------------------------------------------
def parse_config(text: str) -> dict[str, str]:
    """``scontrol show config`` as ``{key: value}`` (``SLURM_CONF``, ``MaxArraySize``, ...)."""
    pairs = (line.partition("=") for line in text.splitlines())
    return {key.strip(): value.strip() for key, sep, value in pairs if sep and key.strip()}


def conf_lines(path: str) -> list[str]:
    """The lines of a Slurm ``.conf`` file that say something (comments and blank lines dropped); a file that
    cannot be read has none."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


def read_conf(path: str) -> dict[str, str]:
    """The ``Key=Value`` lines of a Slurm ``.conf`` file (``oci.conf``...), double-quoted values unquoted."""
    out: dict[str, str] = {}
    for line in conf_lines(path):
        key, sep, found = line.partition("=")
        found = found.strip()
        if len(found) >= 2 and found[0] == found[-1] == '"':
            found = found[1:-1]
        if sep:
            out[key.strip()] = found
    return out


# -- memory sizes ------------------------------------------------------------------
def mem_bytes(text: str) -> int:
    """A Slurm memory size (``4096`` in megabytes, ``500M``, ``4G``, ``1T``) in bytes; 0 for none."""
    text = text.strip().upper()
    shift = {"K": 10, "M": 20, "G": 30, "T": 40}.get(text[-1:], 0)
    number = text[:-1] if shift else text
    if not number.isdigit():
        return 0
    return int(number) << (shift or 20)
