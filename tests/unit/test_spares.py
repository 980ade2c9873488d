"""Spare nodes and elastic size: which nodes an attempt runs on, what the spec and the script say, and each
node's place and count."""

from __future__ import annotations

from pathlib import Path

import pytest
from supervisor_fakes import FakeLauncher, events

from tests.factories import job_plan
from ti_slurm.core.errors import ContractError
from ti_slurm.core.plan import Component, JobPlan
from ti_slurm.core.states import JobState
from ti_slurm.job.contract import node_contract
from ti_slurm.job.supervisor.judge import Outcome
from ti_slurm.job.supervisor.loop import Supervisor
from ti_slurm.job.supervisor.spares import NodeSet
from ti_slurm.submitting.planning import make_plan
from ti_slurm.submitting.script import render
from ti_slurm.submitting.spec import load_spec


def with_spares(spares: int = 1, nodes: int = 2, **fields: object) -> JobPlan:
    """A DDP plan of ``nodes`` nodes and ``spares`` spares that restarts in place twice."""
    restart = {"restart_max": 0, "restart_on": ("node_fail", "failure"), "restart_in_place": 2}
    return job_plan("ddp", Component("ddp", nodes, 0, 1, spares=spares), submission="s1", **(restart | fields))


def lost(*names: str) -> Outcome:
    outcome = Outcome(JobState.NODE_FAIL, "lost", cause="node_fail")
    outcome.lost_nodes = list(names)
    return outcome


def test_a_lost_node_gets_a_spare_in_its_place_and_is_never_used_again(tmp_path: Path) -> None:
    launcher = FakeLauncher(with_spares(spares=2), tmp_path, {})
    nodes = NodeSet(with_spares(spares=2), launcher)
    assert nodes.running == [["ddp-host0", "ddp-host1"]] and nodes.spares(0) == ["ddp-host2", "ddp-host3"]
    replaced = nodes.replacements(lost("ddp-host0"))
    assert replaced == {"ddp-host0": "ddp-host2"}
    names = nodes.swap(replaced, launcher, lambda text: None)
    assert names.per_component == [["ddp-host2", "ddp-host1"]]  # the spare has the lost node's rank
    assert launcher.assigned[-1] == [["ddp-host2", "ddp-host1"]]
    assert nodes.spares(0) == ["ddp-host3"]  # the lost node is no spare
    assert nodes.replacements(lost("ddp-host1", "ddp-host2")) is None  # two lost, one spare left
    assert nodes.replacements(Outcome(JobState.FAILED, "x")) is None  # nothing lost


def test_a_lost_node_restarts_in_place_on_a_spare_and_the_job_completes(tmp_path: Path) -> None:
    from tests.unit.test_restart import FakeControl

    plan = with_spares()
    control = FakeControl(down=("ddp-host1",))
    # attempt 0: node 1 leaves no record (its node died), node 0 fails when its peer vanishes; then all is well
    script = {"ddp-0@0": (1, 0), "ddp-1@0": (None, 0)}
    launcher = FakeLauncher(plan, tmp_path, script, control=control)
    outcome = Supervisor(plan, str(tmp_path), launcher, say=lambda text: None).run()
    assert outcome.state is JobState.COMPLETED, outcome.reason
    starts = [e for e in events(tmp_path) if e["event"] == "start"]
    assert [s["components"][0]["nodes"] for s in starts] == [["ddp-host0", "ddp-host1"], ["ddp-host0", "ddp-host2"]]
    assert starts[1]["replaced"] == {"ddp-host1": "ddp-host2"}
    end = next(e for e in events(tmp_path) if e["event"] == "end")
    assert (end["cause"], end["lost_nodes"], end["in_place"]) == ("node_fail", ["ddp-host1"], True)
    assert control.requeued == []  # no trip through the queue


@pytest.mark.parametrize("spares", [1, 0])
def test_a_node_slurm_cannot_start_the_step_on_is_the_nodes_failure(tmp_path: Path, spares: int) -> None:
    """srun says "Task launch ... failed on node X": X failed, not the training. With a spare, the job restarts in
    place on it; without one, it ends NODE_FAIL naming X and Slurm's words (a requeue would leave X out)."""
    from tests.unit.test_restart import FakeControl

    plan = with_spares(spares=spares, restart_in_place=2 if spares else 0)
    script = {"ddp-0@0": (137, 0), "ddp-1@0": (None, 0)}  # node 0 killed as srun aborts; node 1 never started
    why = "Communication connection failure"
    launcher = FakeLauncher(plan, tmp_path, script, control=FakeControl(), unlaunched={"ddp-1@0": why})
    outcome = Supervisor(plan, str(tmp_path), launcher, say=lambda text: None).run()
    end = next(e for e in events(tmp_path) if e["event"] == "end")
    assert (end["cause"], end["lost_nodes"]) == ("launch", ["ddp-host1"])
    assert end["reason"].startswith(f"Slurm could not start the step on node(s) ddp-host1 ({why}); ")
    if spares:
        assert outcome.state is JobState.COMPLETED, outcome.reason
        starts = [e for e in events(tmp_path) if e["event"] == "start"]
        assert starts[1]["components"][0]["nodes"] == ["ddp-host0", "ddp-host2"]
    else:
        assert outcome.state is JobState.NODE_FAIL and outcome.reason == end["reason"]


@pytest.mark.parametrize("spares", [1, 0])
def test_a_node_that_fails_its_preflight_is_taken_out_for_a_spare(tmp_path: Path, spares: int) -> None:
    """With a spare left, a node whose preflight failed (exit 125) is swapped for it like a lost node; without
    one, it is a failure like any other (here restarted in place on the same nodes)."""
    from tests.unit.test_restart import FakeControl

    plan = with_spares(spares=spares)
    control = FakeControl()
    launcher = FakeLauncher(plan, tmp_path, {"ddp-1@0": (125, 0)}, control=control)
    outcome = Supervisor(plan, str(tmp_path), launcher, say=lambda text: None).run()
    starts = [e for e in events(tmp_path) if e["event"] == "start"]
    first_end = next(e for e in events(tmp_path) if e["event"] == "end")
    if spares:
        assert outcome.state is JobState.COMPLETED, outcome.reason
        assert starts[1]["replaced"] == {"ddp-host1": "ddp-host2"}
        assert (first_end["cause"], first_end["lost_nodes"]) == ("node_fail", ["ddp-host1"])
    else:
        assert (first_end["cause"], "replaced" in starts[1]) == ("unknown", False)  # in place, on the same nodes
    assert control.requeued == []


def test_without_a_spare_left_a_lost_node_requeues_as_before(tmp_path: Path) -> None:
    from tests.unit.test_restart import FakeControl

    plan = with_spares(spares=0, restart_max=1)
    control = FakeControl(down=("ddp-host1",))
    launcher = FakeLauncher(plan, tmp_path, {"ddp-0": (1, 0), "ddp-1": (None, 0)}, control=control)
    outcome = Supervisor(plan, str(tmp_path), launcher, say=lambda text: None).run()
    assert (outcome.state, outcome.requeue) == (JobState.NODE_FAIL, True)
    assert control.requeued == [(["ddp-host1"], False)]


def spec_file(tmp_path: Path, text: str) -> Path:
    (tmp_path / "job.yaml").write_text(text)
    return tmp_path / "job.yaml"


def test_spares_are_allocated_with_the_job_and_slurm_keeps_it_when_one_is_lost(tmp_path: Path) -> None:
    text = "mode: ddp\nnodes: 4\ncommand: x\nspare_nodes: 2\nrestart: {max: 1, on: [node_fail], in_place: 3}\n"
    plan = make_plan(load_spec(spec_file(tmp_path, text)))
    assert (plan.components[0].nodes, plan.components[0].spares, plan.total_nodes) == (4, 2, 4)
    script = render(plan)
    assert '#SBATCH --nodes="6"' in script and "#SBATCH --no-kill\n" in script


def test_spares_join_the_workers_of_a_ps_worker_job(tmp_path: Path) -> None:
    text = "mode: ps-worker\ncommand: x\nps: {nodes: 1}\nworker: {nodes: 2}\nspare_nodes: 1\n"
    plan = make_plan(load_spec(spec_file(tmp_path, text + "restart: {on: [node_fail], in_place: 1}\n")))
    assert [(c.name, c.nodes, c.spares) for c in plan.components] == [("ps", 1, 0), ("worker", 2, 1)]


def test_each_node_takes_its_place_from_the_attempts_nodes_not_slurms_order(tmp_path: Path) -> None:
    plan = with_spares()
    env = {
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_NODELIST": "n[1-3]",  # the allocation: n2 was lost, n3 (the spare) took its place
        "SLURM_NODEID": "1",  # the step's own count, not the rank
        "TI_SLURM_STEP_NODES_0": "n1,n3",
        "SLURMD_NODENAME": "n3",
        "TI_SLURM_NODE_ADDR": "10.0.0.9",
    }
    contract = node_contract(plan, env, 0, str(tmp_path))
    assert (contract.index, contract.node, contract.rank) == (1, "n3", 1)
    assert contract.env["NODE_LIST"] == "n1:0,n3:0" and contract.env["MASTER_ADDR"] == "10.0.0.9"
    assert contract.env["WORLD_SIZE"] == "2"


# -- elastic size: nodes: {min, max} ----------------------------------------------------------------------


def elastic_plan(most: int = 3, fewest: int = 2, spares: int = 0) -> JobPlan:
    return with_spares().replace(components=(Component("ddp", most, 0, 1, spares=spares, min_nodes=fewest),))


def test_an_elastic_job_runs_on_what_slurm_gave_and_its_plan_says_that_size(tmp_path: Path) -> None:
    plan = elastic_plan(most=4, fewest=2)
    nodes = NodeSet(plan, FakeLauncher(plan, tmp_path, {}, given=[3], resolves_names=True))
    assert nodes.running == [["ddp-host0", "ddp-host1", "ddp-host2"]]
    assert nodes.plan.total_nodes == 3 and nodes.plan.components[0].min_nodes == 2


def test_with_no_spare_left_an_elastic_job_goes_on_without_a_lost_node_down_to_its_min(tmp_path: Path) -> None:
    plan = elastic_plan(most=3, fewest=2, spares=1)
    launcher = FakeLauncher(plan, tmp_path, {}, resolves_names=True)
    nodes = NodeSet(plan, launcher)
    assert nodes.running == [["ddp-host0", "ddp-host1", "ddp-host2"]] and nodes.spares(0) == ["ddp-host3"]
    said: list[str] = []
    replaced = nodes.replacements(lost("ddp-host0", "ddp-host1"))
    assert replaced == {"ddp-host0": "ddp-host3", "ddp-host1": None}  # the spare first, then one fewer
    names = nodes.swap(replaced, launcher, said.append)
    assert names.per_component == [["ddp-host3", "ddp-host2"]] and nodes.plan.total_nodes == 2
    assert said[-1] == "going on without the lost node(s) ddp-host1, on fewer nodes: ddp 2 of 3"
    assert nodes.outlives_a_loss() is False  # at its min, no spare: the next loss requeues
    assert nodes.replacements(lost("ddp-host2")) is None


def test_the_local_runner_never_shrinks_a_job(tmp_path: Path) -> None:
    plan = elastic_plan(most=3, fewest=2)
    nodes = NodeSet(plan, FakeLauncher(plan, tmp_path, {}))  # every node this machine: names say nothing
    assert nodes.outlives_a_loss() is False and nodes.replacements(lost("ddp-host1")) is None


def test_an_elastic_job_restarts_in_place_on_fewer_nodes_and_completes(tmp_path: Path) -> None:
    from tests.unit.test_restart import FakeControl

    plan = elastic_plan(most=3, fewest=2)
    control = FakeControl(down=("ddp-host1",))
    script = {"ddp-0@0": (1, 0), "ddp-1@0": (None, 0), "ddp-2@0": (1, 0)}
    launcher = FakeLauncher(plan, tmp_path, script, control=control, resolves_names=True)
    supervisor = Supervisor(plan, str(tmp_path), launcher, say=lambda text: None)
    outcome = supervisor.run()
    assert outcome.state is JobState.COMPLETED, outcome.reason
    starts = [e for e in events(tmp_path) if e["event"] == "start"]
    assert [s["components"][0]["nodes"] for s in starts] == [
        ["ddp-host0", "ddp-host1", "ddp-host2"],
        ["ddp-host0", "ddp-host2"],
    ]
    assert starts[1]["replaced"] == {"ddp-host1": None}
    assert supervisor.plan.total_nodes == 2 and control.requeued == []


def test_each_node_of_an_elastic_job_sees_the_size_of_its_attempt(tmp_path: Path) -> None:
    from ti_slurm.job.contract import attempt_plan

    plan = with_spares().replace(mode="mpi", components=(Component("mpi", 4, 2, 1, min_nodes=2),))
    env = {
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_NODELIST": "n[1-4]",
        "TI_SLURM_STEP_NODES_0": "n[1,3-4]",  # n2 was lost
        "SLURMD_NODENAME": "n4",
        "TI_SLURM_NODE_ADDR": "10.0.0.9",
    }
    contract = node_contract(attempt_plan(plan, env), env, 0, str(tmp_path))
    assert (contract.index, contract.rank, contract.world) == (2, 2, 3)
    assert contract.env["GPU_NUM"] == "6" and contract.hostfile == "n1 slots=2\nn3 slots=2\nn4 slots=2\n"
    with pytest.raises(ContractError, match="runs on 2 to 4 nodes, not 1"):
        attempt_plan(plan, env | {"TI_SLURM_STEP_NODES_0": "n1"})


def test_a_range_of_nodes_is_asked_of_slurm_as_a_range(tmp_path: Path) -> None:
    text = "mode: ddp\nnodes: {min: 2, max: 4}\ncommand: x\n"
    plan = make_plan(load_spec(spec_file(tmp_path, text)))
    assert (plan.components[0].min_nodes, plan.components[0].nodes) == (2, 4)
    assert '#SBATCH --nodes="2-4"' in render(plan) and "--no-kill" not in render(plan)  # a loss requeues
    text += "restart: {max: 0, on: [node_fail], in_place: 1}\n"
    going_on = render(make_plan(load_spec(spec_file(tmp_path, text))))
    assert "#SBATCH --no-kill\n" in going_on  # Slurm keeps the job when a node fails: it goes on without it
    fixed = make_plan(load_spec(spec_file(tmp_path, "mode: ddp\nnodes: {min: 3, max: 3}\ncommand: x\n")))
    assert fixed.components[0].elastic is False and '#SBATCH --nodes="3"' in render(fixed)
