"""The pyslurm backend's pure parts: a plan as pyslurm's job description, partitions as sinfo prints them."""

from __future__ import annotations

import os
import shlex

import pytest

from tests.factories import plan_from
from ti_slurm.backends.pyslurm import job_description, pyslurm_mismatch, sbatch_fields
from ti_slurm.core.errors import ConfigError
from ti_slurm.core.plan import JobPlan
from ti_slurm.slurm.text import parse_partitions, sinfo_text
from ti_slurm.submitting.script import render

# the fields of pyslurm 25.11's JobSubmitDescription this backend sets (the cluster tier uses the real one)
KNOWN = frozenset(
    "script name standard_output standard_error nodes ntasks ntasks_per_node cpus_per_task environment "
    "working_directory comment gres_per_node memory_per_node partitions account qos time_limit signal "
    "is_requeueable log_files_open_mode resource_sharing constraints excluded_nodes required_nodes "
    "reservations dependencies time_limit_min priority".split()
)


def ddp_plan(**doc: object) -> JobPlan:
    """A two-node DDP job's plan, writing to /out, ``doc`` on top of its spec."""
    return plan_from({"mode": "ddp", "nodes": 2, "output_dir": "/out", **doc}, submission="s1")


def sbatch_lines(plan) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """The rendered script's #SBATCH options, unquoted: {option: value} (flags: "")."""
    out = {}
    for line in render(plan).splitlines():
        if line.startswith("#SBATCH --"):
            name, _, value = line[len("#SBATCH --") :].partition("=")
            out[name] = shlex.split(value)[0] if value else ""
    return out


def test_the_description_says_what_the_script_says() -> None:
    plan = ddp_plan(
        mode="ddp", nodes=3, gpus_per_node=8, cpus_per_node=6, mem="20G", partition="debug", account="ml",
        qos="high", time="1:00:00", restart={"max": 2}, signal={"name": "USR2", "before": 60},
        sbatch={"exclusive": True, "constraint": "a100"},
    )  # fmt: skip
    fields = job_description(plan, "#!/bin/bash\n", {}, KNOWN)
    lines = sbatch_lines(plan)
    assert (fields["name"], fields["standard_output"]) == (lines["job-name"], lines["output"])
    assert (fields["nodes"], fields["ntasks_per_node"], fields["cpus_per_task"]) == (3, 1, 6)
    assert str(fields["nodes"]) == lines["nodes"] and str(fields["cpus_per_task"]) == lines["cpus-per-task"]
    assert fields["gres_per_node"] == {"gpu": 8} and lines["gres"] == "gpu:8"
    assert fields["memory_per_node"] == lines["mem"] == "20G"
    assert fields["partitions"] == [lines["partition"]]
    assert (fields["account"], fields["qos"], fields["time_limit"]) == (lines["account"], lines["qos"], lines["time"])
    assert fields["signal"] == {"signal": 12, "time": 60, "batch_only": True} and lines["signal"] == "B:USR2@60"
    assert fields["is_requeueable"] is True and "requeue" in lines
    assert fields["log_files_open_mode"] == lines["open-mode"] == "append"
    assert fields["resource_sharing"] == "no" and "exclusive" in lines
    assert fields["constraints"] == lines["constraint"] == "a100"
    assert fields["comment"] == "ti-slurm:s1"
    assert fields["working_directory"] == os.getcwd()


def test_a_range_of_nodes_is_asked_as_the_script_asks_it() -> None:
    plan = ddp_plan(nodes={"min": 2, "max": 4})
    fields, lines = job_description(plan, "", {}, KNOWN), sbatch_lines(plan)
    assert fields["nodes"] == lines["nodes"] == "2-4"
    # one task per node of what Slurm gives: a task count would make it give the fewest
    assert "ntasks" not in fields and "ntasks_per_node" not in fields and "ntasks-per-node" not in lines


def test_the_job_gets_the_environment_without_a_surrounding_jobs_layout() -> None:
    fields = job_description(ddp_plan(), "", {"PATH": "/bin", "SLURM_CPU_BIND": "x", "SLURM_CONF": "/c"}, KNOWN)
    assert fields["environment"] == {"PATH": "/bin", "SLURM_CONF": "/c"}


def test_a_plan_without_restarts_leaves_requeue_to_the_cluster() -> None:
    fields = job_description(ddp_plan(), "", {}, KNOWN)
    assert "is_requeueable" not in fields and "signal" not in fields and "gres_per_node" not in fields


def test_an_sbatch_option_pyslurm_cannot_set_is_one_line() -> None:
    with pytest.raises(ConfigError) as err:
        sbatch_fields({"hint": "nomultithread"}, KNOWN)
    assert str(err.value) == (
        "sbatch.hint: 'nomultithread': the pyslurm backend cannot pass this option; "
        "use --backend slurm (the Slurm commands) instead"
    )
    with pytest.raises(ConfigError, match="takes a value"):
        sbatch_fields({"exclude": True}, KNOWN)
    assert sbatch_fields({"exclude": "node01", "exclusive": True, "contiguous": False}, KNOWN) == {
        "excluded_nodes": "node01",
        "resource_sharing": "no",
    }


def test_partitions_read_back_as_sinfo_prints_them() -> None:
    rows = [
        {"name": "debug", "default": True, "nodes": ["n1", "n2", "n3"], "max_time": None},
        {"name": "short", "default": False, "nodes": ["n3", "g1"], "max_time": 30},
    ]
    text = sinfo_text(rows, {"n1": "gpu:8", "n2": "gpu:8", "n3": "", "g1": "gpu:a100:4"})
    parts = parse_partitions(text)
    assert (parts["debug"].nodes, parts["debug"].max_gpus_per_node, parts["debug"].max_minutes) == (3, 8, None)
    assert parts["debug"].default and not parts["short"].default
    assert (parts["short"].nodes, parts["short"].max_gpus_per_node, parts["short"].max_minutes) == (2, 4, 30)


def test_pyslurm_for_another_release_is_refused_with_the_backend_to_use(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata
    import sys

    monkeypatch.setattr(importlib.metadata, "version", lambda name: "25.11.2")
    monkeypatch.setitem(sys.modules, "pyslurm", None)  # the check must not import it: that initialises libslurm
    assert pyslurm_mismatch("slurm-wlm 22.05.8") == (
        "pyslurm 25.11.2 is for Slurm 25.11, the cluster runs 22.05; use --backend slurm (the Slurm commands) instead"
    )
    assert pyslurm_mismatch("slurm 25.11.0") is None
