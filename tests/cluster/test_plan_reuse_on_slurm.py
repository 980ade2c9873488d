"""`ti-slurm submit` of a spec file submitted before, every input as it was, sends the plan and script kept
then as a new submission: a job of its own that runs, is recorded and followed like any other. A mark planted
in the kept script (a nice value) shows the kept one went; nodes left out take the whole path again."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.usefixtures("cluster")


def field_of(job_id: str, name: str) -> str:
    shown = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True).stdout
    return next((f.split("=", 1)[1] for f in shown.split() if f.startswith(f"{name}=")), "")


def test_a_spec_submitted_before_goes_as_kept_and_runs_as_a_job_of_its_own(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    env = {"XDG_RUNTIME_DIR": str(run), "XDG_STATE_HOME": str(tmp_path / "state")}
    spec = tmp_path / "job.yaml"
    spec.write_text(f"mode: ddp\nnodes: 2\ncommand: echo rank $RANK of $WORLD_SIZE\noutput_dir: {tmp_path / 'out'}\n")
    first = run_cli("submit", "--wait", str(spec), env=env, timeout=300)
    assert first.returncode == 0, first.stderr
    (entry,) = (run / f"ti-slurm-{os.getuid()}" / "plans").glob("*.json")
    data = json.loads(entry.read_text())
    assert data["backend"] == "slurm"
    data["script"] = data["script"].replace("#!/bin/bash\n", "#!/bin/bash\n#SBATCH --nice=7\n", 1)
    entry.write_text(json.dumps(data))

    second = run_cli("submit", "--wait", str(spec), env=env, timeout=300)
    assert second.returncode == 0, second.stderr
    ids = [first.stdout.split()[0], second.stdout.split()[0]]
    assert ids[0] != ids[1] and field_of(ids[1], "Nice") == "7" and field_of(ids[0], "Nice") == "0"
    plans = [json.loads((tmp_path / "out" / i / "plan.json").read_text()) for i in ids]
    assert plans[0]["submission"] != plans[1]["submission"]  # a submission of its own, also where Slurm keeps it
    assert [field_of(i, "Comment") for i in ids] == [f"ti-slurm:{p['submission']}" for p in plans]
    assert plans[0] | {"submission": ""} == plans[1] | {"submission": ""}
    logs = run_cli("logs", ids[1], "--node", "1", env=env)
    assert logs.stdout == "rank 1 of 2\n", logs.stdout + logs.stderr
    status = json.loads(run_cli("status", ids[1], "--json", env=env).stdout)
    assert status["state"] == "COMPLETED"
    listed = run_cli("list", env=env).stdout
    assert all(job_id in listed for job_id in ids), listed

    # a node this user's jobs avoid: said, and left out, by the whole path (the kept plan has no such line)
    avoided = tmp_path / "state" / "ti-slurm" / "avoided"
    avoided.mkdir(parents=True, mode=0o700)
    now = time.time()
    entry_of = {"node": "node01", "cause": "gpu_fault", "job": "1", "cluster": "", "key": "1/0/node01",
                "since": now, "until": now + 3600, "line": "gpu_fault in job 1"}  # fmt: skip
    (avoided / "nodes.json").write_text(json.dumps([entry_of]))
    third = run_cli("submit", str(spec), env=env)
    assert third.returncode == 0 and "leaving out node01: gpu_fault in job 1" in third.stderr, third.stderr
    assert field_of(third.stdout.split()[0], "Nice") == "0"
