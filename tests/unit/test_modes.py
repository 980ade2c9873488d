"""The mode registry: one module per mode, found by its file, checked against the Mode interface."""

from __future__ import annotations

from pathlib import Path

import pytest

from ti_slurm.core.errors import ModeError
from ti_slurm.job.modes import Mode, get_mode, mode_names
from ti_slurm.submitting.planning import make_plan
from ti_slurm.submitting.spec import parse_spec


def test_every_mode_module_is_a_registered_mode() -> None:
    assert mode_names() == ("ddp", "horovod", "mindspore", "mpi", "ps-worker", "ray")
    for name in mode_names():
        mode = get_mode(name)
        assert isinstance(mode, Mode) and mode.name == name
        assert mode.ports_per_job >= len(mode.role_fields) * mode.ports_per_node


def test_an_unknown_mode_is_refused_by_name() -> None:
    with pytest.raises(
        ModeError, match="unknown mode 'dp'; expected one of: ddp, horovod, mindspore, mpi, ps-worker, ray"
    ):
        get_mode("dp")


def test_the_spec_takes_its_mode_list_from_the_registry() -> None:
    from ti_slurm.core.errors import SpecError

    names = "ddp, horovod, mindspore, mpi, ps-worker, ray"
    with pytest.raises(SpecError, match=rf"^mode: 'tf': expected one of: {names} \(see docs/modes\.md\)$"):
        parse_spec({"mode": "tf", "command": "x", "nodes": 1})


@pytest.mark.parametrize(
    "doc,names",
    [
        ({"mode": "ddp", "command": "x", "nodes": 2}, ["ddp"]),
        ({"mode": "horovod", "command": "x", "nodes": 2}, ["horovod"]),
        ({"mode": "ps-worker", "command": "x", "ps": {}, "worker": {"nodes": 2}}, ["ps", "worker"]),
        ({"mode": "ray", "command": "x", "worker_groups": [{}, {}]}, ["head", "worker1", "worker2"]),
    ],
)
def test_a_mode_turns_its_roles_into_components(doc: dict[str, object], names: list[str]) -> None:
    plan = make_plan(parse_spec(doc))
    assert [c.name for c in plan.components] == names
    # hand-written scripts (ti-slurm exec) name the same components
    assert get_mode(plan.mode).component_names(len(names)) == names


@pytest.mark.parametrize(("wait", "stopped", "runs"), [(300, False, 2), (0, False, 1), (300, True, 1)])
def test_a_ray_worker_whose_daemons_fail_while_the_head_waits_starts_them_once_more(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], wait: int, stopped: bool, runs: int
) -> None:
    """Ray gives a raylet a fixed 30 s to register: on a loaded node the worker's `ray start` fails. Within the
    head's wait for its nodes the worker starts Ray once more and records only the end; after that wait, or
    after a stop signal (a cancel, an in-place restart), the failure is the node's at once."""
    from tests.factories import job_plan
    from ti_slurm.job import process
    from ti_slurm.job.modes.ray import join_head

    monkeypatch.setattr(process, "_stop_signals", {15} if stopped else set())

    class Worker:
        plan = job_plan("ray", ("head", 1), ("worker1", 1), rendezvous_timeout=wait)

        def __init__(self) -> None:
            self.env = {"TI_SLURM_RAY_TEMP_DIR": "/nonexistent/ti-ray"}
            self.codes, self.recorded = [1, 0], []

        def run_command(self, command: str, record: bool = True) -> int:
            assert not record
            return self.codes.pop(0)

        def record(self, code: int) -> None:
            self.recorded.append(code)

    worker = Worker()
    code = join_head(worker, "ray start --block")  # type: ignore[arg-type]
    assert (code, worker.recorded, len(worker.codes)) == ((0, [0], 0) if runs == 2 else (1, [1], 1))
    assert ("starting it once more" in capsys.readouterr().err) is (runs == 2)


def test_the_heads_wait_for_its_nodes_asks_again_while_its_own_raylet_registers(tmp_path: Path) -> None:
    """On a loaded node the GCS answers before the head's raylet has registered, and `ray.init` fails with
    'Failed to connect to Ray cluster': the wait asks again until its timeout (a stand-in `ray` fails once)."""
    import subprocess
    import sys

    from ti_slurm.job.modes.ray import WAIT_FOR_NODES

    (tmp_path / "ray.py").write_text(
        "import os\nMARK = os.path.join(os.path.dirname(__file__), 'tried')\n"
        "def init(address, logging_level):\n"
        "    if not os.path.exists(MARK):\n        open(MARK, 'w').close()\n"
        "        raise ConnectionError('Failed to connect to Ray cluster at ' + address)\n"
        "def nodes():\n    return [{'Alive': True}, {'Alive': True}]\n"
        "def shutdown():\n    pass\n"
    )
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    waited = subprocess.run([sys.executable, "-c", WAIT_FOR_NODES, "10.0.0.1:6379", "2", "30"], env=env,
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert waited.returncode == 0, waited.stderr
    (tmp_path / "tried").unlink()
    gave_up = subprocess.run([sys.executable, "-c", WAIT_FOR_NODES, "10.0.0.1:6379", "2", "0"], env=env,
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    assert gave_up.returncode == 1 and "Failed to connect to Ray cluster" in gave_up.stderr
