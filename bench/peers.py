"""ti-slurm beside its peers, in one run on one cluster: submitit, TorchX (its Slurm scheduler, ``dist.ddp``) and a
hand-written sbatch script, each running the same Python (bench/peer_work.py), alternating, medians of repeats.

    python3 bench/peers.py                  # every case, 3 repeats, job start on 4 nodes
    python3 bench/peers.py --nodes 128      # job start on 128 nodes too (the cluster up with --nodes 128)
    python3 bench/peers.py --cases start,failure --repeat 5

Cases (each tool as a user calls it, in this process; its defaults otherwise):
  submit   the call returns a job id (held jobs)
  process  each tool's submit as a process a user starts from a shell (ti-slurm's CLI and a YAML spec, a submitit
           script, TorchX's CLI, sbatch and a script): to its job id, and to the code running on both nodes of a
           2-node job (the interpreter's start and the tool's imports counted)
  start    job start (slurmd's "Launching batch job" line, the same clock for every tool) to the code running on
           every node; also submit to running, which adds Slurm's scheduling (heterogeneous jobs wait for backfill)
  failure  rank 1 exits 3 (the others would sleep 60 s) to the job gone from the queue and every process of it
           gone (any process whose environment holds the job's id: launchers, the tool's helpers, the work)
  cancel   the tool's cancel to the job and every process of it gone
  status   the states of 200 held jobs, the tool's own way; the Slurm commands it ran, counted by PATH shims
  train    a real 2-node torch DDP job (gloo): median step time, torch threads and CPUs each rank had
Writes bench/results/peers.json.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from unittest.mock import patch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peer_work
from run import BIN, ROOT, median, sh
from scale import partition_for

WORK_PY = str(Path(peer_work.__file__).resolve())
PYTHON = sys.executable
SLURM_COMMANDS = ("sbatch", "squeue", "sacct", "scontrol", "scancel", "sinfo")
FAILURE_CAP = 50.0  # the other ranks sleep 60 s: a job still there after this was not ended by the tool


class TiSlurm:
    """ti-slurm's Python API (backend slurm); DDP mode, the command run directly or through the seed's torchrun."""

    def __init__(self, tmp: Path) -> None:
        import ti_slurm

        self.api, self.out = ti_slurm, tmp / "ti-slurm-out"

    def submit(self, work: str, folder: Path, nodes: int, hold: bool = False) -> Any:
        command = f"{PYTHON} {WORK_PY} {work} {folder}"
        if work == "train":  # the seed's launch line
            command = (
                f"{BIN / 'torchrun'} --nproc_per_node 1 --nnodes $WORLD_SIZE --node_rank $RANK "
                f"--master_addr $MASTER_ADDR --master_port $MASTER_PORT {WORK_PY} train {folder}"
            )
        spec: dict[str, Any] = {"mode": "ddp", "nodes": nodes, "partition": partition_for(nodes), "command": command}
        spec |= {"output_dir": str(self.out), "sbatch": {"hold": True} if hold else {}}
        return self.api.submit(spec)

    def job_id(self, handle: Any) -> str:
        return str(handle.id)

    def cancel(self, handle: Any) -> None:
        handle.cancel()

    def states(self, handles: list[Any]) -> list[str]:
        shutil.rmtree(os.environ["XDG_RUNTIME_DIR"], ignore_errors=True)  # no answer shared by an earlier call
        wanted = {h.id for h in handles}
        return [str(s.state) for s in self.api.jobs() if s.job_id in wanted]


class Submitit:
    """submitit's AutoExecutor: one task per node, the work as a pickled function."""

    def __init__(self, tmp: Path) -> None:
        import cloudpickle
        import submitit

        cloudpickle.register_pickle_by_value(peer_work)  # the nodes need not import the bench's module
        self.executor = submitit.AutoExecutor(folder=str(tmp / "submitit" / "%j"), cluster="slurm")

    def submit(self, work: str, folder: Path, nodes: int, hold: bool = False) -> Any:
        self.executor.update_parameters(
            nodes=nodes, tasks_per_node=1, cpus_per_task=1, slurm_partition=partition_for(nodes), timeout_min=10,
            slurm_additional_parameters={"hold": True} if hold else {},
        )  # fmt: skip
        fn = peer_work.train_submitit if work == "train" else peer_work.WORK[work]
        return self.executor.submit(fn, str(folder))

    def job_id(self, handle: Any) -> str:
        return str(handle.job_id)

    def cancel(self, handle: Any) -> None:
        handle.cancel(check=True)

    def states(self, handles: list[Any]) -> list[str]:
        handles[0].watcher.update()  # what submitit does when its cached answer is old: one sacct for all
        return [h.watcher.get_state(h.job_id, mode="cache") for h in handles]


class TorchX:
    """TorchX's runner with its Slurm scheduler and the ``dist.ddp`` component (``-j Nx1``)."""

    def __init__(self, tmp: Path) -> None:
        from torchx.components.dist import ddp
        from torchx.runner import get_runner

        self.ddp, self.runner = ddp, get_runner()
        self.cwd = tmp / "torchx"  # where its scheduler writes the jobs' logs
        self.cwd.mkdir()

    def submit(self, work: str, folder: Path, nodes: int, hold: bool = False) -> Any:
        app = self.ddp(work, str(folder), script=WORK_PY, j=f"{nodes}x1", cpu=1, memMB=256, name=f"peer-{work}")
        with contextlib.chdir(self.cwd), patch.dict(os.environ, {"SBATCH_HOLD": "1"} if hold else {}):
            return self.runner.run(app, "slurm", cfg={"partition": partition_for(nodes)})

    def job_id(self, handle: Any) -> str:
        return str(handle).rsplit("/", 1)[-1]

    def cancel(self, handle: Any) -> None:
        self.runner.cancel(handle)

    def states(self, handles: list[Any]) -> list[str]:
        return [str(self.runner.status(h).state) for h in handles]


class Sbatch:
    """The hand-written baseline: ``sbatch`` a script whose one line is ``srun --kill-on-bad-exit=1``."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp / "sbatch"
        self.tmp.mkdir()

    def submit(self, work: str, folder: Path, nodes: int, hold: bool = False) -> Any:
        run = f"{PYTHON} {WORK_PY} {work} {folder}"
        if work == "train":
            run = (
                f"{BIN / 'torchrun'} --nnodes $SLURM_NNODES --nproc_per_node 1 --rdzv_backend c10d "
                f'--rdzv_endpoint "$(hostname)":29500 --rdzv_id $SLURM_JOB_ID {WORK_PY} train {folder}'
            )
        script = self.tmp / f"{work}-{time.monotonic_ns()}.sh"
        script.write_text(
            f"#!/bin/bash\n#SBATCH -N{nodes} -p {partition_for(nodes)} -o {self.tmp}/%j.out\n"
            f"srun --kill-on-bad-exit=1 {run}\n"
        )
        return sh(["sbatch", "--parsable", *(["--hold"] if hold else []), str(script)]).stdout.strip()

    def job_id(self, handle: Any) -> str:
        return str(handle)

    def cancel(self, handle: Any) -> None:
        sh(["scancel", handle])

    def states(self, handles: list[Any]) -> list[str]:
        return sh(["squeue", "-h", "-o", "%T", f"--jobs={','.join(handles)}"]).stdout.split()


TOOLS = {"ti-slurm": TiSlurm, "submitit": Submitit, "TorchX": TorchX, "sbatch": Sbatch}


# -- what every case watches: the queue, the processes, slurmd's log ----------------------------------------------
def in_queue(job_id: str) -> bool:
    res = subprocess.run(["squeue", "-h", "-o", "%i", "-j", job_id], capture_output=True, text=True)
    return bool(res.stdout.strip())


def job_processes(job_id: str) -> int:
    """How many processes of the job are left on any node (all nodes share this machine's process table): those
    whose environment holds its id, so launchers, the tools' own helpers and the work alike."""
    marks = (f"SLURM_JOB_ID={job_id}\0".encode(), f"SLURM_HET_JOB_ID={job_id}\0".encode())
    count = 0
    for path in glob.glob("/proc/[0-9]*/environ"):
        with contextlib.suppress(OSError):
            with open(path, "rb") as fh:
                env = b"\0" + fh.read()
            count += any(b"\0" + mark in env for mark in marks)
    return count


def gone(job_id: str) -> bool:
    """The job has left the queue and no process of it is left."""
    return not in_queue(job_id) and not job_processes(job_id)


def wait_until(done: Callable[[], bool], timeout: float, poll: float = 0.05) -> float:
    """Poll until ``done()``; the wall-clock time it first held (raises after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not done within {timeout:.0f} s")
        time.sleep(poll)
    return time.time()


def batch_launch_time(job_id: str) -> float:
    """When slurmd launched the job's batch script (its log line, milliseconds)."""
    pattern = re.compile(rf"^\[([\d\-T:.]+)\] Launching batch job {job_id} ")
    from tests.testcluster import this_cluster

    logs = str(this_cluster().log_dir / "slurmd-*.log")
    for path in glob.glob(logs):
        with open(path, errors="replace") as fh:
            for line in fh:
                found = pattern.match(line)
                if found:
                    return datetime.fromisoformat(found.group(1)).timestamp()
    raise LookupError(f"no 'Launching batch job {job_id}' in {logs}")


def stamps(folder: Path) -> list[float]:
    return [float(p.read_text()) for p in folder.glob("t1-*") if p.read_text()]


# -- the cases -----------------------------------------------------------------------------------------------------
Results = dict[str, dict[str, Any]]  # case -> tool -> value (seconds, or a note)


Measure = Callable[[str, Any, int], tuple[float, ...]]


def alternating(tools: dict[str, Any], repeat: int, measure: Measure, labels: tuple[str, ...]) -> Results:
    """``measure(name, tool, round)`` for every tool in turn, ``repeat`` rounds; the median of each of its values,
    under ``labels``. A tool that fails a round is left out of the rest and its row says why."""
    values: dict[str, list[tuple[float, ...]]] = {name: [] for name in tools}
    failed: dict[str, str] = {}
    for i in range(repeat):
        for name, tool in tools.items():
            if name in failed:
                continue
            try:
                values[name].append(measure(name, tool, i))
            except Exception as exc:  # a peer that cannot do this here: the table says so
                lines = str(exc).strip().splitlines() or [type(exc).__name__]
                failed[name] = f"cannot: {type(exc).__name__}: {lines[-1][:160]}"
    results: Results = {label: {} for label in labels}
    for name in tools:
        for k, label in enumerate(labels):
            results[label][name] = failed.get(name) or statistics.median(v[k] for v in values[name])
    return results


def case_submit(tools: dict[str, Any], tmp: Path, repeat: int) -> Results:
    ids = []

    def measure(name: str, tool: Any, i: int) -> tuple[float]:
        start = time.perf_counter()
        handle = tool.submit("stamp", tmp / "unused", 1, hold=True)
        took = time.perf_counter() - start
        ids.append(tool.job_id(handle))
        return (took,)

    alternating(tools, 1, measure, ("warm-up",))  # lazy imports: ti-slurm's jinja2, TorchX's components
    results = alternating(tools, repeat, measure, ("submit (held job; the call returns its id)",))
    subprocess.run(["scancel", *ids], check=False)
    return results


def case_start(tools: dict[str, Any], tmp: Path, repeat: int, nodes: int) -> Results:
    def measure(name: str, tool: Any, i: int) -> tuple[float, float]:
        folder = tmp / f"start-{nodes}-{name}-{i}"
        folder.mkdir()
        submitted = time.time()
        job = tool.job_id(tool.submit("stamp", folder, nodes))
        wait_until(lambda: not in_queue(job), 120 + nodes, poll=0.2)
        got = stamps(folder)
        if len(got) != nodes:
            raise RuntimeError(f"{len(got)} of {nodes} nodes ran the work (job {job})")
        return max(got) - batch_launch_time(job), max(got) - submitted

    labels = (f"job start -> code on all {nodes} nodes", f"submit -> code on all {nodes} nodes")
    return alternating(tools, repeat, measure, labels)


SUBMITIT_SCRIPT = """\
import sys
sys.path.insert(0, {bench!r})
import cloudpickle, submitit, peer_work
cloudpickle.register_pickle_by_value(peer_work)
executor = submitit.AutoExecutor(folder={folder!r}, cluster="slurm")
executor.update_parameters(nodes={nodes}, tasks_per_node=1, cpus_per_task=1, slurm_partition={partition!r},
                           timeout_min=10)
print(executor.submit(peer_work.stamp, {work!r}).job_id)
"""


def process_argv(name: str, tmp: Path, folder: Path, nodes: int) -> tuple[list[str], Path]:
    """How a user starts each tool's submit from a shell (its argv, and the folder to run it in): ti-slurm's CLI
    with a YAML spec on disk, a submitit script, TorchX's CLI, ``sbatch`` with a script. Written before the clock
    starts."""
    partition = partition_for(nodes)
    if name == "ti-slurm":
        spec = folder / "job.yaml"
        spec.write_text(f"mode: ddp\nnodes: {nodes}\npartition: {partition}\noutput_dir: {tmp / 'ti-slurm-out'}\n"
                        f"command: {PYTHON} {WORK_PY} stamp {folder}\n")  # fmt: skip
        return [str(BIN / "ti-slurm"), "submit", str(spec)], folder
    if name == "submitit":
        script = folder / "submit.py"
        bench = str(Path(WORK_PY).parent)
        script.write_text(SUBMITIT_SCRIPT.format(bench=bench, folder=str(tmp / "submitit" / "%j"), nodes=nodes,
                                                 partition=partition, work=str(folder)))  # fmt: skip
        return [PYTHON, str(script)], folder
    if name == "TorchX":
        component = ["dist.ddp", "-j", f"{nodes}x1", "--cpu", "1", "--memMB", "256", "--script", WORK_PY]
        run = [str(BIN / "torchx"), "run", "-s", "slurm", "-cfg", f"partition={partition}", *component]
        run += ["--", "stamp", str(folder)]
        (tmp / "torchx").mkdir(exist_ok=True)
        return run, tmp / "torchx"
    script = folder / "job.sh"
    script.write_text(f"#!/bin/bash\n#SBATCH -N{nodes} -p {partition} -o {folder}/%j.out\n"
                      f"srun --kill-on-bad-exit=1 {PYTHON} {WORK_PY} stamp {folder}\n")  # fmt: skip
    return ["sbatch", "--parsable", str(script)], folder


def case_process(tools: dict[str, Any], tmp: Path, repeat: int, nodes: int = 2) -> Results:
    """Each tool as a process started from a shell: the process's start to the job id (its exit), and to the code
    running on every node (the start path a user waits through, the interpreter's start and imports included)."""

    def measure(name: str, tool: Any, i: int) -> tuple[float, float]:
        folder = tmp / f"process-{name}-{i}"
        folder.mkdir()
        argv, cwd = process_argv(name, tmp, folder, nodes)
        started = time.time()
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
        took = time.time() - started
        found = re.findall(r"(\d+)\s*$", done.stdout)
        if done.returncode != 0 or not found:
            raise RuntimeError(f"exit {done.returncode}: {(done.stderr or done.stdout).strip()[-200:]}")
        job = found[-1]
        wait_until(lambda: len(stamps(folder)) == nodes or not in_queue(job), 120, poll=0.05)
        got = stamps(folder)
        if len(got) != nodes:
            raise RuntimeError(f"{len(got)} of {nodes} nodes ran the work (job {job})")
        return took, max(got) - started

    labels = ("submit as a process (start to job id)", f"submit as a process -> code on all {nodes} nodes")
    return alternating(tools, repeat, measure, labels)


def case_failure(tools: dict[str, Any], tmp: Path, repeat: int, nodes: int = 4) -> Results:
    def measure(name: str, tool: Any, i: int) -> tuple[float]:
        folder = tmp / f"fail-{name}-{i}"
        folder.mkdir()
        job = tool.job_id(tool.submit("fail", folder, nodes))
        wait_until((folder / "tfail").exists, 120)
        ended = wait_until(lambda: gone(job), 120, poll=0.1)
        return (ended - float((folder / "tfail").read_text()),)

    label = f"failure -> job and processes gone ({nodes} nodes)"
    results = alternating(tools, repeat, measure, (label,))
    for name, value in results[label].items():
        if isinstance(value, float) and value > FAILURE_CAP:
            results[label][name] = f"not ended by the tool: the other ranks ran to their own end ({value:.0f} s)"
    return results


def case_cancel(tools: dict[str, Any], tmp: Path, repeat: int, nodes: int = 4) -> Results:
    def measure(name: str, tool: Any, i: int) -> tuple[float]:
        folder = tmp / f"cancel-{name}-{i}"
        folder.mkdir()
        handle = tool.submit("sleep", folder, nodes)
        job = tool.job_id(handle)
        try:
            wait_until(lambda: len(stamps(folder)) == nodes, 120)
            asked = time.time()
            tool.cancel(handle)
            return (wait_until(lambda: gone(job), 120, poll=0.1) - asked,)
        finally:
            subprocess.run(["scancel", job], check=False)  # whatever the tool did

    return alternating(tools, repeat, measure, (f"cancel -> job and processes gone ({nodes} nodes)",))


def counting_shims(folder: Path) -> Path:
    """A PATH directory whose Slurm commands log their name to ``folder/calls`` and run the real one."""
    shims = folder / "shims"
    shims.mkdir()
    for command in SLURM_COMMANDS:
        real = shutil.which(command)
        if real:
            (shims / command).write_text(f'#!/bin/sh\necho {command} >> {folder}/calls\nexec {real} "$@"\n')
            (shims / command).chmod(0o755)
    return shims


def case_status(tools: dict[str, Any], tmp: Path, repeat: int, jobs: int) -> Results:
    times: dict[str, Any] = {}
    commands: dict[str, Any] = {}
    for name, tool in tools.items():
        handles = [tool.submit("stamp", tmp / "unused", 1, hold=True) for _ in range(jobs)]
        try:
            times[name] = median(lambda tool=tool, handles=handles: tool.states(handles), repeat)
            folder = tmp / f"status-{name}"
            folder.mkdir()
            with patch.dict(os.environ, {"PATH": f"{counting_shims(folder)}:{os.environ['PATH']}"}):
                states = tool.states(handles)
            calls = (folder / "calls").read_text().split() if (folder / "calls").exists() else []
            answered = sum(1 for s in states if "PENDING" in s.upper() or "HELD" in s.upper())
            counts = ", ".join(f"{c} x{calls.count(c)}" for c in sorted(set(calls))) or "none"
            commands[name] = f"{counts}; {answered} of {jobs} answered PENDING"
        except Exception as exc:  # a peer that cannot answer here says why
            last = str(exc).strip().splitlines()[-1:] or [type(exc).__name__]
            times[name] = f"cannot answer: {last[0][:100]}"
            commands[name] = "-"
        finally:
            subprocess.run(["scancel", *(tool.job_id(h) for h in handles)], check=False)
    return {f"status of {jobs} jobs": times, f"status of {jobs} jobs: Slurm commands": commands}


def case_train(tools: dict[str, Any], tmp: Path, repeat: int) -> Results:
    placement: dict[str, Any] = {}

    def measure(name: str, tool: Any, i: int) -> tuple[float]:
        folder = tmp / f"train-{name}-{i}"
        folder.mkdir()
        job = tool.job_id(tool.submit("train", folder, 2))
        wait_until(lambda: not in_queue(job), 300, poll=0.5)
        ranks = [json.loads(p.read_text()) for p in sorted(folder.glob("train-*.json"))]
        if len(ranks) != 2:
            raise RuntimeError(f"{len(ranks)} of 2 ranks trained (job {job})")
        placement[name] = "; ".join(
            f"rank {r['rank']} on {r['host']}: {r['torch_threads']} torch threads, {r['cpus_allowed']} CPUs, "
            f"OMP_NUM_THREADS={r['omp_num_threads']}"
            for r in ranks
        )
        return (max(r["step_s"] for r in ranks),)

    results = alternating(tools, repeat, measure, ("DDP step time, 2 nodes x 1 rank (gloo)",))
    return results | {"DDP placement": placement}


def print_table(results: Results, names: list[str]) -> None:
    width = max(len(c) for c in results) + 2
    print(f"{'case':<{width}}" + "".join(f"{n:>12}" for n in names))
    notes = []
    for case, row in results.items():
        cells = []
        for name in names:
            value = row.get(name, "-")
            if isinstance(value, float):
                cells.append(f"{value:>12.4f}")
            else:
                cells.append(f"{'(note)':>12}")
                notes.append(f"  {case}, {name}: {value}")
        print(f"{case:<{width}}" + "".join(cells))
    for note in notes:
        print(note)


CASES = ("submit", "process", "start", "failure", "cancel", "status", "train")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=0, help="also measure job start on this many nodes")
    parser.add_argument("--jobs", type=int, default=200, help="held jobs for the status case")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "peers.json"))
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ti-slurm-peers-", dir="/var/tmp"))
    os.environ["XDG_STATE_HOME"] = str(tmp / "state")  # ti-slurm's records of these jobs stay here
    os.environ["XDG_RUNTIME_DIR"] = str(tmp / "runtime")  # and the queue answer it shares between processes
    tools = {name: TOOLS[name](tmp) for name in args.tools.split(",")}
    cases = args.cases.split(",")
    results: Results = {}
    try:
        if "submit" in cases:
            results |= case_submit(tools, tmp, args.repeat)
        if "process" in cases:
            results |= case_process(tools, tmp, args.repeat)
        if "start" in cases:
            results |= case_start(tools, tmp, args.repeat, 4)
            if args.nodes:
                results |= case_start(tools, tmp, args.repeat, args.nodes)
        if "failure" in cases:
            results |= case_failure(tools, tmp, args.repeat)
        if "cancel" in cases:
            results |= case_cancel(tools, tmp, args.repeat)
        if "status" in cases:
            results |= case_status(tools, tmp, args.repeat, args.jobs)
        if "train" in cases:
            results |= case_train(tools, tmp, args.repeat)
    finally:
        print_table(results, list(tools))
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=2))
        print(f"written: {args.out} (work folders: {tmp})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
