"""Scale, measured: job start and failure detection from 4 to 32 to 128 nodes, beside plain srun, and the
modes at the largest size. Needs the test cluster at that size (``sudo ci/slurm-cluster/up --nodes 128``).

    python3 bench/scale.py                     # sizes 4, 32, 128; 2 runs each, alternating with the baseline
    python3 bench/scale.py --sizes 4,16 --repeat 3

In place: from a rank's failure to the command running again on every node (``restart.in_place``), beside
a batch script that runs its ``srun`` again.
Job start: from the job's start (ti-slurm: its plan written by the batch script; baseline: the
script's first line) to the command running on every node. Failure: from the failing rank's exit to
the job's end (ti-slurm: its final record; baseline: ``srun --kill-on-bad-exit`` returning). During
the largest start the supervisor's and slurmctld's CPU time and memory are sampled.
Writes bench/results/scale.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import ROOT, TI, held_spec, in_place_restart, run_baseline_job, sh

TICKS = os.sysconf("SC_CLK_TCK")


def partition_for(nodes: int) -> str:
    """The test cluster's partition holding ``nodes`` nodes (``all`` exists beyond 6)."""
    return "debug" if nodes <= 4 else "all"


def cpu_and_peak(pid: int) -> tuple[float, int]:
    """CPU seconds used so far and the peak resident set (KiB) of process ``pid``."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / TICKS
    with open(f"/proc/{pid}/status") as fh:
        peak = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
    return cpu, peak


class Sampler(threading.Thread):
    """Follows the supervisor of ``job_dir`` (once it appears) and slurmctld while a job runs."""

    def __init__(self, out_dir: Path) -> None:
        super().__init__(daemon=True)
        self.out_dir, self.stop = out_dir, threading.Event()
        self.ctld = int(sh(["pgrep", "-xo", "slurmctld"]).stdout.split()[0])
        self.ctld_start = cpu_and_peak(self.ctld)[0]
        self.supervisor: tuple[float, int] = (0.0, 0)
        self.ctld_rss = 0

    def run(self) -> None:
        while not self.stop.is_set():
            found = subprocess.run(["pgrep", "-f", f"ti_slurm.job supervise {self.out_dir}"], capture_output=True)
            for pid in found.stdout.split():
                with contextlib.suppress(OSError, StopIteration):  # it may end meanwhile
                    self.supervisor = cpu_and_peak(int(pid))
            with open(f"/proc/{self.ctld}/status") as fh:
                rss = next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))
            self.ctld_rss = max(self.ctld_rss, rss)
            time.sleep(0.2)

    def result(self) -> dict[str, float]:
        self.stop.set()
        self.join()
        return {
            "supervisor_cpu_s": self.supervisor[0],
            "supervisor_peak_mib": self.supervisor[1] / 1024,
            "slurmctld_cpu_s": cpu_and_peak(self.ctld)[0] - self.ctld_start,
            "slurmctld_peak_rss_mib": self.ctld_rss / 1024,
        }


def ti_slurm_start(tmp: Path, nodes: int, tag: str) -> float:
    marks = tmp / f"start-{tag}"
    marks.mkdir()
    body = f"mode: mpi\nnodes: {nodes}\npartition: {partition_for(nodes)}\ncommand: 'date +%s.%N > {marks}/t1-$INDEX'"
    env = dict(os.environ, XDG_STATE_HOME=str(tmp / "state"))
    job = sh([TI, "submit", "--wait", str(held_spec(tmp, body))], env=env).stdout.split()[0]
    t0 = (tmp / "out" / job / "plan.json").stat().st_mtime
    times = [float(p.read_text()) for p in marks.glob("t1-*")]
    assert len(times) == nodes, f"{len(times)} of {nodes} nodes ran the command"
    return max(times) - t0


def baseline_start(tmp: Path, nodes: int, tag: str) -> float:
    body = (
        f"#SBATCH -N{nodes} -p {partition_for(nodes)}\ndate +%s.%N > {{dir}}/t0\n"
        "srun bash -c 'date +%s.%N > {dir}/t1-$SLURM_NODEID'"
    )
    folder = run_baseline_job(tmp / f"base-start-{tag}", body)
    times = [float(p.read_text()) for p in folder.glob("t1-*")]
    assert len(times) == nodes, f"{len(times)} of {nodes} nodes ran the command"
    return max(times) - float((folder / "t0").read_text())


def ti_slurm_failure(tmp: Path, nodes: int, tag: str) -> float:
    command = "if [ $INDEX = 1 ]; then sleep 2; exit 3; fi; sleep 300"
    body = f"mode: mpi\nnodes: {nodes}\npartition: {partition_for(nodes)}\ncommand: '{command}'"
    env = dict(os.environ, XDG_STATE_HOME=str(tmp / "state"))
    res = subprocess.run([TI, "submit", "--wait", str(held_spec(tmp, body))], env=env, capture_output=True, text=True)
    job_dir = tmp / "out" / res.stdout.split()[0]
    failed = json.loads((job_dir / "nodes" / "mpi.1.json").read_text())["ended"]
    end = [json.loads(x) for x in (job_dir / "status.jsonl").read_text().splitlines()][-1]
    assert end["state"] == "FAILED", end
    return float(end["time"]) - float(failed)


def baseline_failure(tmp: Path, nodes: int, tag: str) -> float:
    body = (
        f"#SBATCH -N{nodes} -p {partition_for(nodes)}\nsrun --kill-on-bad-exit=1 bash -c "
        "'if [ $SLURM_NODEID = 1 ]; then sleep 2; date +%s.%N > {dir}/tfail; exit 3; fi; sleep 300'\n"
        "date +%s.%N > {dir}/tend"
    )
    folder = run_baseline_job(tmp / f"base-fail-{tag}", body)
    return float((folder / "tend").read_text()) - float((folder / "tfail").read_text())


def run_mode(tmp: Path, name: str, body: str) -> dict[str, object]:
    """Submit one spec and wait; its state, wall time and reason."""
    env = dict(os.environ, XDG_STATE_HOME=str(tmp / "state"))
    began = time.monotonic()
    res = subprocess.run([TI, "submit", "--wait", str(held_spec(tmp, body))], env=env, capture_output=True, text=True)
    last = (res.stderr.strip().splitlines() or [""])[-1]
    return {"mode": name, "ok": res.returncode == 0, "seconds": round(time.monotonic() - began, 1), "last": last}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="4,32,128")
    parser.add_argument("--repeat", type=int, default=2)
    # Ray on 2 cores: 16 nodes start in ~90 s; at 32 a raylet misses Ray's fixed 30 s registration wait, at 64
    # Slurm's step launches time out too; 127 would also need ~30 GiB (~240 MB per Ray node)
    parser.add_argument("--ray-nodes", type=int, default=16, help="the Ray job's size (0: none)")
    parser.add_argument("--no-modes", action="store_true", help="only the start, failure and in-place rows")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "scale.json"))
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    have = int(sh(["sinfo", "-h", "-p", partition_for(max(sizes)), "-o", "%D"]).stdout.split()[0])
    if have < max(sizes):
        print(f"scale: the cluster has {have} nodes; bring it up with: sudo ci/slurm-cluster/up --nodes {max(sizes)}")
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="ti-slurm-scale-"))
    (tmp / "out").mkdir()
    rows: list[dict[str, object]] = []
    use: dict[str, float] = {}
    for nodes in sizes:
        kinds = ("start", "start_base", "fail", "fail_base", "in_place", "in_place_base")
        measured: dict[str, list[float]] = {k: [] for k in kinds}
        for i in range(args.repeat):  # alternating, so both see the same machine
            tag = f"{nodes}-{i}"
            sampler = Sampler(tmp / "out") if nodes == max(sizes) and i == 0 else None
            if sampler:
                sampler.start()
            measured["start"].append(ti_slurm_start(tmp, nodes, tag))
            if sampler:
                use = sampler.result()
            measured["start_base"].append(baseline_start(tmp, nodes, tag))
            measured["fail"].append(ti_slurm_failure(tmp, nodes, tag))
            measured["fail_base"].append(baseline_failure(tmp, nodes, tag))
            tool, base = in_place_restart(tmp, tag, nodes, partition_for(nodes))
            measured["in_place"].append(tool)
            measured["in_place_base"].append(base)
        row: dict[str, object] = {"nodes": nodes, **{k: statistics.median(v) for k, v in measured.items()}}
        rows.append(row)
        print(
            f"{nodes:>4} nodes  start {row['start']:6.2f} s vs srun {row['start_base']:6.2f} s "
            f"({row['start'] / row['start_base']:.2f}x)   failure {row['fail']:6.2f} s vs srun "  # type: ignore[operator]
            f"{row['fail_base']:6.2f} s ({row['fail'] / row['fail_base']:.2f}x)   in place "  # type: ignore[operator]
            f"{row['in_place']:6.2f} s vs srun again {row['in_place_base']:6.2f} s",
            flush=True,
        )
    print(f"during the {max(sizes)}-node start: " + ", ".join(f"{k} {v:.2f}" for k, v in use.items()), flush=True)
    n = max(sizes)
    part = partition_for(n)
    half = n // 2
    modes = (
        []
        if args.no_modes
        else [
            run_mode(tmp, f"ddp, {n} nodes", f"mode: ddp\nnodes: {n}\npartition: {part}\ncommand: 'echo $RANK'"),
            run_mode(
                tmp,
                f"horovod/mpi: the seed's mpirun -H $NODE_IP_SLOT_LIST, {n} nodes",
                f"mode: horovod\nnodes: {n}\ngpus_per_node: 1\npartition: {part}\n"
                "command: 'mpirun --allow-run-as-root -np $GPU_NUM -H $NODE_IP_SLOT_LIST hostname'",
            ),
            run_mode(
                tmp,
                f"ps-worker, {half} ps + {n - half} workers",
                f"mode: ps-worker\nps: {{nodes: {half}, partition: {part}}}\n"
                # parameter servers serve until ti-slurm stops them (one that ends first fails the job, as on TI)
                f"worker: {{nodes: {n - half}, partition: {part}}}\n"
                "command: 'if [[ $TF_CONFIG == *''\"type\":\"ps\"''* ]]; then exec sleep 600; fi'",
            ),
        ]
    )
    if args.ray_nodes and not args.no_modes:  # head + 5 worker groups
        groups = [(args.ray_nodes - 1) // 5 + (k < (args.ray_nodes - 1) % 5) for k in range(5)]
        modes.append(
            run_mode(
                tmp,
                f"ray, head + 5 worker groups ({'+'.join(map(str, groups))}), {args.ray_nodes} nodes",
                f"mode: ray\npartition: {part}\nhead: {{cpus_per_node: 1}}\nworker_groups:\n"
                + "".join(f"  - {{nodes: {g}, cpus_per_node: 1}}\n" for g in groups)
                + "command: python -c 'import ray; ray.init(); print(len([n for n in ray.nodes() if n[\"Alive\"]]))'",
            )
        )
    for m in modes:
        print(f"{m['mode']:<58} {'ok' if m['ok'] else 'FAILED':<7} {m['seconds']:>6} s  {m['last']}", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"sizes": rows, "resources": use, "modes": modes}, indent=2) + "\n")
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
