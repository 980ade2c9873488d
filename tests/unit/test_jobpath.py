"""The job path: each node's step runs ``python -I -S jobpath.py`` with light imports only."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from ti_slurm import jobpath
from ti_slurm.plan import Component, JobPlan

# Never on the job path: the heavy libraries, and the stdlib modules only the CLI or running a command need.
NOT_ON_THE_JOB_PATH = {
    *("pydantic", "jinja2", "yaml", "paramiko", "argparse", "typing", "tomllib", "subprocess", "shlex"),
    *("json", "re", "dataclasses", "inspect", "enum"),
}

SLURM_ENV = {
    "SLURM_JOB_ID": "123",
    "SLURM_JOB_NODELIST": "rack[01-02]-gpu[001-003]",
    "SLURM_NODEID": "4",
    "TI_SLURM_NODE_ADDR": "10.0.0.1",
    "PATH": os.environ["PATH"],
}


def write_plan(tmp_path: Path, mode: str = "mpi", nodes: int = 6) -> Path:
    plan = JobPlan(name="t", mode=mode, command="true", components=(Component(mode, nodes, 8, 1),))
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json())
    return path


def run_jobpath(*args: str, env: dict[str, str], extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*jobpath.command(sys.executable, *args)[:3], *extra, *jobpath.command(sys.executable, *args)[3:]],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_print_env_gives_this_nodes_contract(tmp_path: Path) -> None:
    plan = write_plan(tmp_path)
    out = run_jobpath("step", str(plan), "0", str(tmp_path), "--print-env", env=SLURM_ENV)
    assert out.returncode == 0, out.stderr
    exported = dict(line.removeprefix("export ").split("=", 1) for line in out.stdout.splitlines())
    assert exported["INDEX"] == "4"
    assert exported["NODE_IP_SLOT_LIST"] == ",".join(["10.0.0.1:8"] * 6)
    assert exported["NODE_LIST"].split(",")[4] == "rack02-gpu002:8"
    assert (tmp_path / "hostfile").read_text().splitlines()[4] == "rack02-gpu002 slots=8"


def test_the_job_path_imports_nothing_heavy(tmp_path: Path) -> None:
    plan = write_plan(tmp_path)
    out = run_jobpath("step", str(plan), "0", str(tmp_path), "--print-env", env=SLURM_ENV, extra=("-X", "importtime"))
    assert out.returncode == 0, out.stderr
    imported = {m.group(1).strip().split(".")[0] for m in re.finditer(r"\|\s*([\w.]+)\s*$", out.stderr, re.M)}
    assert "ti_slurm" in imported  # the check sees the imports at all
    assert imported & NOT_ON_THE_JOB_PATH == set()


def test_pythonpath_and_site_packages_cannot_shadow_the_job_path(tmp_path: Path) -> None:
    fake = tmp_path / "fake"
    (fake / "ti_slurm").mkdir(parents=True)
    (fake / "ti_slurm" / "__init__.py").write_text("raise SystemExit('shadowed')\n")
    (fake / "json.py").write_text("raise SystemExit('shadowed')\n")
    plan = write_plan(tmp_path)
    env = SLURM_ENV | {"PYTHONPATH": str(fake)}
    out = run_jobpath("step", str(plan), "0", str(tmp_path), "--print-env", env=env)
    assert out.returncode == 0, out.stderr
    assert "shadowed" not in out.stderr


def test_a_step_outside_slurm_is_one_clear_line(tmp_path: Path) -> None:
    plan = write_plan(tmp_path)
    out = run_jobpath("step", str(plan), "0", str(tmp_path), env={"PATH": os.environ["PATH"]})
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "ti-slurm: error: SLURM_JOB_ID is not set: run this inside a Slurm job step (srun), or use the local runner"
    ]


def test_a_bad_plan_or_group_is_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "junk.json").write_text("{not json")
    for args, needle in (
        (("step", str(tmp_path / "missing.json"), "0", str(tmp_path)), "missing.json: cannot read it"),
        (("step", str(tmp_path / "junk.json"), "0", str(tmp_path)), "junk.json: cannot read it"),
        (("step", str(write_plan(tmp_path)), "7", str(tmp_path)), "group '7' is not a component of this mpi job"),
    ):
        out = run_jobpath(*args, env=SLURM_ENV)
        assert out.returncode == 2
        assert len(out.stderr.splitlines()) == 1 and needle in out.stderr, out.stderr


def test_bad_arguments_print_the_usage(tmp_path: Path) -> None:
    out = run_jobpath("step", "only-a-plan", env=SLURM_ENV)
    assert out.returncode == 2
    assert out.stderr.startswith("usage: jobpath.py step PLAN GROUP JOB_DIR")


@given(st.text())
def test_shell_quote_is_shlex_quote(value: str) -> None:
    assert jobpath.shell_quote(value) == shlex.quote(value)


def test_shell_quote_round_trips_through_bash() -> None:
    for value in ("", "a b", "it's", "$HOME", "`id`", "a\nb", "x;rm -rf /", "ü"):
        echoed = subprocess.run(
            ["bash", "-c", f"printf %s {jobpath.shell_quote(value)}"], capture_output=True, text=True, check=True
        )
        assert echoed.stdout == value
