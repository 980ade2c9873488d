"""The job path: each node's step runs ``python -I -S ti_slurm/job/main.py`` with light imports only."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ti_slurm.core.plan import Component, JobPlan
from ti_slurm.core.shell import shell_quote
from ti_slurm.job import main_command

# Never on the job path: the heavy libraries, and the stdlib modules only the CLI or running a command need.
NOT_ON_THE_JOB_PATH = {
    *("pydantic", "jinja2", "yaml", "paramiko", "argparse", "typing", "tomllib", "subprocess", "shlex"),
    *("json", "re", "dataclasses", "inspect", "enum"),
}

SLURM_ENV = {
    "SLURM_JOB_ID": "123",
    "SLURM_JOB_NODELIST": "rack[01-02]-gpu[001-003]",
    "SLURM_NODEID": "4",
    "TI_SLURM_NODE_ADDR": "10.0.0.1",
    "PATH": os.environ["PATH"],
}


def write_plan(tmp_path: Path, mode: str = "mpi", nodes: int = 6) -> Path:
    plan = JobPlan(name="t", mode=mode, command="true", components=(Component(mode, nodes, 8, 1),))
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json())
    return path


def run_job_main(*args: str, env: dict[str, str], extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*main_command(sys.executable, *args)[:3], *extra, *main_command(sys.executable, *args)[3:]],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_print_env_gives_this_nodes_contract(tmp_path: Path) -> None:
    plan = write_plan(tmp_path)
    out = run_job_main("node", str(plan), "0", str(tmp_path), "--print-env", env=SLURM_ENV)
    assert out.returncode == 0, out.stderr
    exported = dict(line.removeprefix("export ").split("=", 1) for line in out.stdout.splitlines())
    assert exported["INDEX"] == "4"
    assert exported["NODE_IP_SLOT_LIST"] == ",".join(["10.0.0.1:8"] * 6)
    assert exported["NODE_LIST"].split(",")[4] == "rack02-gpu002:8"
    assert (tmp_path / "hostfile").read_text().splitlines()[4] == "rack02-gpu002 slots=8"


def test_the_job_path_imports_nothing_heavy(tmp_path: Path) -> None:
    plan = write_plan(tmp_path)
    out = run_job_main("node", str(plan), "0", str(tmp_path), "--print-env", env=SLURM_ENV, extra=("-X", "importtime"))
    assert out.returncode == 0, out.stderr
    imported = {m.group(1).strip().split(".")[0] for m in re.finditer(r"\|\s*([\w.]+)\s*$", out.stderr, re.M)}
    assert "ti_slurm" in imported  # the check sees the imports at all
    assert imported & NOT_ON_THE_JOB_PATH == set()


def test_pythonpath_and_site_packages_cannot_shadow_the_job_path(tmp_path: Path) -> None:
    fake = tmp_path / "fake"
    (fake / "ti_slurm").mkdir(parents=True)
    (fake / "ti_slurm" / "__init__.py").write_text("raise SystemExit('shadowed')\n")
    (fake / "json.py").write_text("raise SystemExit('shadowed')\n")
    plan = write_plan(tmp_path)
    env = SLURM_ENV | {"PYTHONPATH": str(fake)}
    out = run_job_main("node", str(plan), "0", str(tmp_path), "--print-env", env=env)
    assert out.returncode == 0, out.stderr
    assert "shadowed" not in out.stderr


def test_a_step_outside_slurm_is_one_clear_line(tmp_path: Path) -> None:
    plan = write_plan(tmp_path)
    out = run_job_main("node", str(plan), "0", str(tmp_path), env={"PATH": os.environ["PATH"]})
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "ti-slurm: error: SLURM_JOB_ID is not set: run this inside a Slurm job step (srun), or use the local runner"
    ]


def test_a_bad_plan_or_group_is_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "junk.json").write_text("{not json")
    for args, needle in (
        (("node", str(tmp_path / "missing.json"), "0", str(tmp_path)), "missing.json: cannot read it"),
        (("node", str(tmp_path / "junk.json"), "0", str(tmp_path)), "junk.json: cannot read it"),
        (("node", str(write_plan(tmp_path)), "7", str(tmp_path)), "component '7' is not a component of this mpi job"),
    ):
        out = run_job_main(*args, env=SLURM_ENV)
        assert out.returncode == 2
        assert len(out.stderr.splitlines()) == 1 and needle in out.stderr, out.stderr


def test_bad_arguments_print_the_usage(tmp_path: Path) -> None:
    out = run_job_main("node", "only-a-plan", env=SLURM_ENV)
    assert out.returncode == 2
    assert out.stderr.startswith("usage: main.py node PLAN COMPONENT JOB_DIR")


@given(st.text())
def test_shell_quote_is_shlex_quote(value: str) -> None:
    assert shell_quote(value) == shlex.quote(value)


def test_shell_quote_round_trips_through_bash() -> None:
    for value in ("", "a b", "it's", "$HOME", "`id`", "a\nb", "x;rm -rf /", "ü"):
        echoed = subprocess.run(
            ["bash", "-c", f"printf %s {shell_quote(value)}"], capture_output=True, text=True, check=True
        )
        assert echoed.stdout == value


# -- the boundary: ti_slurm/job and ti_slurm/core import only the standard library and light modules ---
PACKAGE = Path(main_command("python3")[3]).resolve().parents[1]  # <root>/ti_slurm
# what each light package may import beyond the standard library and itself
ALLOWED = {
    "job": ("ti_slurm.job", "ti_slurm.core", "ti_slurm.slurm"),
    "core": ("ti_slurm.core",),
    "slurm": ("ti_slurm.slurm", "ti_slurm.core"),
}
# Ray's node runtime asks Ray itself how many nodes joined, in a process of its own (the job's Ray); a node
# with GPUs reads them through NVML when nvidia-ml-py is installed (imported only there)
FRAMEWORK_IMPORTS = {("ray.py", "ray"), ("usage.py", "pynvml")}


def light_modules(package: str) -> list[Path]:
    return sorted((PACKAGE / package).rglob("*.py"))


def job_modules() -> list[Path]:
    return light_modules("job") + light_modules("core") + light_modules("slurm")


def runtime_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in ``path`` that runs (not under ``if TYPE_CHECKING:``)."""
    import ast

    tree = ast.parse(path.read_text())
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            skipped.update(id(n) for body in node.body for n in ast.walk(body))
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_the_light_packages_import_only_the_standard_library_and_what_they_may(package: str) -> None:
    stdlib = sys.stdlib_module_names
    offenders = []
    for path in light_modules(package):
        for line, module in runtime_imports(path):
            top = module.split(".")[0]
            inside = module == "ti_slurm" or module.startswith(ALLOWED[package])
            if not (top in stdlib or top == "__future__" or inside or (path.name, module) in FRAMEWORK_IMPORTS):
                offenders.append(f"{package}/{path.name}:{line}: {module}")
    assert offenders == []
    assert len(light_modules(package)) > 2  # the scan sees the package at all


def test_importing_every_job_module_loads_no_third_party_package(tmp_path: Path) -> None:
    root = PACKAGE.parent
    names = [".".join(p.relative_to(root).with_suffix("").parts) for p in job_modules() if p.name != "__main__.py"]
    probe = (
        f"import sys; sys.path.insert(0, {str(root)!r}); import importlib\n"
        f"for name in {names!r}: importlib.import_module(name)\n"
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run([sys.executable, "-I", "-S", "-c", probe], capture_output=True, text=True, check=True)
    loaded = set(out.stdout.split())
    assert "ti_slurm" in loaded
    assert loaded & {"pydantic", "jinja2", "yaml", "paramiko", "pyslurm", "ray", "torch"} == set()


def test_importing_the_package_is_free() -> None:
    probe = (
        f"import sys; sys.path.insert(0, {str(PACKAGE.parent)!r}); before = set(sys.modules); import ti_slurm; "
        "print(' '.join(sorted(set(sys.modules) - before)))"
    )
    out = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["ti_slurm"]
