"""slurmrestd's API as ti-slurm speaks it (pure): which version to use, the body of a submit, and the jobs,
partitions and errors read back.

The API changes with every Slurm release: 22.05 serves ``v0.0.36``-``v0.0.38`` (its own schema), 23.02 on
serve their versions through data_parser plugins (25.11: ``v0.0.42``-``v0.0.44``), where numbers that may be
unset are ``{"set": .., "infinite": .., "number": ..}`` and flags are lists of names. Each family has one
:class:`Dialect` here; :func:`pick_version` takes the newest a server offers that one of them knows.

What a job asks for is decided once (:func:`ti_slurm.slurm.request.component_options`, the same options the
``#SBATCH`` lines carry): :func:`job_description` says each as the dialect's field. slurmrestd does not read a
script's ``#SBATCH`` lines, so every option must be a field, and one the dialect cannot say is refused.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ti_slurm.core.environ import SUPERVISOR_TIMES_SIGNAL
from ti_slurm.core.errors import ConfigError
from ti_slurm.core.hostlist import expand
from ti_slurm.core.plan import JobPlan
from ti_slurm.slurm.request import REST, USE_INSTEAD, Value, component_options, description_field
from ti_slurm.slurm.text import gres_counts, mem_bytes, time_minutes


class Dialect:
    """How one family of API versions says a job's options and reads its answers: the data_parser versions
    (23.02 on; 25.11 serves ``v0.0.41``-``v0.0.44``). :class:`Dialect38` is 22.05's."""

    versions: tuple[str, ...] = ("v0.0.44", "v0.0.43", "v0.0.42", "v0.0.41")
    signals_batch_step = True  # False: the API cannot ask for the checkpoint signal to the batch step only

    def number(self, value: int) -> Any:
        """A number that may be unset, as a request gives it."""
        return {"set": True, "infinite": False, "number": value}

    def read_number(self, value: Any) -> int | None:
        """A number of an answer (``None``: unset or infinite)."""
        if isinstance(value, dict):
            return int(value["number"]) if value.get("set") and not value.get("infinite") else None
        return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    def environment(self, env: Mapping[str, str]) -> Any:
        return [f"{k}={v}" for k, v in env.items()]

    def nodes(self, low: int, high: int) -> dict[str, Any]:
        return {"minimum_nodes": low, "maximum_nodes": high}

    def gres(self, counts: Mapping[str, int]) -> dict[str, Any]:
        return {"tres_per_node": ",".join(f"gres/{kind}:{n}" for kind, n in counts.items())}

    def signal(self, text: str) -> dict[str, Any]:
        """``--signal=B:USR2@120`` (``B:``: the batch step only)."""
        scope, _, rest = text.rpartition(":")
        sig, _, before = rest.partition("@")
        flags = ["BATCH_JOB"] if scope == "B" else []
        return {"kill_warning_signal": sig, "kill_warning_delay": self.number(int(before or 60)),
                "kill_warning_flags": flags}

    def open_mode(self, mode: str) -> dict[str, Any]:
        return {"open_mode": [mode.upper()]}

    def kill_on_invalid_dependency(self) -> dict[str, Any]:
        return {"flags": ["KILL_INVALID_DEPENDENCY"]}

    def no_kill(self) -> dict[str, Any]:
        return {"kill_on_node_fail": False}

    def exclusive(self) -> dict[str, Any]:
        return {"shared": ["none"]}

    def state(self, job: Mapping[str, Any]) -> str:
        """The job's state as ``scontrol`` names it (the first of a list: ``["PENDING", "REQUEUED"]``)."""
        state = job.get("job_state")
        return str(state[0] if isinstance(state, list) and state else state or "")

    def partition_nodes(self, part: Mapping[str, Any]) -> str:
        nodes = part.get("nodes")
        return str(nodes.get("configured", "")) if isinstance(nodes, dict) else str(nodes or "")

    def partition_default(self, part: Mapping[str, Any]) -> bool | None:
        """Whether it is the default partition (``None``: the API does not say: 25.11's does not)."""
        flags = part.get("flags")
        return "default" in [str(f).lower() for f in flags] if isinstance(flags, list) else None

    def partition_max_minutes(self, part: Mapping[str, Any]) -> int | None:
        maximums = part.get("maximums")
        return self.read_number(maximums.get("time")) if isinstance(maximums, dict) else None


class Dialect38(Dialect):
    """22.05's ``v0.0.38`` (and ``v0.0.37``): plain numbers, the environment as an object, options as sbatch
    spells them."""

    versions = ("v0.0.38", "v0.0.37")
    signals_batch_step = False  # its parser refuses --signal=B:... ("Invalid SIGNAL specification")

    def number(self, value: int) -> Any:
        return value

    def read_number(self, value: Any) -> int | None:
        return None if value is None or value == -1 else super().read_number(value)

    def environment(self, env: Mapping[str, str]) -> Any:
        return dict(env)

    def nodes(self, low: int, high: int) -> dict[str, Any]:
        return {"nodes": [low, high]}

    def gres(self, counts: Mapping[str, int]) -> dict[str, Any]:
        return {"gres": ",".join(f"{kind}:{n}" for kind, n in counts.items())}

    def open_mode(self, mode: str) -> dict[str, Any]:
        return {"open_mode": mode}

    def kill_on_invalid_dependency(self) -> dict[str, Any]:
        return {"kill_on_invalid_dependency": True}

    def no_kill(self) -> dict[str, Any]:
        return {"no_kill": True}

    def exclusive(self) -> dict[str, Any]:
        return {"exclusive": "exclusive"}  # as --exclusive says it ("true" is refused: not one of its words)

    def partition_max_minutes(self, part: Mapping[str, Any]) -> int | None:
        return self.read_number(part.get("max_time_limit"))


DIALECTS: tuple[Dialect, ...] = (Dialect(), Dialect38())
KNOWN = tuple(v for d in DIALECTS for v in d.versions)


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.lstrip("v").split(".") if x.isdigit())


def pick_version(served: list[str]) -> str | None:
    """The newest of the versions a server offers that ti-slurm knows, or ``None``."""
    known = [v for v in served if v in KNOWN]
    return max(known, key=version_key) if known else None


def served_versions(openapi: Mapping[str, Any]) -> list[str]:
    """The ``slurm`` API versions an OpenAPI document lists (from its paths: ``/slurm/v0.0.44/jobs``)."""
    found = set()
    for path in openapi.get("paths", {}):
        parts = path.strip("/").split("/")
        if len(parts) > 1 and parts[0] == "slurm" and parts[1].startswith("v0."):
            found.add(parts[1])
    return sorted(found, key=version_key)


def dialect_of(version: str) -> Dialect:
    return next(d for d in DIALECTS if version in d.versions)


def job_description(
    plan: JobPlan, index: int, env: Mapping[str, str], workdir: str, dialect: Dialect
) -> dict[str, Any]:
    """The description of component ``index`` of ``plan``: each option ti-slurm asks for as the dialect's field
    (the spec's ``sbatch:`` table included; one the API cannot say is one line)."""
    options = component_options(plan, index)
    if "signal" in options and not dialect.signals_batch_step:  # the supervisor times the signal itself
        options = {k: v for k, v in options.items() if k != "signal"}
        env = {**env, SUPERVISOR_TIMES_SIGNAL: "1"}
    out: dict[str, Any] = {"environment": dialect.environment(env), "current_working_directory": workdir}
    for name, value in options.items():
        out.update(option_fields(name, value, options, dialect))
    return out


def option_fields(name: str, value: Value, options: Mapping[str, Value], dialect: Dialect) -> dict[str, Any]:
    """The fields of one sbatch option (``options``: the component's others)."""
    text = str(value)
    field = description_field(name, REST)
    if field is not None:
        return {field: text}
    if name == "nodes":  # a count, or a range as sbatch writes it: "6-8"
        low, _, high = text.partition("-")
        return dialect.nodes(int(low), int(high or low))
    if name == "ntasks-per-node":  # only beside a count of nodes (never a range)
        return {"tasks_per_node": int(text), "tasks": int(str(options["nodes"])) * int(text)}
    if name == "cpus-per-task":
        return {"cpus_per_task": int(text)}
    if name == "gres":  # gpu:8,npu:4
        return dialect.gres(gres_counts(text))
    if name == "mem":
        return {"memory_per_node": dialect.number(mem_bytes(text) >> 20)}
    if name == "time":
        minutes = time_minutes(text)
        return {"time_limit": dialect.number(minutes)} if minutes is not None else {}
    if name == "signal":
        return dialect.signal(text)
    if name == "kill-on-invalid-dep":
        return dialect.kill_on_invalid_dependency() if text == "yes" else {}
    if name == "requeue":  # (expedite is asked through the Slurm commands only: here the job requeues as usual)
        return {"requeue": True}
    if name == "open-mode":
        return dialect.open_mode(text)
    if name == "no-kill":  # a lost node leaves the allocation, the job goes on
        return dialect.no_kill()
    if name == "hold" and value is True:
        return {"hold": True}
    if name == "exclusive" and value is True:
        return dialect.exclusive()
    raise ConfigError(f"sbatch.{name}", value, f"the rest backend cannot pass this option; {USE_INSTEAD}")


def submit_body(plan: JobPlan, script: str, env: Mapping[str, str], dialect: Dialect) -> dict[str, Any]:
    """The body of ``POST /slurm/<version>/job/submit``: one description, or one per component."""
    workdir = os.getcwd()
    jobs = [job_description(plan, k, env, workdir, dialect) for k in range(len(plan.components))]
    if len(jobs) == 1:
        return {"script": script, "job": jobs[0]}
    return {"script": script, "jobs": jobs}


def error_text(payload: Mapping[str, Any]) -> str:
    """What slurmrestd's ``errors`` say, as one line ("" when none): each error's description and name."""
    said: list[str] = []
    for err in payload.get("errors") or []:
        if isinstance(err, dict):
            parts = [str(err[k]) for k in ("description", "error") if err.get(k) and err[k] != "Unspecified error"]
            text = ": ".join(dict.fromkeys(parts))
            if text and text not in said:
                said.append(text)
    return "; ".join(said)


def partitions_text(partitions: list[Mapping[str, Any]], nodes: list[Mapping[str, Any]], dialect: Dialect) -> str:
    """Partitions and nodes as ``sinfo -h -o '%P|%D|%G|%l'`` prints them (:func:`~ti_slurm.slurm.text.sinfo_text`);
    "" (no check: Slurm judges at submit) when the API does not say which partition is the default."""
    from ti_slurm.slurm.text import sinfo_text

    defaults = [dialect.partition_default(part) for part in partitions]
    if None in defaults:
        return ""
    gres = {str(n.get("name", "")): str(n.get("gres", "")) for n in nodes}
    rows = []
    for part, default in zip(partitions, defaults, strict=True):
        names = dialect.partition_nodes(part)
        rows.append({
            "name": str(part.get("name", "")),
            "default": default,
            "nodes": expand(names) if names else [],
            "max_time": dialect.partition_max_minutes(part),
        })  # fmt: skip
    return sinfo_text(rows, gres)
