"""``ti-slurm``: a thin command line over the Python API (:mod:`ti_slurm.client`).

Argument parsing and printing only. Bad input prints one line
(``ti-slurm: error: <field>: <value>: <why>``) and exits 2; a failed job, a
refused submission or an unreachable host exits 1. Heavy modules (pydantic,
jinja2) are imported only by the commands that need them, so ``ti-slurm
exec``/``env`` stay light inside jobs. Each node's step of a ti-slurm job does
not come through here at all: it runs :mod:`ti_slurm.job.main` on the bare
interpreter.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from ti_slurm.core.choices import CONSOLE_PORT, NAMED_BACKENDS
from ti_slurm.core.errors import ConfigError, TiSlurmError
from ti_slurm.job.modes import mode_names
from ti_slurm.job.platforms import get_platform, platform_names
from ti_slurm.version import __version__

if TYPE_CHECKING:
    from ti_slurm.client import Job
    from ti_slurm.core.plan import JobPlan
    from ti_slurm.follow.status import JobStatus


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def bounded(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type: a whole number from ``lo`` to ``hi``."""

    def parse(text: str) -> int:
        if not (text.isascii() and text.lstrip("-").isdigit() and len(text) < 12 and lo <= int(text) <= hi):
            raise argparse.ArgumentTypeError(f"{text[:40]!r}: expected a whole number from {lo} to {hi}")
        return int(text)

    return parse


def _add_machines(sub: Any) -> None:
    """The commands about the machines: this node (doctor), your clusters, the nodes your jobs avoid."""
    sub.add_parser("doctor", help="check this node: Slurm, het jobs, partitions, gres, auth, MPI, RDMA")
    sub.add_parser(
        "clusters",
        help="your clusters (user config, else Slurm's multi-cluster setup): how each is reached, whether it"
        " answers, idle nodes",
    )
    nd = sub.add_parser(
        "nodes", help="the nodes your jobs stay off for a while (a failure blamed them): node, cause, job, until"
    )
    nd.add_argument("--release", metavar="NODE", help="let your jobs use NODE again")
    nd.add_argument("--json", action="store_true", help="the entries as JSON")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="ti-slurm", description="Run TI-platform / ModelArts distributed training jobs on Slurm.")
    p.add_argument("--version", action="version", version=f"ti-slurm {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND", parser_class=_Parser)

    r = sub.add_parser("render", help="print the sbatch script for a spec")
    r.add_argument("spec", help="job spec (YAML or JSON)")
    r.add_argument("--python", help="Python the job runs ti-slurm with (default: this one)")

    remote = _Parser(add_help=False)
    remote.add_argument(
        "--host", help="run on this login node over SSH: host, user@host[:port] or an ~/.ssh/config alias"
    )
    remote.add_argument("--accept-new-host-key", action="store_true", help="record the key of a host never seen before")
    remote.add_argument("--ssh-config", help="SSH config file (default ~/.ssh/config)")
    sm = sub.add_parser("submit", help="submit a job (prints its id)", parents=[remote])
    _add_submit(sm)
    sw = sub.add_parser(
        "sweep", help="one job per point of a grid of parameters (prints the sweep's id)", parents=[remote]
    )
    _add_submit(sw)
    sw.add_argument(
        "--param",
        metavar="NAME=V1,V2",
        action="append",
        default=[],
        help="a parameter and its values (repeat: every combination); the command's {NAME} and TI_SLURM_PARAM_NAME",
    )
    sw.add_argument("--points", metavar="FILE", help="the points as a YAML or JSON list: - {lr: 0.1, batch: 32}")
    sw.add_argument("--max-parallel", type=bounded(0, 100000), default=0, help="points running at once (0: no limit)")

    _add_watching(sub, remote)
    _add_machines(sub)
    it = sub.add_parser("init", help="print a commented starter spec that submits as written (> job.yaml)")
    it.add_argument("--mode", default="ddp", choices=mode_names(), help="the training mode (ddp)")
    it.add_argument("--platform", default="ti", choices=platform_names(), help="whose variables the nodes get (ti)")
    sub.add_parser("schema", help="print the spec's JSON Schema, for editors (> ti-slurm.schema.json)")
    ui = sub.add_parser("ui", help="serve a web console for your jobs (prints its URL with a token)", parents=[remote])
    ui.add_argument(
        "--port", type=bounded(1024, 65535), default=None,
        help=f"the console's port (default: the first free one from {CONSOLE_PORT})",
    )  # fmt: skip
    ui.add_argument(
        "--bind", default="127.0.0.1", help="the address it listens on (127.0.0.1: reach it with ssh -L from elsewhere)"
    )

    _add_in_job(sub.add_parser("env", help="print this node's contract variables (inside a job)"), runs=False)
    sub_exec = sub.add_parser(
        "exec", help="run a command with this node's contract (srun ti-slurm exec --mode M -- CMD)"
    )
    _add_in_job(sub_exec, runs=True)
    return p


def _add_watching(sub: Any, remote: argparse.ArgumentParser) -> None:
    """The commands that follow a job (or a sweep) already submitted: status, top, logs, cancel, wait, list."""
    st = sub.add_parser("status", help="state of a job, its components and steps", parents=[remote])
    st.add_argument("job")
    st.add_argument("--json", action="store_true", help="machine-readable output")

    tp = sub.add_parser("top", help="what each node of a running job uses: CPU, memory, GPUs", parents=[remote])
    tp.add_argument("job")
    tp.add_argument("--once", action="store_true", help="print the table once (default: refresh until it ends)")
    tp.add_argument("--interval", type=bounded(1, 3600), default=5, help="seconds between refreshes (5)")

    lg = sub.add_parser("logs", help="print a job's logs", parents=[remote])
    lg.add_argument("job")
    lg.add_argument("--node", help="one node: its INDEX, its name, or <component>-<n>")
    lg.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    lg.add_argument("--attempt", type=int, help="an earlier attempt's logs (a requeued job keeps them)")

    c = sub.add_parser("cancel", help="cancel a job", parents=[remote])
    c.add_argument("job")

    r = sub.add_parser(
        "resubmit",
        help="submit a job again as it was planned (its code snapshot too), as a new job; prints its id",
        parents=[remote],
    )
    r.add_argument("job")
    r.add_argument("--wait", action="store_true", help="follow the new job until it ends (as submit --wait)")

    w = sub.add_parser(
        "wait", help="follow a job or sweep until it ends; exit 0 only if it succeeded", parents=[remote]
    )
    w.add_argument("job")
    w.add_argument("--timeout", type=bounded(1, 10**8), help="give up after this many seconds (exit 124)")

    ls = sub.add_parser("list", help="your jobs and their states (a sweep as one line)", parents=[remote])
    ls.add_argument("--points", action="store_true", help="each sweep's points too, under it")
    ls.add_argument("--limit", type=bounded(0, 10**6), default=20, help="the newest N jobs (20; 0: all)")
    ls.add_argument("--state", help="only jobs in this state (a sweep: with a point in it), e.g. FAILED")
    ls.add_argument("--name", help="only jobs whose name holds this text")
    ls.add_argument(
        "--goodput", action="store_true", help="where the shown jobs' time went, summed (a sweep's: --name or its id)"
    )


def _add_submit(s: argparse.ArgumentParser) -> None:
    s.add_argument("spec", help="job spec (YAML or JSON)")
    s.add_argument("--local", action="store_true", help="run every node as a process on this machine (no Slurm)")
    s.add_argument(
        "--backend",
        choices=NAMED_BACKENDS,
        help="how to reach Slurm: its commands (slurm, the default unless the site config says otherwise), "
        "pyslurm (in process), or local (= --local)",
    )
    s.add_argument("--wait", action="store_true", help="show progress; exit 0 only if the job succeeds")
    s.add_argument("--sync", metavar="DIR", help="with --host: first upload DIR's changed files to the remote workdir")
    s.add_argument(
        "--after",
        metavar="JOB",
        action="append",
        default=[],
        help="start once JOB ended (repeat, or JOB,JOB): a pipeline's next step; in place of the spec's after:",
    )
    s.add_argument("--when", choices=("ok", "failed", "any"), help="with --after: how those jobs must end (ok)")
    s.add_argument(
        "--queue-anyway",
        action="store_true",
        help="submit a job its partition cannot run as it stands (say, for nodes about to be added)",
    )
    s.add_argument(
        "--cluster",
        metavar="NAME",
        help="one of your user config's clusters (or of Slurm's multi-cluster setup, as sbatch -M names them), or"
        " auto: the one that would start the job (a sweep: each point) first (docs/clusters.md)",
    )


def _add_in_job(e: argparse.ArgumentParser, runs: bool) -> None:
    """``env`` and ``exec`` (``runs``: a command): this node's contract, inside a hand-written job."""
    e.add_argument("--mode", required=True, choices=mode_names())
    e.add_argument(
        "--platform", choices=platform_names(), default="ti", help="whose variables the node sees (default: ti)"
    )
    e.add_argument(
        "--gpus-per-node", type=bounded(0, 64), default=None, help="default: Slurm's SLURM_GPUS_ON_NODE, else 0"
    )
    e.add_argument("--npus-per-node", type=bounded(0, 64), default=0, help="Ascend NPUs per node (a rank table)")
    e.add_argument("--master-port", type=bounded(1024, 65535), default=None)
    e.add_argument("--rdma", choices=("auto", "on", "off"), default="auto")
    e.add_argument(
        "--group",
        "--component",
        dest="component",
        type=int,
        default=None,
        help="the component's index in a heterogeneous job",
    )
    e.add_argument("--rendezvous-timeout", type=bounded(1, 86400), default=300)
    if runs:
        e.add_argument("--per-npu", action="store_true", help="run the command once per NPU (with --npus-per-node)")
        e.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    else:
        e.add_argument("--format", choices=("shell", "json"), default="shell")


# -- submitting -------------------------------------------------------------------
def ssh_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "accept_new_host_key": getattr(args, "accept_new_host_key", False),
        "ssh_config": getattr(args, "ssh_config", None),
    }


def cmd_render(args: argparse.Namespace) -> int:
    from ti_slurm.submitting.plancache import kept_script

    key, script = kept_script(args.spec, args.python)  # a spec seen before: no planning, not even the API's imports
    if script is None:
        from ti_slurm.client import render_and_keep

        script = render_and_keep(args.spec, args.python, key)
    sys.stdout.write(script)
    return 0


def submit_options(args: argparse.Namespace) -> dict[str, Any]:
    """What ``submit`` and ``sweep`` pass on alike: where the job goes, and what it waits for."""
    if args.when and not args.after:
        raise ConfigError("--when", args.when, "says how the --after jobs must end; name them with --after JOB")
    return {
        "backend": "local" if args.local else args.backend,
        "host": None if args.local or args.backend == "local" else args.host,
        "queue_anyway": args.queue_anyway,
        "after": [job for given in args.after for job in given.split(",")],
        "when": args.when or "ok",
        "cluster": args.cluster,
        **ssh_options(args),
    }


def cmd_submit(args: argparse.Namespace) -> int:
    from ti_slurm.client import submit

    job = submit(args.spec, sync=args.sync, reuse_plan=True, **submit_options(args))
    if job.placement:
        print(f"ti-slurm: {job.placement}", file=sys.stderr)
    if job.synced_files is not None:
        print(f"ti-slurm: synced {job.synced_files} changed file(s) to {job.info.host}", file=sys.stderr)
    for line in job.avoided:
        print(f"ti-slurm: {line} (ti-slurm nodes --release to use it)", file=sys.stderr)
    print(job.id, flush=True)
    return follow(job) if args.wait else 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from ti_slurm.sweeps import grid_points, parse_param, read_points
    from ti_slurm.sweeps import sweep as submit_sweep

    if args.sync:
        raise ConfigError("--sync", args.sync, "is submit's: sync once with submit, or with rsync, then sweep")
    if bool(args.param) == bool(args.points):
        raise ConfigError(
            "--param", " ".join(args.param), "give the grid as --param NAME=V1,V2 ... or as --points FILE"
        )
    if args.points:
        points: Any = read_points(args.points)
    else:
        grid = dict(parse_param(text) for text in args.param)
        if len(grid) != len(args.param):
            raise ConfigError("--param", " ".join(args.param), "a parameter is given twice: list its values once")
        points = grid_points(grid, "--param")
    sweep = submit_sweep(args.spec, points, max_parallel=args.max_parallel, **submit_options(args))
    if sweep.record.get("placement"):
        print(f"ti-slurm: {sweep.record['placement']}", file=sys.stderr)
    print(sweep.id, flush=True)
    kind = "one job array" if sweep.array else "a job per point"
    print(f"ti-slurm: sweep {sweep.id}: {len(sweep.infos)} points as {kind}", file=sys.stderr)
    return follow_sweep(sweep) if args.wait else 0


def follow(job: Job, timeout: float | None = None) -> int:
    """``submit --wait``, ``wait JOB``: print each change of the job's progress on stderr until it ends.

    The exit code: 0 if it COMPLETED, 1 if it ended otherwise, 124 past ``timeout``, 130 on Ctrl-C
    (the job keeps running in both).
    """
    from ti_slurm.follow.status import progress_line

    def show(status: JobStatus) -> None:
        print(f"ti-slurm: job {job.id}: {progress_line(status)}", file=sys.stderr, flush=True)

    with stopped_following(f"job {job.id}", f"it keeps running (ti-slurm status {job.id}, ti-slurm cancel {job.id})"):
        status = job.wait(timeout=timeout, on_change=show)
    if status.state == "COMPLETED":
        print(f"ti-slurm: job {job.id} COMPLETED", file=sys.stderr)
        if job.job_dir:
            where = f" on {job.info.host}" if job.info.host else ""
            print(f"ti-slurm: its logs: {job.job_dir}/logs/{where} (ti-slurm logs {job.id}; ti-slurm status {job.id})",
                  file=sys.stderr)  # fmt: skip
        return 0
    print(f"ti-slurm: job {job.id} {status.state}: {status.reason}", file=sys.stderr)
    print(job.failure_tail(status), end="", file=sys.stderr)
    return 1


def follow_sweep(sweep: Any, timeout: float | None = None) -> int:
    """``sweep --wait``, ``wait SWEEP``: its progress on stderr, then its table; exit codes as :func:`follow`'s."""
    from ti_slurm.sweeps import format_sweep, summary_line

    def show(status: Any) -> None:
        print(f"ti-slurm: sweep {sweep.id}: {summary_line(status)}", file=sys.stderr, flush=True)

    with stopped_following(f"sweep {sweep.id}", "its points keep running"):
        status = sweep.wait(timeout=timeout, on_change=show)
    print(format_sweep(status), file=sys.stderr)
    return 0 if all(p.status.state == "COMPLETED" for p in status.points) else 1


class StopFollowing(Exception):
    """Following ended early (Ctrl-C, or past ``--timeout``); ``code`` is the exit code to end with."""

    def __init__(self, code: int) -> None:
        self.code = code


@contextlib.contextmanager
def stopped_following(what: str, still: str) -> Iterator[None]:
    """Ctrl-C or a timeout while following ``what``: one line saying it goes on (``still``), then exit 130 or 124."""
    try:
        yield
    except KeyboardInterrupt:
        print(f"\nti-slurm: stopped following {what}; {still}", file=sys.stderr)
        raise StopFollowing(130) from None
    except TimeoutError as err:
        print(f"ti-slurm: {err}; stopped following {what}: {still}", file=sys.stderr)
        raise StopFollowing(124) from None


# -- watching jobs ---------------------------------------------------------------
def find_job(args: argparse.Namespace) -> Job:
    from ti_slurm.client import get_job

    return get_job(args.job, host=args.host, **ssh_options(args))


def find_sweep(args: argparse.Namespace) -> Any:
    """The sweep ``args.job`` names, when it is one of this account's (else ``None``: a job)."""
    from ti_slurm.follow.registry import recall_sweep
    from ti_slurm.routing import check_job_id

    check_job_id(args.job)  # before it names a registry path
    if not str(args.job).startswith("sweep-") and recall_sweep(args.job) is None:
        return None  # a job: the sweeps' module (clusters, the user config's models) is not imported for it
    from ti_slurm.sweeps import get_sweep

    return get_sweep(args.job, host=args.host, **ssh_options(args))


def cmd_status(args: argparse.Namespace) -> int:
    from ti_slurm.follow.status import format_status

    sweep = find_sweep(args)
    if sweep is not None:
        from ti_slurm.sweeps import format_sweep

        found = sweep.status()
        print(found.to_json() if args.json else format_sweep(found))
        return 0
    job = find_job(args)
    status = job.status()
    if args.json:  # the data of Job.status(), as it is (what each node used: job.usage())
        print(status.to_json())
        return 0
    from ti_slurm.follow.usage import summary_lines

    usage = job.usage(status) if status.components and status.state.is_terminal else []
    print("\n".join([format_status(status), *summary_lines(usage)]))
    return 0


def cmd_top(args: argparse.Namespace) -> int:
    from ti_slurm.follow.status import progress_line
    from ti_slurm.follow.usage import top_table

    job = find_job(args)
    while True:
        status = job.status()
        usage = job.usage(status) if status.components else []
        table = top_table(usage) if usage else "  (no node has sampled its use yet)"
        screen = f"job {job.id}  {status.name}  {progress_line(status)}\n{table}"
        if args.once or status.state.is_terminal:
            print(screen)
            return 0
        if sys.stdout.isatty():
            from ti_slurm.terminal import raw

            raw(sys.stdout).write("\x1b[H\x1b[J")  # top's own: the screen cleared for the next table
            print(screen, flush=True)
        else:
            print(screen + "\n", flush=True)
        try:
            import time

            time.sleep(args.interval)
        except KeyboardInterrupt:
            return 0


def cmd_logs(args: argparse.Namespace) -> int:
    sweep = find_sweep(args)
    if sweep is not None:
        first = sweep.jobs()[0].id
        raise ConfigError("job", args.job, f"is a sweep: name one of its points, e.g. ti-slurm logs {first}")
    for line in find_job(args).logs(node=args.node, follow=args.follow, attempt=args.attempt):
        print(line, flush=args.follow)
    return 0


def cmd_wait(args: argparse.Namespace) -> int:
    sweep = find_sweep(args)
    if sweep is not None:
        return follow_sweep(sweep, args.timeout)
    return follow(find_job(args), args.timeout)


def cmd_cancel(args: argparse.Namespace) -> int:
    sweep = find_sweep(args)
    if sweep is not None:
        sweep.cancel()
        print(f"ti-slurm: cancel requested for every point of sweep {sweep.id}", file=sys.stderr)
        return 0
    job = find_job(args)
    status = job.status()
    if status.state.is_terminal:
        print(f"ti-slurm: job {job.id} had already ended: {status.state}", file=sys.stderr)
        return 0
    job.cancel()
    print(f"ti-slurm: cancel requested for job {job.id}", file=sys.stderr)
    return 0


def cmd_resubmit(args: argparse.Namespace) -> int:
    from ti_slurm.client import resubmit

    if find_sweep(args) is not None:
        raise ConfigError("job", args.job, "is a sweep: resubmit one of its points, or run the sweep again")
    job = resubmit(find_job(args))
    print(job.id, flush=True)
    return follow(job) if args.wait else 0


def cmd_list(args: argparse.Namespace) -> int:
    from ti_slurm.client import jobs
    from ti_slurm.core.states import tally_line
    from ti_slurm.follow.status import in_state, job_groups

    every = not args.limit or args.name or args.state or args.host  # a filter looks at every job
    newest, older = (None if every else args.limit), 0
    while True:  # the newest jobs until the newest --limit rows are whole (a sweep's points are one row)
        statuses = jobs(host=args.host, newest=newest, **ssh_options(args))
        groups = [
            group
            for group in job_groups(statuses)
            if (not args.name or args.name in group[0].name) and (not args.state or in_state(group, args.state))
        ]
        if newest is None or len(groups) > args.limit or len(statuses) < newest:
            break
        newest *= 4
    if newest is not None:  # the older jobs not read, counted from the registry's index (a sweep: its points)
        from ti_slurm.follow.registry import recorded_count

        older = max(0, recorded_count() - len(statuses)) if not args.host else 0
    rows: list[list[str]] = []  # newest first; a sweep is one row, its points under it with --points
    for group in groups[: args.limit or None]:
        head = group[0]
        if head.sweep:
            rows.append([head.sweep, head.name, "SWEEP", f"{len(group)} points: {tally_line(p.state for p in group)}"])
            rows += [[f"  {p.job_id}", p.name, str(p.state), p.reason] for p in group if args.points]
        else:
            rows.append([head.job_id, head.name, str(head.state), head.reason])
    print_table(["JOB", "NAME", "STATE", "REASON"], rows)
    if args.limit and len(groups) > args.limit:
        hidden = len(groups) - args.limit + older
        print(f"({hidden} older not shown: --limit 0 shows all)")
    if args.goodput:
        print(goodput_line([s for group in groups[: args.limit or None] for s in group]))
    return 0


def goodput_line(statuses: list[JobStatus]) -> str:
    """``list --goodput``: where the time of ``statuses`` went, summed."""
    from ti_slurm.core.goodput import Goodput

    total = Goodput()
    for status in statuses:
        if status.goodput:
            total = total.add(Goodput(**status.goodput))
    return f"{len(statuses)} job(s): {total.line()}"


def print_table(header: list[str], rows: list[list[str]]) -> None:
    """Columns as wide as their widest cell (the last one as it comes)."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    for row in [header, *rows]:
        print(" ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + " " + row[-1])


def cmd_init(args: argparse.Namespace) -> int:
    from ti_slurm.help.starter import starter

    print(starter(args.mode, args.platform), end="")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from ti_slurm.help.schema import schema_text

    sys.stdout.write(schema_text())
    return 0


def cmd_ui(args: argparse.Namespace) -> int:
    try:
        from ti_slurm.ui.app import console_port, serve
    except ImportError as exc:
        raise ConfigError("ui", exc.name, "the console needs its extra: pip install 'ti-slurm[ui]'") from None
    port = console_port(args.bind, args.port)  # a port in use is one line, before anything is printed
    serve(port, args.host, ssh_options(args) if args.host else None, args.bind)
    return 0


def cmd_clusters(args: argparse.Namespace) -> int:
    from ti_slurm.clusters import free_nodes_of, known_clusters

    clusters = known_clusters()
    if not clusters:
        print("ti-slurm: no clusters: add [[cluster]] tables to your user config (docs/clusters.md)", file=sys.stderr)
        return 0
    rows = []
    for cluster, answer in zip(clusters, free_nodes_of(clusters), strict=True):
        if isinstance(answer, dict):
            said, idle = "yes", " ".join(f"{p}:{n}" for p, n in sorted(answer.items()))
        else:
            said, idle = "no", answer
        rows.append([cluster.name, cluster.reached, said, idle])
    print_table(["CLUSTER", "REACHED BY", "ANSWERS", "IDLE NODES PER PARTITION"], rows)
    return 0


def cmd_nodes(args: argparse.Namespace) -> int:
    import json
    import time

    from ti_slurm.submitting.avoided import read_avoided, release

    if args.release:
        if not release(args.release):
            raise ConfigError("--release", args.release, "your jobs do not avoid this node (see ti-slurm nodes)")
        print(f"ti-slurm: your jobs may use {args.release} again", file=sys.stderr)
        return 0
    entries = read_avoided()
    if args.json:
        print(json.dumps(entries, indent=2))
        return 0
    if not entries:
        print("ti-slurm: your jobs avoid no node", file=sys.stderr)
        return 0
    rows = [[e["node"], e.get("cluster") or "-", str(e.get("cause")), str(e.get("job")),
             time.strftime("%Y-%m-%d %H:%M", time.localtime(e["until"]))] for e in entries]  # fmt: skip
    print_table(["NODE", "CLUSTER", "CAUSE", "JOB", "AVOIDED UNTIL"], rows)
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from ti_slurm.admin.doctor import doctor

    return doctor()


# -- inside jobs ---------------------------------------------------------------
def _adhoc(args: argparse.Namespace) -> tuple[JobPlan, dict[str, str], int, str]:
    from ti_slurm.job.adhoc import adhoc_job_dir, adhoc_plan

    env = dict(os.environ)
    plan, component = adhoc_plan(
        args.mode, env, args.gpus_per_node, args.master_port, args.rdma, args.component, args.rendezvous_timeout
    )
    components = tuple(c.replace(npus_per_node=args.npus_per_node) for c in plan.components)
    plan = plan.replace(platform=args.platform, components=components)
    return plan, env, component, adhoc_job_dir(env)


def cmd_env(args: argparse.Namespace) -> int:
    import json

    from ti_slurm.job.main import env_changes, print_env
    from ti_slurm.job.node import prepare_node

    plan, env, component, job_dir = _adhoc(args)
    full = prepare_node(plan, component, job_dir, env).env
    if args.format == "json":
        print(json.dumps(env_changes(full, env), indent=2, sort_keys=True))
    else:
        print_env(full, env)
    return 0


def cmd_exec(args: argparse.Namespace) -> int:
    import shlex

    from ti_slurm.job.node import run_node

    words = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not words:
        raise TiSlurmError("exec: no command given (ti-slurm exec --mode M -- CMD ...)")
    if args.per_npu and not args.npus_per_node:
        raise TiSlurmError("exec: --per-npu runs the command once per NPU: give --npus-per-node N")
    plan, env, component, job_dir = _adhoc(args)
    plan = plan.replace(
        command=" ".join(shlex.quote(w) for w in words),
        workdir=os.getcwd(),
        processes="per-npu" if args.per_npu else "one",
    )
    own = plan.components[component]
    if command := get_platform(plan.platform).component_command(plan.mode, own.name, plan.command):
        changed = own.replace(command=command)  # ModelArts' --task_name, as a submitted job's command gets it
        plan = plan.replace(components=tuple(changed if c is own else c for c in plan.components))
    return run_node(plan, component, job_dir, env)


COMMANDS = {
    "render": cmd_render,
    "submit": cmd_submit,
    "top": cmd_top,
    "sweep": cmd_sweep,
    "status": cmd_status,
    "logs": cmd_logs,
    "cancel": cmd_cancel,
    "resubmit": cmd_resubmit,
    "wait": cmd_wait,
    "list": cmd_list,
    "doctor": cmd_doctor,
    "clusters": cmd_clusters,
    "nodes": cmd_nodes,
    "init": cmd_init,
    "schema": cmd_schema,
    "ui": cmd_ui,
    "env": cmd_env,
    "exec": cmd_exec,
}


# their standard output is data (a script, a log, a spec, a schema), not a display
RAW_OUTPUT = ("render", "logs", "env", "exec", "init", "schema")


def show_warning(message: Warning | str, *args: object, **kwargs: object) -> None:
    """Warnings from the library, as one line each."""
    print(f"ti-slurm: warning: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    import warnings

    from ti_slurm.terminal import install

    warnings.showwarning = show_warning
    args = build_parser().parse_args(argv)
    install(stdout_too=args.cmd not in RAW_OUTPUT)
    try:
        return COMMANDS[args.cmd](args)
    except TiSlurmError as exc:
        print(f"ti-slurm: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except StopFollowing as stop:
        return stop.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


def entry() -> NoReturn:
    """The ``ti-slurm`` command: :func:`main`, then exit without tearing the interpreter down.

    Finalizing an interpreter that has pydantic, jinja2 or paramiko loaded takes
    60-90 ms (module teardown, garbage collection) and does nothing a finished
    command needs: its files are closed by then. So flush the standard streams
    and leave.
    """
    from contextlib import suppress

    code = main()
    for stream in (sys.stdout, sys.stderr):
        with suppress(BrokenPipeError, ValueError):  # a reader that went away (| head), a closed stream
            stream.flush()
    transports = sys.modules.get("ti_slurm.transports")
    if transports is not None:  # a Slurm command still under way (a cluster left behind) ends with this one
        transports.end_running()
    os._exit(code)
