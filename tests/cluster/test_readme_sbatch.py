"""The README's hand-written sbatch example runs on the cluster exactly as printed."""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.usefixtures("cluster")


def readme_block() -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- by-hand-sbatch:.*?-->\n```bash\n(.*?)```", text, re.S)
    assert m, "the README lost its by-hand sbatch example"
    return m.group(1)


def test_example_file_is_the_readme_block() -> None:
    assert (ROOT / "examples" / "ddp" / "by-hand.sbatch").read_text() == readme_block()


def test_readme_sbatch_example_trains_on_two_nodes(tmp_path) -> None:
    script = tmp_path / "by-hand.sbatch"
    script.write_text(readme_block())
    job = subprocess.run(["sbatch", "--parsable", str(script)], cwd=ROOT, capture_output=True, text=True, check=True)
    job_id = job.stdout.strip()
    out = ROOT / f"ddp-by-hand-{job_id}.out"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            queued = subprocess.run(["squeue", "-h", "-j", job_id], capture_output=True, text=True, check=False)
            if not queued.stdout.strip():
                break
            time.sleep(1)
        text = out.read_text()
        ranks = dict(re.findall(r"rank (\d)/4 on (node\d\d)", text))
        assert sorted(ranks) == ["0", "1", "2", "3"], text
        assert len(set(ranks.values())) == 2
        assert text.count("in_sync=True") == 4
    finally:
        out.unlink(missing_ok=True)
