"""The README's first command, copied as printed, on a fresh Debian 12 (a minimal root from Debian's own
packages, a new user with sudo, a copy of this checkout): it installs ti-slurm into a venv and trains the
DDP example to COMPLETED (ci/fresh-debian does the setting up and reads the block from the README). Then
the same user runs every local block of the docs as printed (ci/docs-tour): the quick start, `init` for each
mode, the Python API, the console's scalars writer and the MindSpore recipe; mpirun and MindSpore's libgomp1
missing each stop the job before its command, naming what to install, and a `python:` that does not exist is
one line at submit."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.conftest import ROOT


def test_the_readme_first_command_succeeds_on_a_fresh_debian_12() -> None:
    if os.geteuid() != 0 or shutil.which("mmdebstrap") is None:
        pytest.skip("needs root and mmdebstrap (apt install mmdebstrap) to make a fresh Debian root")
    res = subprocess.run([str(ROOT / "ci/fresh-debian"), "--docs"], capture_output=True, text=True, timeout=2400)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "COMPLETED" in res.stderr + res.stdout
    assert "docs-tour: every block ran as printed" in res.stderr, res.stderr[-3000:]
