"""Two real users on the test cluster's login: another user's Slurm job is never run again as you. Their job
id names their job directory (Slurm knows it from their job's output path), where they may leave any plan;
``ti-slurm resubmit`` of that id, through the CLI as a process, is one line and submits nothing."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.factories import plan_from

pytestmark = pytest.mark.usefixtures("cluster")


def test_resubmit_of_anplain_users_slurm_job_runs_nothing_as_you(tmp_path: Path, plain_user: str) -> None:
    shared = Path(tempfile.mkdtemp(prefix="ti-slurm-shared-", dir="/tmp"))  # a team's folder: open to all
    shared.chmod(0o1777)
    mark = shared / "ran-as"
    try:
        job = subprocess.run(
            ["runuser", "-u", plain_user, "--", "sbatch", "--parsable", f"--output={shared}/slurm-%j.out",
             "--wrap=sleep 120"],
            capture_output=True, text=True, check=True, cwd=shared,
        )  # fmt: skip
        theirs = job.stdout.strip().split(";")[0]
        name = f"planted-{shared.name}"
        spec = {"name": name, "mode": "ddp", "nodes": 1, "output_dir": str(shared)}
        hostile = plan_from(spec, command=f"id -un > {mark}")
        planted = subprocess.run(
            ["runuser", "-u", plain_user, "--", "sh", "-c",
             f"mkdir -p {shared}/{theirs} && cat > {shared}/{theirs}/plan.json && chmod 755 {shared}/{theirs}"],
            input=hostile.to_json(), capture_output=True, text=True,
        )  # fmt: skip
        assert planted.returncode == 0, planted.stderr
        env = {"XDG_STATE_HOME": str(tmp_path / "state")}
        res = run_cli("resubmit", theirs, cwd=tmp_path, env=env)
        assert res.returncode != 0 and res.stdout == "", res.stdout + res.stderr
        assert res.stderr.startswith(f"ti-slurm: error: job {theirs}: not resubmitted: it is not a job of yours (")
        assert res.stderr.count("\n") == 1
        time.sleep(3)
        mine = subprocess.run(["squeue", "-h", "-u", "root", "-n", name, "-o", "%i"], capture_output=True, text=True)
        assert mine.returncode == 0 and mine.stdout.strip() == ""  # nothing submitted as you
        assert not mark.exists()
    finally:
        subprocess.run(["scancel", "-u", plain_user], capture_output=True)
        shutil.rmtree(shared, ignore_errors=True)
