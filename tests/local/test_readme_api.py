"""docs/python-api.md's example, run exactly as printed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.docs import doc_block


def test_the_readme_python_example_trains_ddp_locally(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path))
    res = subprocess.run(
        [sys.executable, "-c", doc_block("python-api", "python")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    job_id = lines[0].split()[0]
    assert re.fullmatch(r"local-\d+", job_id) and lines[0].split()[1] in ("RUNNING", "PENDING")
    assert "COMPLETED every required step exited 0" in lines
    assert sum("in_sync=True" in line for line in lines) == 2  # ddp-1's two processes, from its log
    assert f"[('{job_id}', <JobState.COMPLETED: 'COMPLETED'>)]" == lines[-1]
