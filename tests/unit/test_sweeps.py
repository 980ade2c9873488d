"""Sweeps: the grid as users give it (``--param``, a points file), each point's plan, the array's script
and queue entries, and the bad grids that are one line."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import run_cli
from tests.unit.test_pyslurm_backend import KNOWN, sbatch_lines
from ti_slurm.backends.base import JobInfo
from ti_slurm.backends.pyslurm import job_description
from ti_slurm.backends.slurm import SlurmBackend, parse_scontrol_jobs
from ti_slurm.core.errors import ConfigError
from ti_slurm.core.plan import JobPlan, with_params
from ti_slurm.core.states import JobState
from ti_slurm.slurm.text import array_task_ids
from ti_slurm.submitting.planning import make_plan
from ti_slurm.submitting.script import render
from ti_slurm.submitting.spec import load_spec
from ti_slurm.sweeps import grid_points, read_points

TRAIN = "mode: ddp\nnodes: 2\ncommand: python train.py --lr {lr} --tag {tag} --keep ${lr}\n"


def test_each_point_sees_its_values_as_variables_and_in_its_command_as_one_shell_word(write_spec) -> None:
    plan = make_plan(load_spec(write_spec(TRAIN)))
    grid = grid_points({"lr": [0.1, 0.01], "tag": ["a b", "it's"]})
    assert [p["lr"] for p in grid] == ["0.1", "0.1", "0.01", "0.01"]  # the first name varies slowest
    point = plan.replace(points=tuple(grid)).at_point(3)
    assert point.command == "python train.py --lr 0.01 --tag 'it'\"'\"'s' --keep ${lr}"  # the shell's ${lr} stays
    assert point.env["TI_SLURM_PARAM_LR"] == "0.01" and point.env["TI_SLURM_PARAM_TAG"] == "it's"
    assert json.loads(point.env["TI_SLURM_PARAMS"]) == {"lr": "0.01", "tag": "it's"}
    assert point.env["TI_SLURM_SWEEP_POINT"] == "3" and point.points == ()
    assert JobPlan.from_json(plan.replace(points=tuple(grid)).to_json()).points == tuple(grid)


def test_a_role_commands_placeholders_are_filled_too(write_spec) -> None:
    roles = make_plan(load_spec(write_spec("mode: ps-worker\ncommand: x {lr}\nps: {nodes: 1}\nworker: {nodes: 1}\n")))
    ps, worker = roles.components  # a role's own command, as a platform gives one (ModelArts' --task_name)
    plan = roles.replace(components=(ps.replace(command="ps --lr {lr}"), worker), points=({"lr": "5"},)).at_point(0)
    assert [plan.command_of(i) for i in range(2)] == ["ps --lr 5", "x 5"]
    assert with_params("{lr}{lr} {x} {LR}", {"lr": "1"}) == "11 {x} {LR}"  # names as given, nothing else


NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,5}", fullmatch=True)


@given(st.dictionaries(NAMES, st.text(), min_size=1, max_size=5), st.data())
@settings(max_examples=300, deadline=None)
def test_every_value_reaches_the_command_as_exactly_one_shell_word(params: dict[str, str], data) -> None:
    # values that hold other parameters' places ({b}), quotes, ${...} and shell syntax among them
    names = list(params)
    params = {
        n: v + data.draw(st.sampled_from(["", *(f"{{{m}}}" for m in names), "';touch /tmp/PWN;'"]))
        for n, v in params.items()
    }
    params = {n: v.replace("\x00", "") for n, v in params.items()}
    command = " ".join(f"{{{n}}}" for n in names)
    assert shlex.split(with_params(command, params)) == [params[n] for n in names]


def test_a_value_holding_another_parameters_place_stays_one_word() -> None:
    # the review's case: substituted one after another, {b} inside a's quotes closed them
    command = with_params('printf "[%s]\\n" {a}', {"a": "{b}", "b": ";touch /tmp/PWN;"})
    assert command == "printf \"[%s]\\n\" '{b}'"


def test_parameter_names_differing_only_in_case_are_refused() -> None:
    with pytest.raises(ConfigError) as err:
        grid_points({"lr": [1], "LR": [2]})
    assert str(err.value) == (
        "params.LR: 'LR': lr and LR are one variable (TI_SLURM_PARAM_LR): give parameters names that differ "
        "in more than case"
    )


def test_an_array_sweep_is_one_script_whose_tasks_each_have_a_directory_and_output(write_spec) -> None:
    plan = make_plan(load_spec(write_spec(TRAIN)))
    swept = plan.replace(points=tuple(grid_points({"lr": [1, 2, 3], "tag": ["x", "y"]})), max_parallel=2)
    lines = sbatch_lines(swept)
    assert lines["array"] == "0-5%2" and lines["output"].endswith("/slurm-%A_%a.out")
    assert '/"${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"' in render(swept)
    assert sbatch_lines(swept.replace(max_parallel=6))["array"] == "0-5"  # no throttle when all may run
    assert "--array" not in render(plan) and '/"${SLURM_JOB_ID}"' in render(plan)
    fields = job_description(swept, "", {}, KNOWN | {"array"})
    assert fields["array"] == "0-5%2" and fields["standard_output"].endswith("/slurm-%A_%a.out")


def test_the_queue_names_each_task_of_an_array_as_its_point(write_spec) -> None:
    # as Slurm 22.05 prints them: the pending rest of the array in one entry, each started task on its own
    pending = "JobId=100 ArrayJobId=100 ArrayTaskId=2-5%2 ArrayTaskThrottle=2 JobName=sw UserId=me(1000) "
    running = "JobId=103 ArrayJobId=100 ArrayTaskId=1 ArrayTaskThrottle=2 JobName=sw UserId=me(1000) "
    rest = "GroupId=g(1000) JobState={} Reason={} Dependency=(null) NodeList={} BatchHost=n1\n"
    text = pending + rest.format("PENDING", "JobArrayTaskLimit", "(null)")
    text += running + rest.format("RUNNING", "None", "n[1-2]")
    queued = parse_scontrol_jobs(text, 1000)
    assert sorted(queued) == ["100_1", "100_2", "100_3", "100_4", "100_5"]
    assert queued["100_1"].state is JobState.RUNNING and queued["100_1"].nodes == "n[1-2]"
    assert (queued["100_4"].state, queued["100_4"].reason) == (JobState.PENDING, "JobArrayTaskLimit")
    assert array_task_ids("N/A", "N/A") == [] and array_task_ids("7", "1,3-7:2") == ["7_1", "7_3", "7_5", "7_7"]


def test_a_points_file_keeps_values_as_written(tmp_path: Path) -> None:
    path = tmp_path / "points.yaml"
    path.write_text("- {lr: 1e-4, batch: 32, warm: true}\n- {lr: 0.10, batch: 064, warm: off}\n")
    assert read_points(str(path)) == [
        {"lr": "1e-4", "batch": "32", "warm": "true"},
        {"lr": "0.10", "batch": "064", "warm": "off"},
    ]


@pytest.mark.parametrize(
    "args,line",
    [
        (["--param", "lr="], "--param: 'lr=': an empty value"),
        (["--param", "lr"], "--param: 'lr': expected NAME=VALUE[,VALUE...]"),
        (["--param", "1x=3"], "--param: '1x': not a parameter name"),
        (["--param", "a-b=3"], "--param: 'a-b': not a parameter name"),
        (["--param", "lr=1", "--param", "lr=2"], "--param: 'lr=1 lr=2': a parameter is given twice"),
        ([], "--param: '': give the grid as --param NAME=V1,V2 ... or as --points FILE"),
        (["--points", "nope.yaml"], "--points: 'nope.yaml': cannot read: No such file or directory"),
        (["--param", "lr=1", "--max-parallel", "-1"], "argument --max-parallel: '-1': expected a whole number"),
    ],
)
def test_a_bad_grid_is_one_line_and_nothing_is_submitted(write_spec, tmp_path: Path, args: list, line: str) -> None:
    res = run_cli("sweep", str(write_spec(TRAIN)), "--local", *args, cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert res.stderr.split(": error: ", 1)[1].startswith(line), res.stderr
    assert not res.stdout and not (tmp_path / "ti-slurm-jobs").exists()


@pytest.mark.parametrize(
    "points,where",
    [
        ({}, "params"),
        ({"lr": []}, "params.lr"),
        ({"lr": "0.1"}, "params.lr"),
        ([{"lr": None}], "params.lr"),
        ([{"lr": [1]}], "params.lr"),
        ([{"lr": "a\nb"}], "params.lr"),
    ],
)
def test_the_api_refuses_a_bad_grid_naming_the_field(points: object, where: str) -> None:
    from ti_slurm.sweeps import checked_points

    with pytest.raises(ConfigError) as err:
        grid_points(points) if isinstance(points, dict) else checked_points(points)  # type: ignore[arg-type]
    assert err.value.field == where


class CountingQueue(SlurmBackend):
    """The Slurm backend, its queue (one call for all of a user's jobs) answered here and its calls counted."""

    def __init__(self, array: str, points: int) -> None:
        super().__init__()
        self.calls = 0
        self.entries = {f"{array}_{k}": JobInfo(f"{array}_{k}", state=JobState.PENDING) for k in range(points)}

    def user_queue(self) -> dict[str, JobInfo]:
        self.calls += 1
        return self.entries

    def read_text(self, path: str) -> str | None:
        return None  # no point has started: nothing recorded yet


def test_following_a_sweep_of_100_points_asks_the_queue_once_per_interval(tmp_path, monkeypatch) -> None:
    from ti_slurm.sweeps import Sweep

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    (tmp_path / "run").mkdir(mode=0o700)
    points = [{"index": k, "params": {"lr": str(k)}, "job_id": f"700_{k}", "submission": "s"} for k in range(100)]
    record = {"sweep_id": "700", "name": "big", "backend": "slurm", "array": True, "output_dir": str(tmp_path)}
    queue = CountingQueue("700", 100)
    sweep = Sweep(record | {"points": points}, {"": queue})  # type: ignore[arg-type]
    for _ in range(5):  # five looks within one interval: one answer serves them all
        found = sweep.status(max_age=60)
    assert queue.calls == 1 and found.counts == {"PENDING": 100}
    sweep.status(max_age=0)  # the interval passed: one more, for all 100 again
    assert queue.calls == 2


def test_a_huge_grid_is_refused_before_any_point_is_made() -> None:
    grid = {f"p{i}": list(range(100)) for i in range(6)}  # 10^12 points: building them would never end
    with pytest.raises(ConfigError) as err:
        grid_points(grid)
    assert str(err.value) == "params: '1000000000000 points': at most 10000 points in one sweep"


def test_a_spread_sweeps_points_are_each_on_their_own_cluster() -> None:
    """A sweep spread over clusters (``cluster: auto``) records where each point went; its points are named,
    found and followed there, and the line says which went where."""
    from ti_slurm.sweeps import Sweep, _spread_line

    where = [("old", "rest", "/scratch/old"), ("new", "slurm", "/home/u/out"), ("new", "slurm", "/home/u/out")]
    points = [
        {"index": k, "params": {"lr": str(k)}, "job_id": str(100 + k), "cluster": c, "backend": b, "output_dir": d}
        for k, (c, b, d) in enumerate(where)
    ]
    record = {"sweep_id": "sweep-old:100", "name": "grid", "spread": True, "cluster": "", "points": points}
    infos = Sweep(record, {}).infos
    assert [i.ref for i in infos] == ["old:100", "new:101", "new:102"]
    assert [i.backend for i in infos] == ["rest", "slurm", "slurm"]
    assert infos[0].job_dir == "/scratch/old/100" and infos[2].job_dir == "/home/u/out/102"
    assert _spread_line(points) == "point 0 to cluster old; points 1, 2 to cluster new, each to the cluster that" \
        " would start it first"  # fmt: skip


def test_a_sweeps_points_known_to_have_ended_are_not_read_again(tmp_path: Path) -> None:
    """The console remembers a point that ended (it changes no more): the sweep's status reads only the others'
    records (over SSH each read is a round trip, at every refresh)."""
    from ti_slurm.follow.status import JobStatus
    from ti_slurm.sweeps import Sweep

    class Reading(SlurmBackend):
        def __init__(self) -> None:
            super().__init__()
            self.read: list[str] = []

        def read_text(self, path: str) -> str | None:
            self.read.append(path)
            return super().read_text(path)

        def user_queue(self) -> dict[str, JobInfo]:
            return {}

    points = [{"index": k, "params": {"lr": str(k)}, "job_id": str(100 + k)} for k in range(3)]
    record = {"sweep_id": "sweep-100", "name": "grid", "output_dir": str(tmp_path), "points": points}
    backend = Reading()
    final = JobStatus("101", "grid", JobState.COMPLETED)
    shown = Sweep(record, {"": backend}).status(ended={"101": final})
    assert shown.points[1].status is final
    assert sorted(Path(p).parent.name for p in backend.read) == ["100", "102"]
