"""What a plan asks Slurm for has one home (ti_slurm.slurm.request): the script's #SBATCH lines and pyslurm's
job description are made from it, and a spec's ``sbatch:`` can never override any of it."""

from __future__ import annotations

from typing import Any

import pytest

from ti_slurm.backends.pyslurm import own_fields
from ti_slurm.core.errors import SpecError
from ti_slurm.core.plan import JobPlan
from ti_slurm.core.site import SiteConfig
from ti_slurm.slurm.request import LAYOUT, MANAGED, component_options, refusal, refused_options
from ti_slurm.submitting.planning import make_plan
from ti_slurm.submitting.spec import parse_spec

BASE: dict[str, Any] = {"mode": "ddp", "nodes": 2, "command": "train", "output_dir": "/out"}

# specs that between them take every branch of component_options (the first test checks that they do)
WALK: list[dict[str, Any]] = [
    BASE,
    {**BASE, "name": "big", "gpus_per_node": 8, "mem": "20G", "partition": "debug", "account": "ml", "qos": "hi",
     "time": "1:00:00", "restart": {"max": 2}, "signal": {"name": "USR2", "before": 60}},
    {**BASE, "nodes": 2, "spare_nodes": 1, "restart": {"on": ["node_fail"], "in_place": 1}},
    {**BASE, "nodes": {"min": 2, "max": 4}},
    {**BASE, "after": {"jobs": [5631001]}},
    {"mode": "ps-worker", "command": "train", "ps": {"nodes": 1}, "worker": {"nodes": 2}, "restart": {"max": 1}},
]  # fmt: skip


def walk() -> list[JobPlan]:
    plans = [make_plan(parse_spec(doc), submission="s1") for doc in WALK]
    swept = plans[0].replace(points=({"lr": "0.1"}, {"lr": "0.2"}), max_parallel=1)
    return [*plans, swept]


def emitted(plan: JobPlan) -> set[str]:
    return {name for i in range(len(plan.components)) for name in component_options(plan, i)}


def test_the_walk_takes_every_option_ti_slurm_can_ask_for() -> None:
    assert set().union(*map(emitted, walk())) == set(MANAGED)


@pytest.mark.parametrize("option", sorted(refused_options()))
def test_a_spec_cannot_set_what_ti_slurm_asks_for_or_undo_it(option: str) -> None:
    """Derived from the options function: a new option ti-slurm emits is refused in ``sbatch:`` with no list to
    keep; each refusal names the option and what ti-slurm uses it for."""
    with pytest.raises(SpecError) as err:
        parse_spec({**BASE, "sbatch": {option: "x"}})
    assert str(err.value).startswith(f"sbatch.{option}: 'x': --{option}")
    assert "\n" not in str(err.value)


def test_undoing_options_are_refused_with_what_they_undo() -> None:
    assert refusal("no-requeue") == (
        "--no-requeue: it undoes --requeue, which ti-slurm sets for requeueing a preempted or failed job (restart)"
    )
    assert refusal("partit") == "--partit is what sbatch reads as --partition: ti-slurm sets it for partition"
    assert refusal("constraint") is None and refusal("exclusive") is None and refusal("nodelist") is None


def test_several_refused_options_are_one_line_naming_each() -> None:
    doc = {**BASE, "restart": {"max": 2}, "sbatch": {"signal": "B:USR1@30", "no-requeue": True, "hint": "x"}}
    with pytest.raises(SpecError) as err:
        parse_spec(doc)
    text = str(err.value)
    assert text.startswith("sbatch: ") and "--signal: ti-slurm sets it" in text and "--no-requeue: it undoes" in text
    assert "hint" not in text.split(": ", 2)[2]  # the options sbatch may take are not named as refused


def test_a_users_extra_options_come_after_ti_slurms_and_false_ones_are_left_out() -> None:
    plan = make_plan(parse_spec({**BASE, "sbatch": {"exclusive": True, "constraint": "a100", "hold": False}}))
    options = list(component_options(plan, 0).items())
    assert options[-2:] == [("constraint", "a100"), ("exclusive", True)]
    assert "hold" not in dict(options)


def test_the_site_chooses_expedited_requeue() -> None:
    doc = {**BASE, "restart": {"max": 1}}
    assert component_options(make_plan(parse_spec(doc)), 0)["requeue"] is True
    expedited = make_plan(parse_spec(doc), SiteConfig(expedited_requeue=True))
    assert component_options(expedited, 0)["requeue"] == "expedite"


@pytest.mark.parametrize("plan", walk(), ids=lambda p: f"{p.mode}-{len(p.components)}")
def test_every_option_ti_slurm_asks_for_has_a_pyslurm_field(plan: JobPlan) -> None:
    options = component_options(plan, 0)
    for name, value in options.items():
        assert own_fields(name, value, options), name


def test_layout_options_are_not_emitted() -> None:
    assert not set(LAYOUT) & set(MANAGED)
    assert all(not set(LAYOUT) & emitted(plan) for plan in walk())
