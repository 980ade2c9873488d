"""Rendered sbatch scripts against checked-in files; scripts pass bash -n and shellcheck.

Regenerate after an intended change with: UPDATE_GOLDEN=1 pytest tests/golden
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ti_slurm.core.plan import JobPlan
from ti_slurm.core.site import SiteConfig
from ti_slurm.submitting.planning import make_plan
from ti_slurm.submitting.script import render
from ti_slurm.submitting.spec import parse_spec

EXPECTED = Path(__file__).parent / "expected"
SPECS: dict[str, dict[str, object]] = {
    "ddp": {
        "name": "demo",
        "mode": "ddp",
        "command": "python train.py --epochs 1",
        "nodes": 2,
        "gpus_per_node": 8,
        "cpus_per_node": 4,
        "partition": "debug",
        "env": {"FOO": "bar"},
        "time": "1:00:00",
        "mem": "16G",
        "account": "ml",
        "qos": "normal",
        "sbatch": {"exclusive": True, "constraint": "a100&ib"},
    },
    "mpi": {"mode": "mpi", "command": "mpirun -np $GPU_NUM -H $NODE_IP_SLOT_LIST python3 train.py", "nodes": 4},
    "horovod": {
        "mode": "horovod",
        "command": "horovodrun -np $GPU_NUM -H $NODE_IP_SLOT_LIST python train.py",
        "nodes": 2,
        "gpus_per_node": 1,
    },
    "ps-worker": {
        "mode": "ps-worker",
        "command": "python train.py",
        "ps": {"nodes": 2, "cpus_per_node": 2},
        "worker": {"nodes": 2, "gpus_per_node": 1},
    },
    "ray": {
        "mode": "ray",
        "command": "cd /opt/ml/code; python job.py",
        "head": {"cpus_per_node": 2},
        "worker_groups": [{"nodes": 1, "cpus_per_node": 2}, {"nodes": 1, "cpus_per_node": 2, "gpus_per_node": 1}],
    },
    "restart": {
        "mode": "ps-worker",
        "command": "python train.py",
        "ps": {"nodes": 1},
        "worker": {"nodes": 2},
        "time": "4:00:00",
        "restart": {"max": 3, "on": ["preempt", "timeout", "failure"]},
        "signal": {"name": "SIGUSR1", "before": 300},
        "watchdog": {"silence": 600},
    },
    "elastic": {
        "mode": "ps-worker",
        "command": "python train.py",
        "ps": {"nodes": 1},
        "worker": {"nodes": {"min": 2, "max": 4}},
        "spare_nodes": 1,
        "restart": {"max": 1, "on": ["node_fail", "failure"], "in_place": 2},
    },
    "hostile": {
        "name": "x",
        "mode": "ddp",
        "nodes": 1,
        "command": "echo '$(touch CANARY)' \"`touch CANARY`\"; echo TI_SLURM_PLAN; echo done",
        "env": {"EVIL": "'; touch CANARY; '", "NL": "a\nTI_SLURM_PLAN\ntouch CANARY"},
        "output_dir": "/tmp/out dir/%j 'q' $(touch CANARY)",
        "workdir": "/tmp/w d/$(touch CANARY)",
        "sbatch": {"constraint": 'a"b\\c #x'},
    },
}


def plan_for(name: str) -> JobPlan:
    spec = parse_spec({"output_dir": "/scratch/jobs", "workdir": "/home/u/proj", **SPECS[name]})
    return make_plan(spec, SiteConfig(rdma_partitions=("rdma",)), python="/opt/ti-slurm/bin/python")


@pytest.mark.parametrize("name", SPECS)
def test_rendered_script_matches_golden(name: str) -> None:
    text = render(plan_for(name))
    path = EXPECTED / f"{name}.sh"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


@pytest.mark.parametrize("name", SPECS)
def test_rendered_script_passes_bash_n_and_shellcheck(name: str, tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text(render(plan_for(name)))
    subprocess.run(["bash", "-n", str(script)], check=True)
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed (apt-get install shellcheck)")
    res = subprocess.run(["shellcheck", "-s", "bash", str(script)], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout


def test_heterogeneous_modes_have_one_component_per_role() -> None:
    assert render(plan_for("ps-worker")).count("#SBATCH hetjob") == 1
    assert render(plan_for("ray")).count("#SBATCH hetjob") == 2
    assert "hetjob" not in render(plan_for("ddp"))


def test_hostile_values_are_data_not_code(tmp_path: Path) -> None:
    """Run the rendered preamble: nothing in user values executes, and the plan survives intact."""
    plan = plan_for("hostile")
    out = tmp_path / "out"
    plan = JobPlan.from_json(plan.to_json().replace("/tmp/out dir/%j 'q' $(touch CANARY)", str(out)))
    plan = JobPlan(**{**plan.__dict__, "workdir": str(tmp_path), "python": "/bin/echo"})
    script = tmp_path / "job.sh"
    script.write_text(render(plan))
    res = subprocess.run(
        ["bash", str(script)],
        cwd=tmp_path,
        env={"SLURM_JOB_ID": "12", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    assert not list(tmp_path.rglob("CANARY"))
    written = JobPlan.from_json((out / "12" / "plan.json").read_text())
    assert written.command == SPECS["hostile"]["command"]
    assert written.env == SPECS["hostile"]["env"]


def test_percent_in_output_dir_is_escaped_for_sbatch() -> None:
    text = render(plan_for("hostile"))
    assert "#SBATCH --output=\"/tmp/out dir/%%j 'q' $(touch CANARY)/slurm-%j.out\"" in text


def test_user_text_is_never_a_template() -> None:
    spec = parse_spec({"mode": "ddp", "nodes": 1, "command": "echo {{ plan.python }} {% raw %}", "name": "t"})
    text = render(make_plan(spec, python="/p"))
    assert "echo {{ plan.python }} {% raw %}" in text


def test_a_reused_job_id_keeps_the_earlier_jobs_record(tmp_path: Path) -> None:
    """Slurm ids can repeat (a reset controller, two clusters on one output_dir): nothing earlier is lost."""
    out = tmp_path / "out"

    def run(submission: str) -> None:
        spec = parse_spec({"mode": "ddp", "nodes": 1, "command": "true", "output_dir": str(out)})
        plan = make_plan(spec, python="/bin/echo", submission=submission)
        script = tmp_path / f"{submission}.sh"
        script.write_text(render(plan))
        env = {"SLURM_JOB_ID": "12", "PATH": "/usr/bin:/bin"}
        subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, check=True, capture_output=True)

    run("first")
    (out / "12" / "logs").mkdir()
    (out / "12" / "logs" / "ddp-0.log").write_text("the first job's log\n")
    run("first")  # the same job again (a requeue): the same directory
    assert [p.name for p in out.iterdir()] == ["12"]
    run("second")  # another job with the same id
    earlier = [p for p in out.iterdir() if p.name.startswith("12.earlier.")]
    assert len(earlier) == 1 and (earlier[0] / "logs" / "ddp-0.log").read_text() == "the first job's log\n"
    assert JobPlan.from_json((earlier[0] / "plan.json").read_text()).submission == "first"
    assert JobPlan.from_json((out / "12" / "plan.json").read_text()).submission == "second"
    assert oct((out / "12").stat().st_mode & 0o777) == "0o700"
