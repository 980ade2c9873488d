"""Training images with the local runner (every node a process here): the same node step, no Slurm.

Needs enroot and crun with the test images (``ci/containers/setup``); skipped without them.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_cli

IMAGES = Path(os.environ.get("TI_SLURM_IMAGES", "/var/lib/ti-slurm-test/images"))


@pytest.mark.parametrize("runtime,image", [("pyxis", "base.sqsh"), ("oci", "base/bundle")])
def test_a_local_job_runs_its_command_in_the_image(tmp_path: Path, runtime: str, image: str) -> None:
    if not (IMAGES / image).exists() or shutil.which("enroot") is None:
        pytest.skip(f"no {IMAGES / image} or no enroot (ci/containers/setup)")
    spec = tmp_path / "job.yaml"
    command = "echo rank=$RANK image=$(cat /.image-method) path=$PATH > out-$RANK"
    spec.write_text(
        f"mode: ddp\nnodes: 2\ncommand: '{command}'\noutput_dir: {tmp_path / 'out'}\n"
        f"container: {{image: {IMAGES / image}, runtime: {runtime}}}\n"
    )
    res = run_cli("submit", "--local", "--wait", str(spec), cwd=tmp_path, env={"XDG_STATE_HOME": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    for rank in (0, 1):  # the workdir is mounted at its own path; the image's own PATH
        expected = f"rank={rank} image=mmdebstrap path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
        assert (tmp_path / f"out-{rank}").read_text() == expected
