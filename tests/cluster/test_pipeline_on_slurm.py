"""Pipelines on the real cluster: docs/pipelines.md's blocks as printed, a train job that fails or succeeds and the
jobs that wait for it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ti_slurm
from tests.conftest import ROOT, run_cli
from tests.docs import doc_block
from ti_slurm import JobState

pytestmark = pytest.mark.usefixtures("cluster")


def specs(tmp_path: Path, train_exit: int) -> None:
    """train.yaml (exits ``train_exit`` once the test has seen what waits for it: :func:`let_train_end`),
    eval.yaml and report.yaml (each leaves a mark)."""
    jobs = tmp_path / "jobs"
    train = f"while [ ! -e train-may-end ]; do sleep 0.2; done; exit {train_exit}"
    for name, command in (("train", train), ("eval", "touch ran-eval"), ("report", "touch ran-report")):
        (tmp_path / f"{name}.yaml").write_text(
            f"mode: ddp\nnodes: 1\nname: {name}\nworkdir: {tmp_path}\noutput_dir: {jobs}\ncommand: '{command}'\n"
        )


def let_train_end(tmp_path: Path) -> None:
    """train, looping on its mark, exits now (the test has seen what waits for it)."""
    (tmp_path / "train-may-end").touch()


@pytest.mark.parametrize("train_exit", [0, 3], ids=["train succeeds", "train fails"])
def test_the_readme_pipeline_runs_eval_only_after_a_good_train_and_report_only_after_a_bad_one(
    tmp_path: Path, train_exit: int
) -> None:
    shell = doc_block("pipeline-example", "bash")
    specs(tmp_path, train_exit)
    res = subprocess.run(["bash", "-euc", shell + 'echo "$train"\n'], cwd=tmp_path, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    evaluate, report, train = res.stdout.split()
    waiting = run_cli("status", evaluate).stdout  # train runs until told: eval is still waiting for it
    assert f"waits for afterok:{train}" in waiting, waiting
    let_train_end(tmp_path)
    ended = {name: ti_slurm.get_job(job).wait(timeout=120) for name, job in (("eval", evaluate), ("report", report))}
    assert ti_slurm.get_job(train).wait(timeout=60).state is (JobState.COMPLETED if not train_exit else JobState.FAILED)
    ran, skipped = ("eval", "report") if train_exit == 0 else ("report", "eval")
    assert ended[ran].state is JobState.COMPLETED and (tmp_path / f"ran-{ran}").exists()
    assert ended[skipped].state is JobState.CANCELLED and not (tmp_path / f"ran-{skipped}").exists()
    why = r"never started: the jobs it waited for ended otherwise \((after\w+):(\d+)\S*\)"
    never = re.fullmatch(why, ended[skipped].reason)
    assert never and never[2] == train, ended[skipped].reason


def test_the_readme_python_pipeline_waits_for_train(tmp_path: Path) -> None:
    python = doc_block("pipeline-example", "python")
    specs(tmp_path, 0)
    program = "import ti_slurm\n" + python + "print(train.id, evaluate.id)\n"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    res = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    train, evaluate = res.stdout.split()
    waiting = run_cli("status", evaluate).stdout  # train runs until told: eval is still waiting for it
    assert f"afterok:{train}" in waiting, waiting
    let_train_end(tmp_path)
    assert ti_slurm.get_job(evaluate).wait(timeout=120).state is JobState.COMPLETED
    assert (tmp_path / "ran-eval").exists()
