"""ti-slurm as users install it: a wheel and an sdist built from the checkout (``python -m build``), their
metadata checked, the files the package needs at run time inside (the sbatch template, the console's pages
and scripts, ``py.typed``), and the wheel, not the checkout, installed in a fresh virtual environment where
``ti-slurm`` renders a job and prints its version."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NEEDED = (
    "ti_slurm/py.typed",
    "ti_slurm/submitting/templates/job.sh.j2",
    "ti_slurm/ui/templates/job.html.j2",
    "ti_slurm/ui/templates/list.html.j2",
    "ti_slurm/ui/static/console.js",
    "ti_slurm/ui/static/console.css",
)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("build", reason="python -m build: pip install build (the test extra has it)")
    out, tree = tmp_path_factory.mktemp("dist"), tmp_path_factory.mktemp("tree") / "ti-slurm"
    leave_out = shutil.ignore_patterns(
        ".git", ".*_cache", "__pycache__", "*.egg-info", "build", "dist", ".venv", "site"
    )  # (never "*cache*": submitting/plancache.py is the package's own)
    shutil.copytree(ROOT, tree, ignore=leave_out)  # built from a copy: nothing is written into the checkout
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(tree)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out


def test_the_wheel_and_the_sdist_hold_what_the_package_needs(built: Path) -> None:
    from ti_slurm.version import __version__

    wheel = next(built.glob("ti_slurm-*.whl"))
    sdist = next(built.glob("ti_slurm-*.tar.gz"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert all(name in names for name in NEEDED), sorted(set(NEEDED) - names)
    meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
    meta = Parser().parsestr(zipfile.ZipFile(wheel).read(meta_name).decode())
    assert meta["Name"] == "ti-slurm" and meta["Version"] == __version__ and meta["Requires-Python"] == ">=3.11"
    assert {"ui", "ssh", "test"} <= set(meta.get_all("Provides-Extra") or [])
    assert "# ti-slurm" in (meta.get_payload() or "")  # the README as its description
    entry = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "ti-slurm = ti_slurm.cli:entry" in entry
    with tarfile.open(sdist) as tar:
        inside = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    assert all(name in inside for name in NEEDED) and "pyproject.toml" in inside and "README.md" in inside


def test_the_wheel_installed_in_a_fresh_venv_renders_a_job(built: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    wheel = next(built.glob("ti_slurm-*.whl"))
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-deps", "--force-reinstall", str(wheel)],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert pip.returncode == 0, pip.stderr
    (tmp_path / "job.yaml").write_text("mode: ddp\nnodes: 2\ncommand: python train.py\n")
    render = subprocess.run([str(venv / "bin" / "ti-slurm"), "render", "job.yaml"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert render.returncode == 0 and "#SBATCH" in render.stdout, render.stderr
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import ti_slurm; print(ti_slurm.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path, timeout=60)  # fmt: skip
    assert str(venv) in where.stdout, where.stdout  # the wheel's copy, not the checkout's
