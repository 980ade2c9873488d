"""ti-slurm's benchmark suite: every case side by side with its baseline, in the same run.

    python3 bench/run.py            # everything (needs the test cluster for the Slurm cases)
    python3 bench/run.py --quick    # the smoke version CI runs: fewer repeats, same cases
    python3 bench/run.py --no-cluster

Prints a table (case, ti-slurm, baseline, ratio, target) and writes it as JSON
(bench/results/latest.json). Times are medians of repeated runs; compare ratios,
not absolute times, across machines.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
BIN = Path(sys.executable).parent  # the console scripts themselves, not a version manager's shims
TI = str(BIN / "ti-slurm")
NODELIST_4096 = "rack[01-16]-gpu[001-256]"  # 16 racks x 256 zero-padded nodes
# What any CLI that validates with pydantic and renders with jinja2 pays before doing anything
# (exiting with os._exit, as ti-slurm does, to leave out the interpreter's teardown).
IMPORT_FLOOR = "import os; from pydantic import BaseModel; import jinja2, yaml; os._exit(0)"


@dataclass
class Row:
    case: str
    tool: float
    baseline: float
    baseline_name: str
    target: str
    met: bool
    note: str = ""

    @property
    def ratio(self) -> float:
        return self.tool / self.baseline if self.baseline else float("nan")


def timed(fn: Callable[[], object]) -> float:
    """Seconds one call of ``fn`` took."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median(fn: Callable[[], object], repeat: int) -> float:
    return statistics.median(timed(fn) for _ in range(repeat))


def sh(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw)  # type: ignore[call-overload]


# -- 1. in-job env ------------------------------------------------------------------
def case_in_job_env(repeat: int, tmp: Path) -> list[Row]:
    """Each node's step, as jobs run it (``python -I -S ti_slurm/job/main.py node ... --print-env``), on 4096 nodes."""
    from ti_slurm.core.plan import Component, JobPlan
    from ti_slurm.job import main_command

    env = dict(
        os.environ,
        SLURM_JOB_ID="123",
        SLURM_JOB_NODELIST=NODELIST_4096,
        SLURM_NODEID="4095",
        TI_SLURM_NODE_ADDR="10.0.0.1",  # no resolver in the loop: it would time DNS, not ti-slurm
        TI_SLURM_JOB_DIR=str(tmp),
    )
    env.pop("SLURM_HET_SIZE", None)
    base = median(lambda: sh(["scontrol", "show", "hostnames", NODELIST_4096]), repeat)
    floor = median(lambda: sh([sys.executable, "-I", "-S", "-c", "pass"]), repeat)
    rows = []
    for mode in ("ddp", "mpi"):
        plan = tmp / f"plan-{mode}.json"
        plan.write_text(
            JobPlan(name="bench", mode=mode, command="true", components=(Component(mode, 4096, 8, 1),)).to_json()
        )
        cmd = main_command(sys.executable, "node", str(plan), "0", str(tmp / f"job-{mode}"), "--print-env")
        tool = median(lambda: sh(cmd, env=env), repeat)  # noqa: B023
        rows.append(
            Row(
                f"in-job env, {mode}, 4096 nodes x 8 GPUs",
                tool,
                base,
                "scontrol show hostnames",
                "<= 3x",
                tool <= 3 * base,
                f"bare interpreter (python -I -S -c pass): {floor:.4f} s" if mode == "mpi" else "",
            )
        )
    importtime = [*cmd[:3], "-X", "importtime", *cmd[3:]]
    imports = subprocess.run(importtime, env=env, capture_output=True, text=True, check=True).stderr
    heavy = sorted(
        {m for m in ("pydantic", "jinja2", "paramiko", "yaml", "argparse") if re.search(rf"\| {m}$", imports, re.M)}
    )
    rows[-1].note += f"; heavy imports on the job path: {', '.join(heavy) or 'none'}"
    rows[-1].met = rows[-1].met and not heavy
    cli = median(lambda: sh([TI, "env", "--mode", "mpi", "--gpus-per-node", "8"], env=env), repeat)
    rows.append(
        Row("ti-slurm env (console script, hand-written jobs)", cli, base, "scontrol show hostnames", "info", True)
    )
    return rows


# -- 2. hostlists -------------------------------------------------------------------
def case_hostlist(repeat: int) -> list[Row]:
    from ti_slurm.core.hostlist import compress, expand

    text = "rack[01-40]-gpu[0001-2500]"
    names = expand(text)
    assert len(names) == 100_000
    ours_expand = median(lambda: expand(text), repeat)
    ours_compress = median(lambda: compress(names), repeat)
    rows = []
    scontrol = median(lambda: sh(["scontrol", "show", "hostnames", text]), repeat)
    rows.append(Row("expand 100k names", ours_expand, scontrol, "scontrol show hostnames", "info", True))
    libs: dict[str, tuple[float, float]] = {}
    try:
        import hostlist as python_hostlist  # python-hostlist

        libs["python-hostlist"] = (
            median(lambda: python_hostlist.expand_hostlist(text), repeat),
            median(lambda: python_hostlist.collect_hostlist(names), repeat),
        )
    except ImportError:
        pass
    try:
        from ClusterShell.NodeSet import NodeSet

        libs["ClusterShell"] = (
            median(lambda: list(NodeSet(text)), repeat),
            median(lambda: str(NodeSet.fromlist(names)), repeat),
        )
    except ImportError:
        pass
    for which, ours, name, note in (
        (0, ours_expand, "expand 100k names", ""),
        (1, ours_compress, "compress 100k names", "ours keeps order; the libraries sort"),
    ):
        if libs:
            best = min(libs, key=lambda k: libs[k][which])
            fastest = libs[best][which]
            rows.append(Row(name, ours, fastest, f"{best} (fastest Python)", "<= 1x", ours <= fastest, note))
    return rows


# -- 2b. the code snapshot (code:) --------------------------------------------------------
def case_code_snapshot(tmp: Path, files: int = 10_000) -> list[Row]:
    """The tenth submit of an unchanged 10,000-file checkout: ti-slurm's snapshot (an index of unchanged files,
    one shared tree) beside submitit's RsyncSnapshot (rsync of git's files into a new directory each time)."""
    from ti_slurm.submitting.packager import take

    repo = tmp / "snapshot-repo"
    for i in range(files):
        path = repo / f"pkg{i // 100:03d}" / f"mod{i % 100:03d}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"VALUE = {i}\n" + "# padding\n" * 40)
    git = ["git", "-C", str(repo), "-c", "user.name=b", "-c", "user.email=b@example.com"]
    sh([*git, "init", "-q"])
    sh([*git, "add", "-A"])
    sh([*git, "commit", "-qm", "tree"])
    out = tmp / "snapshot-jobs"
    first = timed(lambda: take(str(repo), str(out)))
    ours = [timed(lambda: take(str(repo), str(out))) for _ in range(9)][-1]
    rows = [Row(f"code snapshot, 1st submit of {files} files", first, 0.0, "-", "info", True)]
    try:
        from submitit.helpers import RsyncSnapshot
    except ImportError:
        return [*rows, Row(f"code snapshot, 10th submit of {files} files", ours, 0.0, "-", "< 1 s", ours < 1.0)]
    if shutil.which("rsync") is None:
        return [*rows, Row(f"code snapshot, 10th submit of {files} files", ours, 0.0, "no rsync", "< 1 s", ours < 1.0)]
    here = os.getcwd()

    def submitit_snapshot(k: int) -> None:
        quiet, saved = os.open(os.devnull, os.O_WRONLY), os.dup(2)  # git's progress lines
        os.dup2(quiet, 2)
        try:
            with RsyncSnapshot(snapshot_dir=tmp / f"submitit-snap-{k}", root_dir=repo):
                pass
        finally:
            os.dup2(saved, 2)
            os.close(quiet)
            os.close(saved)
            os.chdir(here)

    theirs = [timed(lambda k=k: submitit_snapshot(k)) for k in range(10)][-1]
    note = "each submitit snapshot is a full copy; ours shares unchanged files"
    rows.append(
        Row(f"code snapshot, 10th submit of {files} files", ours, theirs, "submitit RsyncSnapshot", "< 1 s, <= 1x",
            ours < 1.0 and ours <= theirs, note)
    )  # fmt: skip
    return rows


# -- 3. CLI start ---------------------------------------------------------------------
def case_cli_start(repeat: int, spec: Path) -> list[Row]:
    """``render`` of a spec seen before (its kept plan: docs/running.md) and of one never seen (the same text
    under a new path each time)."""
    base = median(lambda: sh([sys.executable, "-c", "pass"]), repeat)
    help_t = median(lambda: sh([TI, "--help"]), repeat)
    sh([TI, "render", str(spec)])  # seen once: kept
    warm = median(lambda: sh([TI, "render", str(spec)]), repeat)
    cold = median(lambda: sh([TI, "render", str(unseen(spec))]), repeat)
    floor = median(lambda: sh([sys.executable, "-c", IMPORT_FLOOR]), repeat)
    return [
        Row("ti-slurm --help", help_t, base, "python -c pass", "info", True),
        Row("ti-slurm render, a spec seen before", warm, base, "python -c pass", "< 80 ms", warm < 0.08,
            "its kept plan and script: no spec validation, no template"),
        Row("ti-slurm render, a spec never seen", cold, base, "python -c pass", "<= 0.25 s", cold <= 0.25,
            f"Python + importing pydantic's BaseModel, jinja2 and yaml alone: {floor:.3f} s"),
    ]  # fmt: skip


def unseen(spec: Path) -> Path:
    """The spec under a path no plan was kept for (the same text): planned afresh, and nothing else changes (a
    changed environment would reach the job, and the node's own checks it keeps)."""
    copy = spec.with_name(f"{spec.stem}-unseen-{time.monotonic_ns()}{spec.suffix}")
    copy.write_text(spec.read_text())
    return copy


# -- 9. scale -----------------------------------------------------------------------
def case_scale(repeat: int) -> list[Row]:
    from ti_slurm.core.environ import MAX_ENV_STRING
    from ti_slurm.job.contract import node_contract
    from ti_slurm.job.modes import get_mode
    from ti_slurm.submitting.planning import make_plan
    from ti_slurm.submitting.script import render
    from ti_slurm.submitting.spec import parse_spec

    rows = []
    previous = None
    for nodes in (1, 64, 1024, 4096):
        plan = make_plan(parse_spec({"mode": "mpi", "command": "x", "nodes": nodes, "gpus_per_node": 8}))
        env = {
            "SLURM_JOB_ID": "9",
            "SLURM_JOB_NODELIST": f"n[{1:05d}-{nodes:05d}]",
            "SLURM_NODEID": "0",
            "TI_SLURM_NODE_ADDR": "10.0.0.1",
        }
        t_render = median(lambda: render(plan), repeat)  # noqa: B023
        t_env = median(lambda: node_contract(plan, env, 0, "/tmp/x"), repeat)  # noqa: B023
        note = ""
        if previous:
            note = f"env time per node vs {previous[0]} nodes: {(t_env / nodes) / (previous[1] / previous[0]):.2f}x"
        rows.append(
            Row(f"scale: mpi contract, {nodes} nodes", t_env, t_render, "render (same plan)", "linear", True, note)
        )
        previous = (nodes, t_env)
    ray = make_plan(parse_spec({"mode": "ray", "command": "x", "worker_groups": [{"nodes": 819}] * 5}))
    rows.append(
        Row(
            "scale: ray render, head + 5 groups (4096 nodes)", median(lambda: render(ray), repeat), 0, "-", "info", True
        )
    )
    lo, hi = 1, 100_000
    while lo < hi:
        mid = (lo + hi + 1) // 2
        plan = make_plan(
            parse_spec({"mode": "ps-worker", "command": "x", "ps": {"nodes": 1}, "worker": {"nodes": mid - 1}})
        )
        lo, hi = (mid, hi) if get_mode("ps-worker").env_bounds(plan)["TF_CONFIG"] <= MAX_ENV_STRING else (lo, mid - 1)
    name = "rack01-gpu001"
    rows.append(Row("largest TF_CONFIG under 128 KiB (tasks)", lo, 0, "-", "info", True, "IPv4 ip:port per task"))
    rows.append(
        Row(
            f"largest NODE_LIST under 128 KiB (nodes, {len(name)}-char names)",
            (MAX_ENV_STRING - len("NODE_LIST=") - 1) // (len(name) + 3),
            0,
            "-",
            "info",
            True,
        )
    )
    return rows


def case_supervisor() -> list[Row]:
    """The supervisor judging 4096 nodes' exits (one launch per node, as the local launcher starts them)."""
    out = sh([sys.executable, str(ROOT / "bench" / "supervisor_load.py"), "4096"]).stdout
    load = json.loads(out)
    floor = load["io_floor_ms"] / 1000
    note = f"median {load['median_ms']:.3f} ms, p99 {load['p99_ms']:.3f} ms; {load['state']}"
    return [
        Row(
            "supervisor: one exit decided, 4096 nodes (worst)",
            load["max_ms"] / 1000,
            floor,
            "read 1 record + append 1 event",
            "<= 5 ms",
            load["max_ms"] <= 5,
            note,
        ),
        Row("supervisor: peak RSS at 4096 nodes (MiB)", load["rss_mib"], 0, "-", "<= 64 MiB", load["rss_mib"] <= 64),
    ]


USAGE_START = """\
import sys, time
sys.path.insert(0, {root!r})
import ti_slurm.job.node, ti_slurm.job.watch  # what each node's step has imported by then
started = time.perf_counter()
from ti_slurm.job.usage import UsageSampler
UsageSampler({path!r}, "node01", 4, 0, {{"CUDA_VISIBLE_DEVICES": ""}})
print(time.perf_counter() - started)
"""


def case_usage_sampling(repeat: int, tmp: Path) -> list[Row]:
    """What sampling a node's use costs: at its start (importing the sampler and making it, in a bare
    interpreter that has imported what each node's step has by then), and per interval (one sample of a
    tree of 17 processes)."""
    from ti_slurm.job.process import descendants
    from ti_slurm.job.usage import SAMPLE_EVERY, UsageSampler

    program = USAGE_START.format(root=str(ROOT), path=str(tmp / "usage.json"))
    start = statistics.median(
        float(sh([sys.executable, "-I", "-S", "-c", program]).stdout) for _ in range(max(repeat, 3))
    )
    bare = median(lambda: sh([sys.executable, "-I", "-S", "-c", "pass"]), max(repeat, 3))
    sleepers = [subprocess.Popen(["sleep", "60"]) for _ in range(16)]
    try:
        sampler = UsageSampler(str(tmp / "usage.json"), "node01", 4, 0, {})
        began, rounds = time.process_time(), 200
        for _ in range(rounds):
            sampler.sample([os.getpid(), *descendants(os.getpid())])
        per_sample = (time.process_time() - began) / rounds
    finally:
        for proc in sleepers:
            proc.kill()
            proc.wait()
    share = 100 * per_sample / SAMPLE_EVERY
    return [
        Row("usage sampling: added to a node's step start", start, bare, "python -I -S -c pass",
            "<= 10% of a bare start", start <= 0.1 * bare, "import + sampler; its first sample comes 5 s later"),
        Row("usage sampling: CPU per node (% of one CPU)", share, 0, "-", "<= 0.5%", share <= 0.5,
            f"{per_sample * 1000:.2f} ms per sample of 17 processes, every {SAMPLE_EVERY:.0f} s"),
    ]  # fmt: skip


def case_console(repeat: int, tmp: Path, jobs: int = 10_000, nodes: int = 128) -> list[Row]:
    """The console's answers, over HTTP from a running `ti-slurm ui`, beside the CLI reading the same records:
    the list of ``jobs`` ended jobs, the page of a ``nodes``-node job (its record, every node's usage series),
    and a 1 GiB log's end (the log view's start) beside ``tail -c``."""

    if not installed("starlette"):
        return [Row("console: list of jobs", -1.0, 0, "-", "info", True, "the ui extra is not installed")]
    home = tmp / "console"
    ids = seed_console_jobs(home, jobs, nodes)
    env = {**os.environ, "XDG_STATE_HOME": str(home / "state")}
    with console_server(env) as get:
        big = ids[-1]
        listed = median(lambda: get("/api/jobs"), repeat)
        cli_list = median(lambda: sh([TI, "list", "--limit", "0"], env=env), repeat)
        page = median(lambda: get(f"/api/job/{big}"), repeat)
        cli_status = median(lambda: sh([TI, "status", big], env=env), repeat)
        tail = median(lambda: get(f"/api/job/{big}/log?node=ddp-0&offset=-1"), repeat)
        log = home / "jobs" / big / "logs" / "ddp-0.log"
        bare_tail = median(lambda: sh(["tail", "-c", "65536", str(log)]), repeat)
        runs = ",".join(ids[-21:-1])  # 20 runs, each with 100,000 scalars of one event file
        while get(f"/api/compare?jobs={runs}") != get(f"/api/compare?jobs={runs}"):
            pass  # read on until every run's file is read whole (each look reads at most READ_AT_MOST of it)
        compared = median(lambda: get(f"/api/compare?jobs={runs}"), repeat)
    return [
        Row(f"console: list of {jobs} jobs (GET /api/jobs)", listed, cli_list, "ti-slurm list --limit 0",
            "< 1 s", listed < 1.0, "every job's record read, newest 500 shown"),
        Row(f"console: page of a {nodes}-node job", page, cli_status, "ti-slurm status", "< 1 s", page < 1.0,
            "its record, each node's usage series and its events"),
        Row("console: a 1 GiB log's end (the log view)", tail, bare_tail, "tail -c 65536", "< 50 ms", tail < 0.05,
            "its last 64 KiB, never the whole log"),
        Row("console: 20 runs compared, 100,000 points each", compared, 0, "-", "< 1 s", compared < 1.0,
            "their settings and one scalar each (2,000 points a tag kept: older ones thinned)"),
    ]  # fmt: skip


def case_list_many(repeat: int, tmp: Path, sizes: tuple[int, ...] = (10_000, 100_000)) -> list[Row]:
    """``ti-slurm list`` (the newest 20) over a registry of 10,000 and of 100,000 ended jobs: its time and its peak
    memory (the process's maximum resident set), beside one of 100 jobs. The jobs shown have their records; the
    older ones are registry entries only (nothing of them is read)."""
    rows = []
    for size in (100, *sizes):
        home = tmp / f"list-{size}"
        seed_registry(home, size)
        env = {**os.environ, "XDG_STATE_HOME": str(home / "state")}
        sh([TI, "list"], env=env)  # the first list of an older registry makes its index
        took = median(lambda: sh([TI, "list"], env=env), repeat)  # noqa: B023 (called at once)
        peak = peak_rss_mib([TI, "list"], env)
        if size == 100:
            small = took
            continue
        rows.append(Row(f"list: newest 20 of {size:,} ended jobs (time; peak {peak:.0f} MiB)", took, small,
                        "the same over 100 jobs", "< 0.2 s, < 40 MiB", took < 0.2 and peak < 40,
                        "read from the end of the registry's index"))  # fmt: skip
        shutil.rmtree(home, ignore_errors=True)
    return rows


def peak_rss_mib(argv: list[str], env: dict[str, str]) -> float:
    """The peak resident memory of one run of ``argv`` (MiB), as the kernel counted it."""
    probe = "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, capture_output=True);" \
        " print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"  # fmt: skip
    return int(sh([sys.executable, "-c", probe, *argv], env=env).stdout) / 1024


def seed_registry(home: Path, jobs: int, shown: int = 20) -> None:
    """A registry of ``jobs`` ended local jobs as an older ti-slurm left it (no index); the newest ``shown`` with
    their job records."""
    from ti_slurm.core.paths import JobPaths

    registry = home / "state" / "ti-slurm" / "jobs"
    registry.mkdir(parents=True)
    now = time.time() - 3600
    for k in range(jobs):
        job_id = f"local-{200000 + k}"
        paths = JobPaths.of(str(home / "jobs"), job_id)
        info = {"job_id": job_id, "name": f"job{k}", "backend": "local", "job_dir": paths.root, "state": "COMPLETED",
                "submission": "s", "submitted": now + k / 1000}  # fmt: skip
        (registry / f"{job_id}.json").write_text(json.dumps(info) + "\n")
        if k >= jobs - shown:
            Path(paths.root).mkdir(parents=True)
            start = {"event": "start", "time": now + k, "submission": "s", "attempt": 0, "mode": "ddp",
                     "components": [{"name": "ddp", "nodes": ["n1", "n2"]}]}  # fmt: skip
            end = {"event": "end", "time": now + k + 60, "submission": "s", "attempt": 0, "state": "COMPLETED",
                   "reason": "every required step exited 0"}  # fmt: skip
            Path(paths.status).write_text(json.dumps(start) + "\n" + json.dumps(end) + "\n")


def case_scalars(repeat: int, tmp: Path, copies: int = 10_000) -> list[Row]:
    """The console's training scalars: a 10 MB TensorBoard event file (PyTorch's SummaryWriter's records, 100,000
    scalars) read whole by ti-slurm's stdlib reader, one look of it (what a page refresh reads at most), and a look
    once it grew by one event; beside TensorBoard's own reader (its EventAccumulator) loading the same file."""
    from ti_slurm.core.tfevents import READ_AT_MOST, ScalarReader, read_scalars

    one = (ROOT / "tests" / "data" / "tensorboard" / "torch.tfevents").read_bytes()
    folder = tmp / "scalars"
    folder.mkdir()
    path = folder / "events.out.tfevents.1.bench"
    path.write_bytes(one * copies)

    def read(p: str, offset: int, size: int) -> bytes:
        with open(p, "rb") as fh:
            fh.seek(offset)
            return fh.read(size)

    def find(where: str, mark: str) -> list[str]:
        return [str(path)]

    whole = median(lambda: read_scalars(path.read_bytes()), repeat)
    look = median(lambda: ScalarReader(str(folder), find, read).look(), repeat)
    reader = ScalarReader(str(folder), find, read)
    while reader.offsets.get(str(path), 0) < path.stat().st_size:
        reader.look()
    with path.open("ab") as fh:
        fh.write(one)
    grown = timed(reader.look)
    if not installed("tensorboard"):
        return [Row("scalars: a 10 MB event file, read whole", whole, 0, "-", "info", True, "no tensorboard here")]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # TensorBoard imports TensorFlow where it is: no banner
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def accumulate() -> object:
        acc = EventAccumulator(str(path), size_guidance={"scalars": 0})
        return acc.Reload()

    theirs = median(accumulate, repeat)
    mib = READ_AT_MOST >> 20
    return [
        Row(f"scalars: a 10 MB event file ({10 * copies} points), read whole", whole, theirs,
            "TensorBoard's EventAccumulator", "info", True, "the stdlib reader ti-slurm ships: no TensorBoard"),
        Row(f"scalars: one look ({mib} MiB: a console refresh at most)", look, theirs,
            "TensorBoard's EventAccumulator", "< 0.5 s", look < 0.5, "a longer history is caught up over looks"),
        Row("scalars: a look after one more event", grown, theirs, "TensorBoard's EventAccumulator",
            "< 10 ms", grown < 0.01, "only what the file gained is read"),
    ]  # fmt: skip


@contextlib.contextmanager
def console_server(env: dict[str, str]) -> Iterator[Callable[[str], bytes]]:
    """``ti-slurm ui`` running with ``env``: a GET of a path of it, with its token, once it listens."""
    import socket
    import urllib.request

    with socket.socket() as probe:  # a port free now
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    quiet = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    proc = subprocess.Popen([TI, "ui", "--port", str(port)], env=env, **quiet)  # type: ignore[call-overload]
    try:
        assert proc.stdout is not None and proc.stderr is not None
        said = proc.stdout.readline().strip()
        if "token=" not in said:
            raise RuntimeError(f"ti-slurm ui did not start: {said} {proc.stderr.read()[-300:]}")
        token = said.rsplit("token=", 1)[1]

        def get(path: str) -> bytes:
            url, auth = f"http://127.0.0.1:{port}{path}", {"authorization": f"token {token}"}
            request = urllib.request.Request(url, headers=auth)
            with urllib.request.urlopen(request, timeout=60) as answer:
                return bytes(answer.read())

        for _ in range(100):  # listening
            try:
                get("/static/console.css")
                break
            except OSError:
                time.sleep(0.1)
        yield get
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def case_console_queries(tmp: Path, seconds: int, pages: int = 10) -> list[Row]:
    """What following jobs in the console costs the controller: ``pages`` job pages open (each refreshed every
    2 s and its log view every second, as its script does) for ``seconds``, beside one ``ti-slurm wait`` (what
    ``submit --wait`` does) for as long; read-only RPCs counted with ``sdiag``. The jobs sleep throughout (four
    run, the rest wait)."""
    import threading

    if not installed("starlette"):
        return [Row("console: controller queries", -1.0, 0, "-", "info", True, "the ui extra is not installed")]
    env = {**os.environ, "XDG_STATE_HOME": str(tmp / "console-queries"), "XDG_RUNTIME_DIR": str(tmp / "cq-run")}
    (tmp / "cq-run").mkdir(mode=0o700)
    spec = tmp / "console-queries.yaml"
    spec.write_text(f"mode: ddp\nnodes: 1\npartition: debug\noutput_dir: {tmp / 'cq-out'}\ncommand: sleep 600\n")
    ids = [sh([TI, "submit", str(spec)], env=env).stdout.split()[0] for _ in range(pages)]
    try:
        with console_server(env) as get:

            def open_pages() -> None:
                def page(job: str) -> None:  # its data every 2 s, its log view every second (as its script)
                    end, offset, tick = time.monotonic() + seconds, -1, 0
                    while time.monotonic() < end:
                        with contextlib.suppress(OSError, ValueError):
                            if tick % 2 == 0:
                                get(f"/api/job/{job}")
                            offset = json.loads(get(f"/api/job/{job}/log?node=0&offset={offset}"))["offset"]
                        tick += 1
                        time.sleep(1.0)

                threads = [threading.Thread(target=page, args=(job,)) for job in ids]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()

            console, _ = controller_queries(open_pages)

            def wait() -> None:
                follower = subprocess.Popen([TI, "wait", ids[0]], env=env, stderr=subprocess.DEVNULL)
                time.sleep(seconds)
                follower.terminate()
                follower.wait()

            waiting, _ = controller_queries(wait)
    finally:
        subprocess.run(["scancel", *ids], check=False)
    per_minute = 60 / seconds
    return [
        Row(f"console: {pages} open job pages, controller queries per minute", console * per_minute,
            waiting * per_minute, "one ti-slurm wait (as submit --wait)", "<= 1x", console <= waiting,
            f"read-only RPCs (sdiag) over {seconds} s; each page refreshed every 2 s, its log view every 1 s"),
    ]  # fmt: skip


def case_sweep_followers(tmp: Path, points: int, seconds: int, backend: str = "slurm") -> list[Row]:
    """A ``points``-point sweep (one job array, most of it waiting) followed for ``seconds`` by ``ti-slurm wait``,
    ``ti-slurm list`` every 10 s and an open console (its sweep page every 2 s, its list every 5 s) together,
    through ``backend``: read-only controller RPCs (``sdiag``) per 30 s, which the user's shared answers are to
    keep at one."""
    import threading

    if not installed("starlette"):
        return [Row(f"sweep of {points} followed", -1.0, 0, "-", "info", True, "the ui extra is not installed")]
    run = tmp / f"sweep-run-{backend}"
    run.mkdir(mode=0o700)
    env = {**os.environ, "XDG_STATE_HOME": str(tmp / f"sweep-state-{backend}"), "XDG_RUNTIME_DIR": str(run)}
    spec = tmp / f"sweep-{backend}.yaml"
    spec.write_text(f"mode: ddp\nnodes: 1\npartition: debug\noutput_dir: {tmp / 'sweep-out'}\n"
                    f"command: sleep {seconds + 120}\n")  # fmt: skip
    grid = tmp / f"points-{backend}.json"
    grid.write_text(json.dumps([{"k": str(k)} for k in range(points)]))
    sweep = sh([TI, "sweep", str(spec), "--points", str(grid), "--backend", backend], env=env).stdout.split()[0]
    stop = time.monotonic() + seconds
    try:
        with console_server(env) as get:

            def follow() -> None:
                waiting = subprocess.Popen([TI, "wait", sweep], env=env, stderr=subprocess.DEVNULL)

                def lister() -> None:
                    while time.monotonic() < stop:
                        subprocess.run([TI, "list"], env=env, capture_output=True, check=False)
                        time.sleep(10)

                def console() -> None:
                    tick = 0
                    while time.monotonic() < stop:
                        with contextlib.suppress(OSError, ValueError):
                            get(f"/api/sweep/{sweep}")
                            if tick % 5 == 0:
                                get("/api/jobs")
                        tick += 2
                        time.sleep(2)

                threads = [threading.Thread(target=lister), threading.Thread(target=console)]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                waiting.terminate()
                waiting.wait()

            queries, by_type = controller_queries(follow)
    finally:
        subprocess.run([TI, "cancel", sweep], env=env, capture_output=True, check=False)
    per_30s = queries / (seconds / 30)
    kinds = ", ".join(f"{k.removeprefix('REQUEST_')} {v}" for k, v in sorted(by_type.items())) or "none"
    return [
        Row(f"sweep of {points} points followed ({backend}): controller queries per 30 s", per_30s, 0.0, "-",
            "<= 1", per_30s <= 1.0, f"wait + list every 10 s + a console, {seconds} s: {kinds}"),
    ]  # fmt: skip


def seed_console_jobs(home: Path, jobs: int, nodes: int) -> list[str]:
    """``jobs`` ended local jobs as their records are (registry entry, status.jsonl), the last one with ``nodes``
    nodes, a full usage series per node and a 1 GiB log (sparse: only its end is written)."""
    from ti_slurm.core.paths import JobPaths
    from ti_slurm.job.usage import SERIES_POINTS

    registry = home / "state" / "ti-slurm" / "jobs"
    registry.mkdir(parents=True)
    now, ids = time.time() - 3600, []
    for k in range(jobs):
        job_id = f"local-{100000 + k}"
        paths = JobPaths.of(str(home / "jobs"), job_id)
        names = [f"node{i:03d}" for i in range(nodes if k == jobs - 1 else 2)]
        Path(paths.logs_dir).mkdir(parents=True)
        start = {"event": "start", "time": now + k, "submission": "s", "attempt": 0, "mode": "ddp",
                 "components": [{"name": "ddp", "nodes": names}]}  # fmt: skip
        end = {"event": "end", "time": now + k + 60, "submission": "s", "attempt": 0, "state": "COMPLETED",
               "reason": "every required step exited 0"}  # fmt: skip
        Path(paths.status).write_text(json.dumps(start) + "\n" + json.dumps(end) + "\n")
        info = {"job_id": job_id, "name": f"job{k}", "backend": "local", "job_dir": paths.root, "state": "COMPLETED",
                "submission": "s", "submitted": now + k - 1}  # fmt: skip
        (registry / f"{job_id}.json").write_text(json.dumps(info) + "\n")
        ids.append(job_id)
    series = [[5.0 * i, 95.0, 2 << 30, [88.0] * 8] for i in range(SERIES_POINTS)]
    for i in range(nodes):
        usage = {"node": f"node{i:03d}", "time": now + 60, "started": now, "cpus": 8, "cpu_percent": 95.0,
                 "cpu_seconds": 400.0, "rss": 2 << 30, "peak_rss": 3 << 30, "mem_request": 0,
                 "samples": SERIES_POINTS, "gpus": {}, "series": series}  # fmt: skip
        Path(JobPaths.of(str(home / "jobs"), ids[-1]).node_usage("ddp", i)).write_text(json.dumps(usage))
    events = home / "events.out.tfevents.1.bench"  # 100,000 scalars, linked into 20 runs' folders
    events.write_bytes((ROOT / "tests" / "data" / "tensorboard" / "torch.tfevents").read_bytes() * 10_000)
    for job_id in ids[-21:-1]:
        folder = Path(JobPaths.of(str(home / "jobs"), job_id).tensorboard(""))
        folder.mkdir(parents=True)
        os.link(events, folder / events.name)
    log = Path(JobPaths.of(str(home / "jobs"), ids[-1]).node_log("ddp", 0))
    with open(log, "wb") as fh:
        fh.truncate((1 << 30) - (1 << 20))
        fh.seek(0, 2)
        fh.write(b"".join(b"step %d loss 0.%04d\n" % (i, i % 9999) for i in range(40_000))[: 1 << 20])
    return ids


# -- cluster cases ------------------------------------------------------------------------
def held_spec(tmp: Path, body: str) -> Path:
    path = tmp / f"spec-{time.monotonic_ns()}.yaml"
    path.write_text(body + f"\noutput_dir: {tmp / 'out'}\n")
    return path


def case_submit(repeat: int, tmp: Path) -> list[Row]:
    spec = held_spec(tmp, "mode: mpi\nnodes: 1\ncommand: 'true'\nsbatch: {hold: true}")
    script = tmp / "held.sh"
    script.write_text(sh([TI, "render", str(spec)]).stdout)
    (tmp / "out").mkdir(exist_ok=True)
    state = str(tmp / "state")
    env = dict(os.environ, XDG_STATE_HOME=state)
    tool, cold, base, peer = [], [], [], []
    with_submitit = installed("submitit")
    sh([TI, "submit", str(spec)], env=env)  # seen once: its plan kept
    for _ in range(repeat):  # alternating, so each sees the same machine
        tool.append(timed(lambda: sh([TI, "submit", str(spec)], env=env)))
        fresh_spec = unseen(spec)
        cold.append(timed(lambda fresh=fresh_spec: sh([TI, "submit", str(fresh)], env=env)))
        base.append(timed(lambda: sh(["sbatch", "--parsable", str(script)])))
        if with_submitit:
            peer.append(timed(lambda: sh([sys.executable, "-c", SUBMITIT_SUBMIT, str(tmp / "submitit")])))
    subprocess.run(["scancel", "--state=PENDING", "--user=root"], check=False)
    start = median(lambda: sh([sys.executable, "-c", "pass"]), repeat)
    ours, fresh, sbatch = statistics.median(tool), statistics.median(cold), statistics.median(base)
    spent = submit_breakdown(repeat, spec, sbatch, start)
    rows = [
        Row("submit", ours, sbatch, "sbatch (same script)", "<= 1.5x", ours <= 1.5 * sbatch,
            f"python -c pass alone is {start / sbatch:.1f}x sbatch; a spec seen before; {spent}"),
    ]  # fmt: skip
    if peer:
        theirs = statistics.median(peer)
        rows += [
            Row("submit as a process, against submitit's", ours, theirs, "a submitit submit script", "<= 1.0x",
                ours <= theirs, "spec (or function) to job id, one process each, held jobs; a spec seen before"),
            Row("submit as a process, a spec never seen", fresh, theirs, "a submitit submit script", "info", True,
                "planned afresh: the spec validated, the script rendered"),
        ]  # fmt: skip
    return rows


def submit_breakdown(repeat: int, spec: Path, sbatch: float, start: float) -> str:
    """Where a submit's time goes: Python's start, the imports (a spec seen before; never seen: more), planning
    and rendering in a warm process, the Slurm call; beside submitit's import."""

    def imports(modules: str) -> float:
        return max(0.0, median(lambda: sh([sys.executable, "-c", f"import {modules}"]), repeat) - start)

    kept = imports("ti_slurm.cli, ti_slurm.client, ti_slurm.submitting.plancache")
    fresh = imports("ti_slurm.cli, ti_slurm.client, ti_slurm.submitting.planning, ti_slurm.submitting.script")
    theirs = imports("submitit") if installed("submitit") else 0.0
    from ti_slurm.client import load
    from ti_slurm.submitting.planning import plan_job
    from ti_slurm.submitting.script import render

    planned = plan_job(load(spec))
    plan_t, render_t = median(lambda: plan_job(load(spec)), repeat), median(lambda: render(planned), repeat)
    return (f"where it goes: Python {start * 1e3:.0f} ms, imports {kept * 1e3:.0f} ms (never seen: "
            f"{fresh * 1e3:.0f} ms), planning {plan_t * 1e3:.1f} ms and rendering {render_t * 1e3:.1f} ms "
            f"(never seen), sbatch {sbatch * 1e3:.0f} ms; submitit's import {theirs * 1e3:.0f} ms")  # fmt: skip


# submitit as a user's one-shot submit script: a function to a held one-node job, its id printed
SUBMITIT_SUBMIT = """
import sys, submitit
ex = submitit.AutoExecutor(folder=sys.argv[1], cluster="slurm")
ex.update_parameters(timeout_min=10, slurm_partition="debug", nodes=1, tasks_per_node=1, cpus_per_task=1,
                     slurm_additional_parameters={"hold": True})
print(ex.submit(print, "hello").job_id)
"""


def case_submit_to_running(repeat: int, tmp: Path) -> list[Row]:
    """From starting the submit process to the user's Python running on both nodes of a 2-node job: ``ti-slurm
    submit`` of a spec seen before and never seen, beside submitit's submit script (a function on 2 nodes)."""
    if not installed("submitit"):
        return [Row("submit to Python running on 2 nodes", 0.0, 0.0, "-", "info", True, "submitit not installed")]
    state = str(tmp / "state")
    code = "import os, time; open(os.environ['MARKS'] + '/' + os.environ['RANK'], 'w').write(repr(time.time()))"
    spec = held_spec(tmp, f"mode: ddp\nnodes: 2\ncommand: python3 -c {json.dumps(code)}")
    theirs = [sys.executable, "-c", SUBMITIT_TWO_NODES, str(tmp / "submitit")]
    kept, fresh, peer = [], [], []
    for k in range(repeat + 1):  # alternating; the first, seen once, keeps the plan (and is left out)
        kept.append(to_running(tmp / f"kept-{k}", [TI, "submit", str(spec)], dict(os.environ, XDG_STATE_HOME=state)))
        fresh.append(to_running(tmp / f"fresh-{k}", [TI, "submit", str(unseen(spec))], dict(os.environ,
                                XDG_STATE_HOME=state)))  # fmt: skip
        peer.append(to_running(tmp / f"submitit-{k}", theirs, dict(os.environ)))
    tool, cold, them = (statistics.median(x[1:]) for x in (kept, fresh, peer))
    return [
        Row("submit to Python running on 2 nodes", tool, them, "a submitit submit script", "<= 1.0x",
            tool <= them, "a spec seen before; the process started to both ranks' first line of Python"),
        Row("submit to Python running on 2 nodes, a spec never seen", cold, them, "a submitit submit script",
            "info", True, "planned afresh"),
    ]  # fmt: skip


def to_running(marks: Path, argv: list[str], env: dict[str, str]) -> float:
    """Seconds from starting ``argv`` (a submit) to both ranks' marks written in ``marks``."""
    marks.mkdir()
    env = dict(env, MARKS=str(marks))
    t0 = time.time()
    job = sh([*argv, str(marks)] if argv[0] == sys.executable else argv, env=env).stdout.split()[0]
    deadline = time.monotonic() + 120
    while len(done := list(marks.glob("[01]"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    wait_gone(job)  # the next one finds the nodes free
    return max(float(p.read_text()) for p in done) - t0


# submitit as a user's one-shot script: a function on 2 nodes that notes when it runs (argv: folder, marks)
SUBMITIT_TWO_NODES = """
import sys, submitit
def mark(folder):
    import os, time, submitit
    open(os.path.join(folder, str(submitit.JobEnvironment().global_rank)), "w").write(repr(time.time()))
ex = submitit.AutoExecutor(folder=sys.argv[1], cluster="slurm")
ex.update_parameters(timeout_min=10, slurm_partition="debug", nodes=2, tasks_per_node=1, cpus_per_task=1)
print(ex.submit(mark, sys.argv[2]).job_id)
"""


def installed(module: str) -> bool:
    """Whether a peer tool's package can be imported here."""
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def pyslurm_fits() -> str:
    """Why the pyslurm backend cannot serve this cluster ("" when it can)."""
    from ti_slurm.backends.pyslurm import pyslurm_mismatch

    return pyslurm_mismatch() or ""


def case_submit_backends(repeat: int, tmp: Path) -> list[Row]:
    """Submit through each backend that reaches Slurm: the CLI, and the Python API in one process."""
    if pyslurm_fits():
        return [Row("submit through pyslurm", 0.0, 0.0, "-", "info", True, f"not measured: {pyslurm_fits()}")]
    import ti_slurm

    spec = held_spec(tmp, "mode: mpi\nnodes: 1\ncommand: 'true'\nsbatch: {hold: true}")
    script = tmp / "held.sh"
    script.write_text(sh([TI, "render", str(spec)]).stdout)
    env = dict(os.environ, XDG_STATE_HOME=str(tmp / "state"))
    os.environ["XDG_STATE_HOME"] = str(tmp / "state")
    cli = {b: median(lambda b=b: sh([TI, "submit", "--backend", b, str(spec)], env=env), repeat) for b in BACKENDS}
    api = {b: median(lambda b=b: ti_slurm.submit(str(spec), backend=b), repeat) for b in BACKENDS}
    del os.environ["XDG_STATE_HOME"]
    base = median(lambda: sh(["sbatch", "--parsable", str(script)]), repeat)
    subprocess.run(["scancel", "--state=PENDING", "--user=root"], check=False)
    return [
        Row("submit (CLI), --backend pyslurm", cli["pyslurm"], base, "sbatch (same script)", "info", True,
            f"--backend slurm: {cli['slurm']:.4f} s"),
        Row("submit (Python API), backend=pyslurm", api["pyslurm"], api["slurm"], "backend=slurm (runs sbatch)",
            "info", True, f"sbatch alone: {base:.4f} s"),
    ]  # fmt: skip


BACKENDS = ("slurm", "pyslurm")


def all_rpcs(fn: Callable[[], object]) -> int:
    """Run ``fn``; how many RPCs of any kind slurmctld served meanwhile (``sdiag``'s own left out)."""
    sh(["sdiag", "-r"])
    fn()
    counts = re.finditer(r"(REQUEST_\w+)\s+\(\s*\d+\) count:(\d+)", sh(["sdiag"]).stdout)
    return sum(int(m.group(2)) for m in counts if m.group(1) not in ("REQUEST_STATS_INFO", "REQUEST_RESET_STATS"))


def case_rest_backend(repeat: int, tmp: Path, jobs: int = 20) -> list[Row]:
    """Submit and status through slurmrestd (the rest backend) beside the Slurm commands and pyslurm, each with
    the controller RPCs it costs (``sdiag``). The server's API version is asked once, then remembered."""
    from ti_slurm.core.site import load_site_config

    if not load_site_config().rest_url:
        return [Row("submit through slurmrestd", 0.0, 0.0, "-", "info", True, "not measured: no rest_url")]
    token = sh(["scontrol", "token", "lifespan=900"]).stdout.strip().split("=", 1)[1]
    spec = held_spec(tmp, "mode: mpi\nnodes: 1\ncommand: 'true'\nsbatch: {hold: true}")
    backends = ["slurm", "rest"] + ([] if pyslurm_fits() else ["pyslurm"])
    env = {
        b: dict(os.environ, XDG_STATE_HOME=str(tmp / f"rest-state-{b}"), XDG_RUNTIME_DIR=str(tmp / f"rest-rt-{b}"),
                SLURM_JWT=token)
        for b in backends
    }  # fmt: skip
    for b in backends:  # as a login's own: the shared answers (the queue, the server's API version) live there
        (tmp / f"rest-rt-{b}").mkdir(mode=0o700, exist_ok=True)

    def submit(b: str) -> object:
        return sh([TI, "submit", "--backend", b, str(spec)], env=env[b])

    def listing(b: str) -> object:  # a fresh queue answer each time (the API version stays remembered)
        for cached in (tmp / f"rest-rt-{b}").glob("ti-slurm-*/queue-*.json"):
            cached.unlink()
        return sh([TI, "list", "--limit", str(jobs)], env=env[b])

    def listing_again(b: str) -> object:  # the shared answer stale, nothing changed since: slurmrestd is asked so
        for cached in (tmp / f"rest-rt-{b}").glob("ti-slurm-*/queue-*.json"):
            cached.write_text(json.dumps({**json.loads(cached.read_text()), "time": 0}))
        return sh([TI, "list", "--limit", str(jobs)], env=env[b])

    took = {b: median(lambda b=b: submit(b), repeat) for b in backends}
    rpcs = {b: all_rpcs(lambda b=b: submit(b)) for b in backends}
    for b in backends:
        for _ in range(jobs - repeat - 1):
            submit(b)
    listed = {b: median(lambda b=b: listing(b), repeat) for b in backends}
    list_rpcs = {b: all_rpcs(lambda b=b: listing(b)) for b in backends}
    again = {b: median(lambda b=b: listing_again(b), repeat) for b in backends}
    subprocess.run(["scancel", "--state=PENDING", "--user=root"], check=False)
    others = ", ".join(f"{b} {took[b]:.4f} s / {rpcs[b]} RPCs" for b in backends if b != "rest")
    listed_others = ", ".join(f"{b} {listed[b]:.4f} s / {list_rpcs[b]} RPCs" for b in backends if b != "rest")
    return [
        Row("submit (CLI), --backend rest", took["rest"], took["slurm"], "--backend slurm (sbatch)", "info", True,
            f"controller RPCs per submit: rest {rpcs['rest']}; {others}"),
        Row(f"status of {jobs} jobs (ti-slurm list), --backend rest", listed["rest"], listed["slurm"],
            "--backend slurm (scontrol)", "<= 1.2x", listed["rest"] <= 1.2 * listed["slurm"],
            f"RPCs per list: rest {list_rpcs['rest']}; {listed_others}"),
        Row(f"status of {jobs} jobs, the shared answer stale, nothing changed, --backend rest", again["rest"],
            again["slurm"], "--backend slurm (scontrol)", "<= 1.2x", again["rest"] <= 1.2 * again["slurm"],
            "slurmrestd asked what changed since its answer's last_update (Slurm 23.11+; 22.05: asked whole)"),
    ]  # fmt: skip


def wait_gone(job_id: str) -> None:
    while sh(["squeue", "-h", "-j", job_id]).stdout.strip():
        time.sleep(0.2)


def run_baseline_job(folder: Path, body: str, nodes: int = 4, partition: str = "") -> Path:
    """sbatch a hand-written script (``body``, with ``{dir}`` standing for ``folder``) on ``nodes`` nodes (4) of
    ``partition`` (the default one); wait for its end."""
    folder.mkdir()
    script = folder / "job.sh"
    where = f"#SBATCH -p {partition}\n" if partition else ""
    text = f"#!/bin/bash\n#SBATCH -N{nodes}\n{where}#SBATCH -o {folder}/o\n{body.replace('{dir}', str(folder))}\n"
    script.write_text(text)
    wait_gone(sh(["sbatch", "--parsable", str(script)]).stdout.strip())
    return folder


def time_to_command(tmp: Path, name: str, body: str, image: str = "") -> float:
    """Seconds from a 4-node job's start (its plan written) to its command running on every node; ``body`` is the
    spec without its command, ``image`` the fields of its ``container:``, if any."""
    marks = tmp / f"start-{name}"
    marks.mkdir()
    env = dict(os.environ, XDG_STATE_HOME=str(tmp / "state"))
    if image:
        body += f"\ncontainer: {{{image}, mounts: ['{marks}:{marks}']}}"
    spec = held_spec(tmp, f"mode: mpi\nnodes: 4\n{body}\ncommand: 'date +%s.%N > {marks}/t1-$INDEX'")
    job = sh([TI, "submit", "--wait", str(spec)], env=env).stdout.split()[0]
    t0 = (tmp / "out" / job / "plan.json").stat().st_mtime
    return max(float(p.read_text()) for p in marks.glob("t1-*")) - t0


def baseline_to_command(folder: Path, srun: str) -> float:
    """Seconds from a hand-written 4-node batch script's start to ``srun`` (its options) running a command on
    every node."""
    command = "bash -c 'date +%s.%N > {dir}/t1-$SLURM_NODEID'"
    folder = run_baseline_job(folder, f"date +%s.%N > {{dir}}/t0\n{srun} {command}")
    t0 = float((folder / "t0").read_text())
    return max(float(p.read_text()) for p in folder.glob("t1-*")) - t0


def case_job_start(repeat: int, tmp: Path) -> list[Row]:
    times: dict[str, list[float]] = {"on": [], "off": []}
    base_times = []
    for i in range(repeat):
        for preflight in ("on", "off"):  # alternating, so both see the same machine
            times[preflight].append(time_to_command(tmp, f"{preflight}-{i}", f"preflight: {preflight}"))
        base_times.append(baseline_to_command(tmp / f"base-{i}", "srun"))
    tool, off, base = (statistics.median(x) for x in (times["on"], times["off"], base_times))
    return [
        Row(
            "job start to command on all 4 nodes",
            tool,
            base,
            "sbatch + one srun",
            "<= 1.2x + 1 s",
            tool <= 1.2 * base + 1.0,
        ),
        Row(
            "job start, preflight on vs off (4 nodes)",
            tool,
            off,
            "preflight: off",
            "<= 1.1x",
            tool <= 1.1 * off,
            f"the checks cost {1000 * (tool - off):+.0f} ms",
        ),
    ]


IMAGES = Path(os.environ.get("TI_SLURM_IMAGES", "/var/lib/ti-slurm-test/images"))


def case_container_start(repeat: int, tmp: Path) -> list[Row]:
    """Job start inside a training image (pyxis: enroot; oci: crun) against the same job on the bare node, and
    against the same image by hand (``srun --container-image``, pyxis itself)."""
    if not (IMAGES / "base.sqsh").exists():
        return []
    images = {
        "bare": "",
        "pyxis": f"image: {IMAGES / 'base.sqsh'}, runtime: pyxis",
        "oci": f"image: {IMAGES / 'base' / 'bundle'}, runtime: oci",
    }
    times: dict[str, list[float]] = {name: [] for name in images}
    by_hand = []
    for i in range(repeat):
        for name, image in images.items():  # alternating, so all see the same machine
            times[name].append(time_to_command(tmp, f"image-{name}-{i}", "", image))
        # pyxis runs the cluster's TaskProlog inside the image: it must be mounted there too
        from tests.testcluster import this_cluster

        state = this_cluster().state
        srun = f"srun --container-image={IMAGES / 'base.sqsh'} --container-mounts={{dir}}:{{dir}},{state}:{state}"
        by_hand.append(baseline_to_command(tmp / f"image-hand-{i}", srun))
    bare, pyxis, oci, hand = (statistics.median(x) for x in (times["bare"], times["pyxis"], times["oci"], by_hand))
    return [
        Row(
            "job start in an image, pyxis (4 nodes)",
            pyxis,
            bare,
            "the same job, bare nodes",
            "<= bare + 1 s",
            pyxis <= bare + 1.0,
            f"the image costs {1000 * (pyxis - bare):+.0f} ms",
        ),
        Row(
            "job start in an image, oci (4 nodes)",
            oci,
            bare,
            "the same job, bare nodes",
            "<= bare + 1 s",
            oci <= bare + 1.0,
            f"the image costs {1000 * (oci - bare):+.0f} ms",
        ),
        Row(
            "job start in an image, pyxis, vs by hand",
            pyxis,
            hand,
            "sbatch + srun --container-image",
            "<= 1.2x + 1 s",
            pyxis <= 1.2 * hand + 1.0,
        ),
    ]


def case_failure(repeat: int, tmp: Path) -> list[Row]:
    tool_times, base_times = [], []
    env = dict(os.environ, XDG_STATE_HOME=str(tmp / "state"))
    for i in range(repeat):
        spec = held_spec(tmp, "mode: mpi\nnodes: 4\ncommand: 'if [ $INDEX = 1 ]; then sleep 2; exit 3; fi; sleep 100'")
        job = subprocess.run(
            [TI, "submit", "--wait", str(spec)], env=env, capture_output=True, text=True
        ).stdout.split()[0]
        job_dir = tmp / "out" / job
        failed = json.loads((job_dir / "nodes" / "mpi.1.json").read_text())["ended"]
        end = [json.loads(x) for x in (job_dir / "status.jsonl").read_text().splitlines()][-1]["time"]
        tool_times.append(end - failed)
        base_dir = run_baseline_job(
            tmp / f"fail-{i}",
            "srun --kill-on-bad-exit=1 bash -c "
            "'if [ $SLURM_NODEID = 1 ]; then sleep 2; date +%s.%N > {dir}/tfail; exit 3; fi; sleep 100'\n"
            "date +%s.%N > {dir}/tend",
        )
        base_times.append(float((base_dir / "tend").read_text()) - float((base_dir / "tfail").read_text()))
    tool, base = statistics.median(tool_times), statistics.median(base_times)
    return [Row("failure: one rank exits 3 -> job ends", tool, base, "srun --kill-on-bad-exit", "< 5 s", tool < 5)]


def wait_for_file(path: Path, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)


def read_mark(path: Path, timeout: float = 30) -> str:
    """The line a running job's shell writes into a mark file (``date > mark``): the shell creates the file
    before it writes, so a mark that exists may still be empty; wait for its whole line."""
    deadline = time.monotonic() + timeout
    while True:
        text = path.read_text()
        if text.endswith("\n") or time.monotonic() > deadline:
            return text
        time.sleep(0.05)


def case_requeue(repeat: int, tmp: Path) -> list[Row]:
    """From the checkpoint signal to the command running again: ti-slurm's requeue (same job id) against
    cancelling the job and submitting it again by hand (a new id)."""
    env = dict(os.environ, XDG_STATE_HOME=str(tmp / "state"))
    tool_times, base_times = [], []
    for i in range(repeat):
        marks = tmp / f"requeue-{i}"
        marks.mkdir()
        command = f"touch {marks}/run-$TI_SLURM_RESTART_COUNT; trap 'exit 0' USR2; sleep 300 & wait"
        spec = held_spec(tmp, f'mode: mpi\nnodes: 2\nrestart: {{max: 1}}\ncommand: "{command}"')
        job = sh([TI, "submit", str(spec)], env=env).stdout.split()[0]
        wait_for_file(marks / "run-0")
        signalled = time.time()
        sh(["scancel", "--batch", "--signal=USR2", job])  # what Slurm's --signal=B:USR2@<before> does
        wait_for_file(marks / "run-1")
        tool_times.append((marks / "run-1").stat().st_mtime - signalled)
        subprocess.run(["scancel", job], check=False)
        script = marks / "by-hand.sh"
        script.write_text(f"#!/bin/bash\n#SBATCH -N2 -o /dev/null\nsrun touch {marks}/hand-$1; sleep 300\n")
        first = sh(["sbatch", "--parsable", str(script), "0"]).stdout.strip()
        wait_for_file(marks / "hand-0")
        cancelled = time.time()
        subprocess.run(["scancel", first], check=False)
        second = sh(["sbatch", "--parsable", str(script), "1"]).stdout.strip()
        wait_for_file(marks / "hand-1")
        base_times.append((marks / "hand-1").stat().st_mtime - cancelled)
        subprocess.run(["scancel", second], check=False)
    tool, base = statistics.median(tool_times), statistics.median(base_times)
    delay = re.search(r"cred_expire=(\d+)", sh(["scontrol", "show", "config"]).stdout)
    return [
        Row(
            "signal -> requeued command running again (2 nodes)",
            tool,
            base,
            "scancel + sbatch again by hand",
            "info",
            True,
            f"Slurm holds a requeued job for its credential lifetime (cred_expire={delay.group(1) if delay else 120} "
            "s here, 120 s by default): the floor of any same-id requeue",
        )
    ]


def node_fault_requeue(tmp: Path, tag: str, expedited: bool) -> float:
    """Seconds from a rank's GPU fault (its node blamed) to every rank of the requeued attempt running, with the
    site config's ``expedited_requeue`` or without."""
    site = tmp / f"site-{tag}.toml"
    own = Path(os.environ.get("TI_SLURM_CONFIG", "/nonexistent"))
    site.write_text((own.read_text() if own.is_file() else "") + f"\nexpedited_requeue = {str(expedited).lower()}\n")
    env = dict(os.environ, XDG_STATE_HOME=str(tmp / f"state-{tag}"), TI_SLURM_CONFIG=str(site))
    marks = tmp / f"fault-{tag}"
    marks.mkdir()
    attempt = "$TI_SLURM_RESTART_COUNT"
    command = (
        f"date +%s.%N > {marks}/run-{attempt}-$INDEX; if [ {attempt} = 0 ] && [ $INDEX = 1 ]; then sleep 2;"
        f" date +%s.%N > {marks}/failed; python3 -m ti_slurm.admin.rehearse gpu_fault --rank 1 --after 0; exit 1;"
        " fi; sleep 300"
    )
    spec = held_spec(tmp, f'mode: mpi\nnodes: 2\nrestart: {{max: 1, on: [gpu_fault]}}\ncommand: "{command}"')
    job = sh([TI, "submit", str(spec)], env=env).stdout.split()[0]
    for index in range(2):
        wait_for_file(marks / f"run-1-{index}", timeout=180)
    took = max(float(read_mark(marks / f"run-1-{index}")) for index in range(2)) - float(read_mark(marks / "failed"))
    subprocess.run(["scancel", job], check=False)
    return took


def case_node_fault_requeue(tmp: Path) -> list[Row]:
    """Slurm 25.11's expedited requeue against the plain one, for an infrastructure cause (a GPU fault: its node
    left out of the next attempt)."""
    version = re.search(r"slurm (\d+)\.(\d+)", sh(["sinfo", "--version"]).stdout)
    if not version or (int(version.group(1)), int(version.group(2))) < (25, 11):
        return []
    expedited, plain = node_fault_requeue(tmp, "expedited", True), node_fault_requeue(tmp, "plain", False)
    return [
        Row(
            "node fault -> requeued, all ranks running (expedited)",
            expedited,
            plain,
            "the same job, plain requeue",
            "<= 10 s",
            expedited <= 10,
            "Slurm 25.11, SlurmctldParameters=enable_expedited_requeue; the faulty node left out (ExcNodeList)",
        )
    ]


def in_place_restart(tmp: Path, tag: str, nodes: int = 4, partition: str = "") -> tuple[float, float]:
    """Seconds from a rank's failure to the command running again on every node: ti-slurm's restart in place,
    and a hand-written restart (a batch script that runs its srun again), on ``nodes`` nodes."""
    env = dict(os.environ, XDG_STATE_HOME=str(tmp / "state"))
    attempt = "$TI_SLURM_RESTART_COUNT"
    marks = tmp / f"in-place-{tag}"
    marks.mkdir()
    command = (
        f"date +%s.%N > {marks}/run-{attempt}-$INDEX; "
        f"if [ {attempt} = 0 ] && [ $INDEX = 1 ]; then sleep 2; date +%s.%N > {marks}/failed; exit 3; fi; sleep 300"
    )
    restart = "restart: {max: 0, on: [failure], in_place: 1}"
    where = f"partition: {partition}\n" if partition else ""
    spec = held_spec(tmp, f'mode: mpi\nnodes: {nodes}\n{where}{restart}\ncommand: "{command}"')
    job = sh([TI, "submit", str(spec)], env=env).stdout.split()[0]
    for index in range(nodes):
        wait_for_file(marks / f"run-1-{index}", timeout=120)
    tool = max(float(read_mark(marks / f"run-1-{index}")) for index in range(nodes))
    tool -= float(read_mark(marks / "failed"))
    subprocess.run(["scancel", job], check=False)
    wait_gone(job)
    by_hand = (
        "for a in 0 1; do srun --kill-on-bad-exit=1 bash -c "
        "'date +%s.%N > {dir}/run-$0-$SLURM_NODEID; if [ $0 = 0 ] && [ $SLURM_NODEID = 1 ]; then sleep 2; "
        "date +%s.%N > {dir}/failed; exit 3; fi' $a; done"
    )
    base_dir = run_baseline_job(tmp / f"in-place-hand-{tag}", by_hand, nodes, partition)
    base = max(float((base_dir / f"run-1-{index}").read_text()) for index in range(nodes))
    return tool, base - float((base_dir / "failed").read_text())


def case_in_place_restart(repeat: int, tmp: Path) -> list[Row]:
    """From a rank's failure to the command running again on every node of 4: ti-slurm's restart in place
    against a hand-written restart (a batch script that runs its srun again) and today's requeue (above)."""
    times = [in_place_restart(tmp, str(i)) for i in range(repeat)]
    tool, base = statistics.median(t for t, _ in times), statistics.median(b for _, b in times)
    return [
        Row(
            "failure -> command running again in place (4 nodes)",
            tool,
            base,
            "a batch script that runs srun again",
            "<= 3 s",
            tool <= 3,
            "today's requeue: the row 'signal -> requeued command running again' plus the queue",
        )
    ]


SPARE_PARTITION = "island1"  # 4 nodes no other partition has: a node of it may be killed
NODE_FAULT = str(ROOT / "ci" / "slurm-cluster" / "node")


def killed_and_rerun(marks: Path, job: str, nodes: int, after: int | None = None) -> float:
    """Once every node of ``job`` runs (``run-0-<index>`` files), kill the node of index 1; seconds from then
    to the command running again on every node (``run-1-<index>``) of ``after`` (default: as many)."""
    for index in range(nodes):
        wait_for_file(marks / f"run-0-{index}")
    node = read_mark(marks / "run-0-1").split()[1]
    killed = time.time()
    sh([NODE_FAULT, "kill", node])
    again = range(nodes if after is None else after)
    try:
        for index in again:
            wait_for_file(marks / f"run-1-{index}", timeout=120)
        return max(float(read_mark(marks / f"run-1-{index}").split()[0]) for index in again) - killed
    finally:
        subprocess.run(["scancel", job], check=False)
        sh([NODE_FAULT, "revive", node])  # first: a job may not end while its lost node is still down
        wait_gone(job)


def node_loss_rerun(
    tmp: Path, name: str, body: str, allocated: int, after: int, baseline: bool = True
) -> tuple[float, float]:
    """Seconds from the death of a 3-node job's node of index 1 to its command running again on ``after`` nodes:
    ti-slurm with the spec's ``body`` (its nodes and restart), and (``baseline``; else 0) a hand-written
    --no-kill script of ``allocated`` nodes that runs its srun again on ``after`` of them (~33 s: Slurm gives
    the lost node up only after its SlurmdTimeout)."""
    env = dict(os.environ, XDG_STATE_HOME=str(tmp / "state"))
    marks = tmp / name
    marks.mkdir()
    command = f"echo $(date +%s.%N) $SLURMD_NODENAME > {marks}/run-$TI_SLURM_RESTART_COUNT-$INDEX; sleep 300"
    spec = held_spec(tmp, f'mode: mpi\npartition: {SPARE_PARTITION}\n{body}\ncommand: "{command}"')
    tool = killed_and_rerun(marks, sh([TI, "submit", str(spec)], env=env).stdout.split()[0], 3, after)
    if not baseline:
        return tool, 0.0
    hand = tmp / f"{name}-hand"
    hand.mkdir()
    script = hand / "job.sh"
    line = f"echo $(date +%s.%N) $SLURMD_NODENAME > {hand}/run-$0-$SLURM_NODEID; sleep 300"
    script.write_text(
        f"#!/bin/bash\n#SBATCH -N{allocated} -p {SPARE_PARTITION} --no-kill -o {hand}/o\n"
        f"srun -N3 --kill-on-bad-exit=1 bash -c '{line}' 0\n"  # returns once Slurm gives the lost node up
        f"srun -N{after} --overlap bash -c '{line}' 1\n"
    )
    return tool, killed_and_rerun(hand, sh(["sbatch", "--parsable", str(script)]).stdout.strip(), 3, after)


IN_PLACE_ON_NODE_FAIL = "restart: {max: 0, on: [node_fail], in_place: 1}"
BASELINE_IN_FULL_RUNS = "; the hand-written script (~33 s): full runs only"


def case_spare_swap(tmp: Path, baseline: bool = True) -> list[Row]:
    """From a node's death to the command running again on every node, a spare in the lost one's place (3 nodes
    and a spare): ti-slurm against a hand-written --no-kill script that runs its srun again on what is left."""
    tool, base = node_loss_rerun(tmp, "spare", f"nodes: 3\nspare_nodes: 1\n{IN_PLACE_ON_NODE_FAIL}", 4, 3, baseline)
    return [
        Row(
            "node lost -> command running again on a spare (3+1)",
            tool,
            base,
            "a --no-kill batch script that runs srun again",
            "<= 5 s",
            tool <= 5,
            "without a spare: a requeue, ~20 s plus the queue" + ("" if baseline else BASELINE_IN_FULL_RUNS),
        )
    ]


def case_elastic_shrink(tmp: Path, baseline: bool = True) -> list[Row]:
    """From a node's death to the command running again on the nodes left (``nodes: {min: 2, max: 3}``, no
    spare): ti-slurm against the same hand-written --no-kill script as for spares, on 2 of its 3 nodes."""
    tool, base = node_loss_rerun(tmp, "elastic", f"nodes: {{min: 2, max: 3}}\n{IN_PLACE_ON_NODE_FAIL}", 3, 2, baseline)
    return [
        Row(
            "node lost -> command running again on the 2 left (2-3)",
            tool,
            base,
            "a --no-kill batch script that runs srun again",
            "<= 5 s",
            tool <= 5,
            "without a range: a requeue, ~20 s plus the queue" + ("" if baseline else BASELINE_IN_FULL_RUNS),
        )
    ]


# RPCs that only read the controller's state (sdiag's own REQUEST_STATS_INFO left out)
QUERY_RPCS = ("REQUEST_JOB_INFO", "REQUEST_JOB_INFO_SINGLE", "REQUEST_JOB_USER_INFO", "REQUEST_PARTITION_INFO",
              "REQUEST_NODE_INFO", "REQUEST_FED_INFO", "REQUEST_BUILD_INFO")  # fmt: skip


def controller_queries(fn: Callable[[], object]) -> tuple[int, dict[str, int]]:
    """Run ``fn`` and count the read-only RPCs slurmctld served meanwhile (``sdiag``, reset first)."""
    sh(["sdiag", "-r"])
    fn()
    counts = {
        m.group(1): int(m.group(2))
        for m in re.finditer(r"(REQUEST_\w+)\s+\(\s*\d+\) count:(\d+)", sh(["sdiag"]).stdout)
    }
    queries = {k: v for k, v in counts.items() if k in QUERY_RPCS}
    return sum(queries.values()), queries


def case_status(repeat: int, tmp: Path, jobs: int = 200) -> list[Row]:
    from ti_slurm.backends.base import JobInfo
    from ti_slurm.follow.registry import remember

    state = tmp / "status-state"
    os.environ["XDG_STATE_HOME"] = str(state)
    script = tmp / "hold.sh"
    script.write_text("#!/bin/bash\n#SBATCH -o /dev/null\ntrue\n")
    ids = []
    for _ in range(jobs):
        job_id = sh(["sbatch", "--parsable", "--hold", str(script)]).stdout.strip()
        remember(JobInfo(job_id, "bench", "slurm", str(tmp / "out" / job_id)))
        ids.append(job_id)
    del os.environ["XDG_STATE_HOME"]
    # a fresh answer each time: no other process's shared one
    env = dict(os.environ, XDG_STATE_HOME=str(state), XDG_RUNTIME_DIR=str(tmp / "runtime"))
    tool = median(lambda: (shutil.rmtree(tmp / "runtime", ignore_errors=True), sh([TI, "list"], env=env)), repeat)
    rpcs, _ = controller_queries(
        lambda: (shutil.rmtree(tmp / "runtime", ignore_errors=True), sh([TI, "list"], env=env))
    )
    base = median(lambda: sh(["squeue", "-h", "-o", "%i|%T|%r|%N|%j", f"--jobs={','.join(ids)}"]), repeat)
    base_rpcs, _ = controller_queries(lambda: sh(["squeue", "-h", "-o", "%i|%T|%r|%N|%j", f"--jobs={','.join(ids)}"]))
    rows = status_through_pyslurm(repeat, ids, base)
    subprocess.run(["scancel", *ids], check=False)
    floor = median(lambda: sh([sys.executable, "-c", "pass"]), repeat)
    return [
        Row(
            f"status of {jobs} jobs (ti-slurm list)",
            tool,
            base,
            "one squeue call",
            "info",
            True,
            f"controller RPCs per list: {rpcs} (squeue: {base_rpcs}); "
            f"python -c pass alone is {floor / base:.1f}x squeue",
        ),
        *rows,
    ]


def status_through_pyslurm(repeat: int, ids: list[str], squeue: float) -> list[Row]:
    """The queue states of ``ids`` in one process: the pyslurm backend beside the CLI backend and squeue."""
    if pyslurm_fits():
        return [Row("status through pyslurm", 0.0, 0.0, "-", "info", True, f"not measured: {pyslurm_fits()}")]
    from ti_slurm.backends import get_backend
    from ti_slurm.backends.base import JobInfo

    jobs = [JobInfo(i) for i in ids]
    times, rpcs = {}, {}
    for name in BACKENDS:
        backend = get_backend(name)
        times[name] = median(lambda backend=backend: backend.queue_states(jobs), repeat)
        rpcs[name], _ = controller_queries(lambda backend=backend: backend.queue_states(jobs))
    return [
        Row(f"status of {len(ids)} jobs, in process: pyslurm", times["pyslurm"], times["slurm"],
            "the slurm backend (one scontrol)", "info", True,
            f"controller RPCs: pyslurm {rpcs['pyslurm']}, slurm {rpcs['slurm']}; squeue alone: {squeue:.4f} s"),
    ]  # fmt: skip


SUBMITIT_FOLLOW = """
import sys, time, submitit
ex = submitit.AutoExecutor(folder=sys.argv[1], cluster="slurm")
ex.update_parameters(timeout_min=10, slurm_partition="debug", nodes=1, tasks_per_node=1, cpus_per_task=1)
jobs = [ex.submit(time.sleep, float(sys.argv[3])) for _ in range(int(sys.argv[2]))]
for job in jobs:
    job.result()
"""

TORCHX_FOLLOW = """
import sys
from torchx import specs
from torchx.runner import get_runner
runner = get_runner()
app = specs.AppDef("sleep", roles=[specs.Role("sleep", image=sys.argv[1], entrypoint="sleep", args=[sys.argv[3]])])
handles = [runner.run(app, "slurm", cfg={"partition": "debug"}) for _ in range(int(sys.argv[2]))]
for handle in handles:
    runner.wait(handle, wait_interval=1)
"""


def case_controller_load(tmp: Path, jobs: int, seconds: int) -> list[Row]:
    """Controller RPCs for ``jobs`` one-node jobs of ``seconds`` each, followed to their end by each tool."""
    env = dict(os.environ, XDG_STATE_HOME=str(tmp / "load-state"))
    minutes = jobs * seconds / 60

    spec = held_spec(tmp, f"mode: mpi\nnodes: 1\ncommand: sleep {seconds}")
    submitted: list[str] = []

    def ti_slurm_submit() -> None:
        submitted[:] = [sh([TI, "submit", str(spec)], env=env).stdout.split()[0] for _ in range(jobs)]

    def ti_slurm() -> None:  # what `submit --wait` does after submitting, one follower process per job
        follow = "import sys, ti_slurm; ti_slurm.get_job(sys.argv[1]).wait()"
        procs = [subprocess.Popen([sys.executable, "-c", follow, job], env=env) for job in submitted]
        for proc in procs:
            proc.wait()

    def sbatch_wait() -> None:
        script = tmp / "sleep.sh"
        script.write_text(f"#!/bin/bash\n#SBATCH -o /dev/null\nsleep {seconds}\n")
        procs = [subprocess.Popen(["sbatch", "--wait", str(script)], stdout=subprocess.DEVNULL) for _ in range(jobs)]
        for proc in procs:
            proc.wait()

    def peer(name: str, program: str, folder: str) -> Callable[[], None] | None:
        if not installed(name):
            return None
        return lambda: sh([sys.executable, "-c", program, folder, str(jobs), str(seconds)], cwd=tmp)

    submit_rpcs, _ = controller_queries(ti_slurm_submit)  # the check that the partition can run it
    tools: dict[str, Callable[[], None] | None] = {
        "ti-slurm submit --wait": ti_slurm,
        "submitit (job.result)": peer("submitit", SUBMITIT_FOLLOW, str(tmp / "submitit")),
        "TorchX (runner.wait, slurm)": peer("torchx", TORCHX_FOLLOW, str(tmp)),
        "sbatch --wait": sbatch_wait,
    }
    measured: dict[str, float] = {}
    notes: dict[str, str] = {}
    for name, fn in tools.items():
        if fn is None:
            notes[name] = "not installed"
            continue
        try:
            total, by_type = controller_queries(fn)
        except subprocess.CalledProcessError as exc:
            last = (exc.stderr or "").strip().splitlines()[-1:]
            notes[name] = "cannot follow here: needs sacct (accounting)" if "sacct" in str(last) else f"failed: {last}"
            continue
        measured[name] = total / minutes
        notes[name] = ", ".join(f"{k.removeprefix('REQUEST_')} {v}" for k, v in sorted(by_type.items())) or "none"
        if name.startswith("ti-slurm"):
            notes[name] += f"; before, at submit: {submit_rpcs / jobs:g} per job (the partition check, shared)"
    peers = [v for k, v in measured.items() if k.startswith(("submitit", "TorchX"))]
    best_peer = min(peers) if peers else None
    rows = []
    for name in tools:
        value = measured.get(name)
        is_tool = name.startswith("ti-slurm")
        met = value is not None and value <= 1.0 and (best_peer is None or value <= best_peer) if is_tool else True
        rows.append(
            Row(
                f"controller RPCs per job-minute: {name}",
                -1.0 if value is None else value,
                0.0,
                "-",
                "<= 1, <= best peer" if is_tool else "info",
                met,
                f"{jobs} jobs x {seconds} s: {notes[name]}",
            )
        )
    return rows


def case_ssh_submit(repeat: int, tmp: Path) -> list[Row]:
    from tests.sshd import LOGIN_PATH, start_sshd
    from ti_slurm.transports.ssh import SSHSession, parse_target

    server = start_sshd(tmp / "sshd", LOGIN_PATH)
    try:
        known = tmp / "known_hosts"
        known.write_text(server.known_hosts_line())
        config = tmp / "ssh_config"
        config.write_text(
            f"Host login\n  HostName 127.0.0.1\n  Port {server.port}\n  User root\n"
            f"  IdentityFile {server.user_key}\n  UserKnownHostsFile {known}\n"
            f"  StrictHostKeyChecking yes\n  BatchMode yes\n"
        )
        spec = held_spec(tmp, "mode: mpi\nnodes: 1\ncommand: 'true'\nsbatch: {hold: true}")
        script = sh([TI, "render", str(spec)]).stdout
        env = dict(os.environ, XDG_STATE_HOME=str(tmp / "state"), SSH_AUTH_SOCK="")
        tool = median(
            lambda: sh([TI, "submit", str(spec), "--host", "login", "--ssh-config", str(config)], env=env), repeat
        )
        base = median(lambda: sh(["ssh", "-F", str(config), "login", "sbatch", "--parsable"], input=script), repeat)
        session = SSHSession(parse_target("login", str(config)))
        from ti_slurm.backends.ssh import SSHBackend
        from ti_slurm.submitting.planning import plan_job
        from ti_slurm.submitting.spec import load_spec

        SSHBackend(session).submit(plan_job(load_spec(spec), submission="bench", remote=True), script)
        trips = session.round_trips
        session.close()
    finally:
        server.stop()
        subprocess.run(["scancel", "--state=PENDING", "--user=root"], check=False)
    return [
        Row(
            "ssh submit",
            tool,
            base,
            "ssh host sbatch --parsable < script",
            "<= 1.3x",
            tool <= 1.3 * base,
            f"round trips per remote submit: {trips}",
        )
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the smoke version: fewer repeats")
    parser.add_argument("--no-cluster", action="store_true", help="skip the cases that need the test Slurm cluster")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "latest.json"))
    args = parser.parse_args()
    repeat = 3 if args.quick else 9
    tmp = Path(tempfile.mkdtemp(prefix="ti-slurm-bench-"))
    spec = tmp / "spec.yaml"
    spec.write_text("mode: ddp\nnodes: 2\ngpus_per_node: 8\ncommand: python train.py\n")
    rows: list[Row] = []
    rows += case_in_job_env(repeat, tmp)
    rows += case_hostlist(repeat)
    rows += case_code_snapshot(tmp)
    rows += case_cli_start(repeat, spec)
    rows += case_scale(repeat)
    rows += case_supervisor()
    rows += case_usage_sampling(repeat, tmp)
    rows += case_console(repeat, tmp, 2_000 if args.quick else 10_000)
    rows += case_list_many(repeat, tmp, (10_000,) if args.quick else (10_000, 100_000))
    rows += case_scalars(repeat, tmp)
    if not args.no_cluster:
        rows += case_submit(repeat, tmp)
        rows += case_submit_backends(repeat, tmp)
        rows += case_rest_backend(repeat, tmp)
        rows += case_status(repeat, tmp, 50 if args.quick else 200)
        rows += case_controller_load(tmp, 4 if args.quick else 12, 10)
        if not args.quick:  # long enough for the steady state: a query at most once a minute
            rows += case_controller_load(tmp, 4, 150)
        rows += case_console_queries(tmp, 60 if args.quick else 120)  # a shorter window is mostly the first asks
        if not args.quick:  # 5 minutes each: the steady state of a large sweep's followers
            rows += case_sweep_followers(tmp, 1000, 300)
            rows += case_sweep_followers(tmp, 1000, 300, backend="rest")
        rows += case_ssh_submit(repeat, tmp)
        rows += case_submit_to_running(3 if args.quick else 9, tmp)  # Slurm's scheduling varies: 9 in full runs
        rows += case_job_start(1 if args.quick else 3, tmp)
        rows += case_container_start(1 if args.quick else 3, tmp)
        rows += case_failure(1 if args.quick else 3, tmp)
        rows += case_requeue(1 if args.quick else 3, tmp)
        rows += case_node_fault_requeue(tmp)
        rows += case_in_place_restart(1 if args.quick else 3, tmp)
        rows += case_spare_swap(tmp, baseline=not args.quick)
        rows += case_elastic_shrink(tmp, baseline=not args.quick)
    print(f"{'case':<52} {'ti-slurm':>10} {'baseline':>10} {'ratio':>7}  {'target':<22} {'met':<4} baseline / note")
    for r in rows:
        ratio = f"{r.ratio:.2f}" if r.baseline else "-"
        base = f"{r.baseline:.4f}" if r.baseline else "-"
        tool = f"{r.tool:.4f}" if isinstance(r.tool, float) else str(r.tool)
        note = f"{r.baseline_name}" + (f"; {r.note}" if r.note else "")
        print(f"{r.case:<52} {tool:>10} {base:>10} {ratio:>7}  {r.target:<22} {'yes' if r.met else 'NO':<4} {note}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(
        json.dumps([asdict(r) | {"ratio": r.ratio if r.baseline else None} for r in rows], indent=2)
    )
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
