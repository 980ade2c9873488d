"""The code's shape, read from the source: no import cycle, no class or function too big to read at once.

Imports count wherever they are written: at the top, inside functions (a lazy import is still a
dependency) and under ``if TYPE_CHECKING:`` (a type is one too). The package's facade,
``ti_slurm/__init__.py``, re-exports the API, so no module inside may import it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "ti_slurm"
MAX_CLASS_LINES = 200
MAX_FUNCTION_LINES = 60


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported_modules(name: str, tree: ast.AST) -> set[str]:
    """The package's modules that module ``name`` imports, anywhere in it."""
    package = name if MODULES[name].name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            # `from pkg import mod` depends on the module; `from pkg import name` on the package's own code
            submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in MODULES]
            targets = submodules if len(submodules) == len(node.names) else [base, *submodules]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:  # `from pkg import name`: name is a module or not
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    return {name: imported_modules(name, ast.parse(path.read_text())) for name, path in MODULES.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle (its modules in order, the first repeated at the end), or []."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = 2
        path.pop()
        return []

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return []


def test_the_graph_is_read_from_every_module_and_sees_lazy_and_typing_imports() -> None:
    graph = import_graph()
    assert len(graph) > 40
    assert "ti_slurm.job.contract" in graph["ti_slurm.job.node"]  # a top-level import
    assert "ti_slurm.submitting.specfile" in graph["ti_slurm.submitting.spec"]  # an import inside a function
    assert "ti_slurm.core.plan" in graph["ti_slurm.job.modes.base"]  # ... and under TYPE_CHECKING


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_one_that_imports_it_back() -> None:
    assert find_cycle(import_graph()) == []


# The layers, bottom first: a module imports only from its own layer or those below it. The kernel and
# Slurm's text serve every side; the in-job side (`job/`) needs nothing of the submit side. Above the
# following sit the faces, in three steps: where a job goes (the clusters' tables and choice, the routing of a
# submit), the API (a job's handle, submit, sweeps), and what users touch (the CLI, the console, the help made
# from the code, the package's facade). A module right below `ti_slurm/` is placed by its name: a new one fails
# `test_every_root_module_is_placed_by_name` until it is.
LAYERS = [
    ("kernel", ["ti_slurm.core", "ti_slurm.version"]),
    ("Slurm's text and requests", ["ti_slurm.slurm"]),
    ("in the job", ["ti_slurm.job"]),
    ("the submit pipeline", ["ti_slurm.submitting"]),
    ("transports", ["ti_slurm.transports"]),
    ("backends", ["ti_slurm.backends"]),
    ("following", ["ti_slurm.follow"]),
    ("admin", ["ti_slurm.admin"]),
    ("where a job goes", ["ti_slurm.clusters", "ti_slurm.routing"]),
    ("the API", ["ti_slurm.client", "ti_slurm.sweeps"]),
    ("what users touch", ["ti_slurm", "ti_slurm.__main__", "ti_slurm.cli", "ti_slurm.terminal", "ti_slurm.ui",
                          "ti_slurm.help"]),
]
ROOT = "ti_slurm"  # the facade: placed by its own name only, never as every module's prefix


def layer_of(module: str) -> int:
    """The index in LAYERS of the longest prefix naming ``module``'s folder or module."""
    found = [(len(prefix), index) for index, (_, prefixes) in enumerate(LAYERS) for prefix in prefixes
             if module == prefix or (prefix != ROOT and module.startswith(prefix + "."))]
    assert found, f"{module} is in no layer of LAYERS"
    return max(found)[1]


def test_every_root_module_is_placed_by_name() -> None:
    roots = {name for name, path in MODULES.items() if path.parent == PACKAGE}
    placed = {prefix for _, prefixes in LAYERS for prefix in prefixes}
    assert roots - placed == set()
    assert {"ti_slurm.client", "ti_slurm.cli", "ti_slurm.routing"} <= roots


def test_every_module_imports_only_its_own_layer_or_those_below() -> None:
    upward = [
        f"{name} ({LAYERS[layer_of(name)][0]}) imports {dep} ({LAYERS[layer_of(dep)][0]})"
        for name, deps in import_graph().items()
        for dep in sorted(deps)
        if layer_of(dep) > layer_of(name)
    ]
    assert upward == []
    assert layer_of("ti_slurm.job.supervisor.loop") == 2 and layer_of("ti_slurm.cli") == len(LAYERS) - 1
    assert layer_of("ti_slurm.routing") < layer_of("ti_slurm.client") < layer_of("ti_slurm.ui.app")


def source_of(module: str) -> ast.AST:
    return ast.parse(MODULES[module].read_text())


def test_the_clusters_face_asks_backends_and_never_reaches_past_them() -> None:
    """``clusters.py`` keeps the tables and the choice: what a cluster answers comes through the backend
    protocol (its capabilities), never by checking a backend's type or running its commands."""
    tree = source_of("ti_slurm.clusters")
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    attributes = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert "isinstance" not in calls
    assert attributes.isdisjoint({"transport", "command", "run", "client", "stdout"})
    assert not imported_modules("ti_slurm.clusters", tree) & {"ti_slurm.transports", "ti_slurm.backends.slurm",
                                                              "ti_slurm.backends.rest", "ti_slurm.backends.pyslurm"}


SLURM_TIME = re.compile(r"strptime|fromisoformat")  # a time read (strftime writes one: fine)
SLURM_FORMAT = re.compile(r"(%[A-Za-z.0-9]+[ |])+%[A-Za-z]+")  # sinfo/squeue -o "%P %t %D"
SLURM_PHRASES = ("to start at", "No jobs in the system", "Task launch for", "Submitted batch job", "SLURM_JWT=")


def test_slurms_text_is_read_in_slurm_only() -> None:
    """Every format ti-slurm asks Slurm's commands for, every phrase of theirs it looks for and every time it
    reads from them is in ``slurm/`` (checked against recordings of both releases there), nowhere else."""
    outside = []
    for name, path in MODULES.items():
        if name.startswith("ti_slurm.slurm"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            text = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
            text = node.attr if isinstance(node, ast.Attribute) else text
            if text is None:
                continue
            if SLURM_TIME.search(text) or SLURM_FORMAT.fullmatch(text.strip()):
                outside.append(f"{name}: {text!r}")
            outside += [f"{name}: {text!r}" for phrase in SLURM_PHRASES if phrase in text and name not in REDACTS]
    assert outside == []


REDACTS = {"ti_slurm.backends.rest"}  # hides SLURM_JWT= values in what it shows: it reads no token from Slurm


def definitions() -> list[tuple[str, ast.AST]]:
    found = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                found.append((name, node))
    return found


@pytest.mark.parametrize(("kind", "limit"), [(ast.ClassDef, MAX_CLASS_LINES), (ast.FunctionDef, MAX_FUNCTION_LINES)])
def test_no_class_or_function_is_too_long_to_read_at_once(kind: type, limit: int) -> None:
    too_long = [
        f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines"  # type: ignore[attr-defined]
        for name, node in definitions()
        if isinstance(node, kind) and node.end_lineno - node.lineno + 1 > limit  # type: ignore[attr-defined]
    ]
    assert too_long == []


def test_every_package_of_the_tree_is_in_the_wheel() -> None:
    """pyproject.toml lists the packages a regular install gets: a new folder left out would be missing
    from every install but an editable one (the job steps would fail to import it)."""
    import tomllib

    listed = set(tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    packages = {name for name, path in MODULES.items() if path.name == "__init__.py"}
    assert packages - listed == set()
