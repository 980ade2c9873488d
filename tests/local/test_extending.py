"""Adding a mode is adding one module: a toy mode file dropped into a copy of the source tree's
``ti_slurm/job/modes/`` works through the CLI at once (spec validation, render, a local run on
three nodes with its roles, variables and success rule), with nothing else changed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parents[1] / "ti_slurm"


def cli(tree: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python3 -m ti_slurm ARGS`` from the copied source tree (not the installed one)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [sys.executable, "-m", "ti_slurm", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_a_toy_mode_is_one_module_dropped_into_the_modes_folder(tmp_path: Path) -> None:
    tree = tmp_path / "src"
    shutil.copytree(PACKAGE, tree / "ti_slurm", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(HERE / "extension" / "toy.py", tree / "ti_slurm" / "job" / "modes" / "toy.py")
    spec = tmp_path / "job.yaml"
    marks = tmp_path / "ran"  # the anchor ends once both runners have said their place (then they are stopped)
    marks.mkdir()
    command = (
        'echo "$TOY_ROLE at $TI_SLURM_COMPONENT: place $TOY_PLACE"; if [ "$TOY_ROLE" = anchor ]; then '
        f'until [ "$(ls {marks} | wc -l)" -ge 2 ]; do sleep 0.1; done; else touch {marks}/"${{TOY_PLACE%% *}}"; '
        "sleep 600; fi"
    )
    spec.write_text(f"mode: toy\nnodes: 3\ncommand: {command!r}\noutput_dir: {tmp_path / 'out'}\n")

    assert cli(tree, tmp_path, "render", str(spec)).returncode == 0  # the spec knows the mode by its file
    unknown = cli(PACKAGE.parent, tmp_path, "render", str(spec))  # the tree without the file does not
    assert unknown.returncode == 2 and "mode: 'toy'" in unknown.stderr

    run = cli(tree, tmp_path, "submit", str(spec), "--local", "--wait")
    assert run.returncode == 0, run.stdout + run.stderr
    job = run.stdout.split()[0]
    logs = {n: cli(tree, tmp_path, "logs", job, "--node", n).stdout for n in ("0", "1", "2")}
    assert "runner at runners: place 1 of 3" in logs["0"]
    assert "runner at runners: place 2 of 3" in logs["1"]
    assert "anchor at anchor: place 3 of 3" in logs["2"]
    status = cli(tree, tmp_path, "status", job).stdout
    assert "COMPLETED" in status  # the anchor's exit decided it; the runners were stopped as background
