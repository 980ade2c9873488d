"""The mode registry: one module per mode, found by its file, checked against the Mode interface."""

from __future__ import annotations

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
