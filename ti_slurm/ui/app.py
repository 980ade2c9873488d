"""The console's web application: pages (jinja2, escaped), their JSON, a node's log, cancel and resubmit.

Each request is one or two calls of the Python API, run in Starlette's thread pool; every user-given id
goes through :func:`ti_slurm.client.get_job`'s check before anything runs. Pages carry no user text in
scripts: the scripts (``static/console.js``) fetch JSON and set text, never HTML.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ti_slurm.core.errors import BackendError, TiSlurmError, UnknownJobError
from ti_slurm.core.tfevents import best_values, last_values
from ti_slurm.follow.progress import PaceSeen
from ti_slurm.follow.queue import FOLLOW_MAX
from ti_slurm.follow.scalars import job_scalars
from ti_slurm.ui import pages
from ti_slurm.ui.guard import Doorman, Guard

HERE = Path(__file__).parent
FOLLOWED_AT_MOST = 256  # jobs the console follows at once (a sweep's points among them)
ENDED_AT_MOST = 4096  # sweep points whose end the console remembers
LOG_OFFSET_MOST = 1 << 62  # a log offset beyond any file (a larger one from a request is this)
TEMPLATES = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(default=True))


class ConsoleJSON(JSONResponse):
    """The console's JSON: non-finite numbers (a training's NaN or Inf loss) as the strings "NaN", "Infinity"
    and "-Infinity" (JSON has no such numbers, and a page must show them, not fail), and text that is not
    UTF-8 (a sweep value, a name, from bytes) escaped rather than refused."""

    def render(self, content: Any) -> bytes:
        import json

        return json.dumps(finite(content), ensure_ascii=True, separators=(",", ":")).encode()


def finite(value: Any) -> Any:
    import math

    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def kept(held: dict[str, Any], key: str, make: Callable[[], Any], most: int) -> Any:
    """``held[key]`` (made by ``make`` the first time), now the most recently used; the least recently used go
    beyond ``most``."""
    value = held.pop(key, None) or make()
    held[key] = value
    while len(held) > most:
        del held[next(iter(held))]
    return value


class JobView:
    """One job as the console follows it: its handle, its follower (its status, for every view of the job: the
    page, the log, the charts) and its scalars' reader, behind one lock. Two tabs, or a refresh that overlaps
    the last, ask at once: each reads on from where the other's look ended, never the same points twice."""

    def __init__(self, job: Any) -> None:
        self.job, self.lock = job, threading.Lock()
        # a page refreshed every 2 s asks the controller as `submit --wait` does (its record first; the queue on
        # a backoff, an answer up to a minute old shared by every page and the list), not at every refresh
        self.follower = job.follower(FOLLOW_MAX)
        self.reader: Any = None  # its ScalarReader, made at the first look (it reads the job's plan)
        self._plan: Any = False  # its plan, read once (None: none to read, or another user's)
        self.pace = PaceSeen()  # the training's steps as this console saw them advance

    def status(self) -> Any:
        with self.lock:
            return self.follower.status()

    def scalars(self) -> dict[str, list[tuple[int, float]]]:
        """The job's training scalars so far (tag -> [(step, value)]), read on from where the last look ended."""
        with self.lock:
            if self.reader is None:
                self.reader = job_scalars(self.job.backend, self.job.job_dir)
            return {tag: list(points) for tag, points in self.reader.look().items()}

    def plan(self) -> Any:
        """The job's plan as it ran (its settings for the page), read at the first ask."""
        from ti_slurm.follow.status import ran_plan

        with self.lock:
            if self._plan is False:
                try:
                    self._plan = ran_plan(self.job.backend, self.job.job_dir) if self.job.job_dir else None
                except (ValueError, PermissionError, TiSlurmError):  # none yet (pending): asked again next time
                    return None
            return self._plan

    def progress(self, status: Any, scalars: dict[str, list[tuple[int, float]]]) -> dict[str, Any] | None:
        """A running training's step, total, pace and estimated finish (:mod:`ti_slurm.follow.progress`): rank 0's
        progress file (one read), else its TensorBoard steps; None when it reports neither."""
        import time

        from ti_slurm.core.paths import JobPaths
        from ti_slurm.core.states import JobState
        from ti_slurm.follow import progress as training

        if status.state is not JobState.RUNNING or not status.components or not self.job.job_dir:
            return None
        data = self.job.backend.read_bytes(JobPaths(self.job.job_dir).progress(status.components[0].name, 0), 0, 128)
        step, total = training.reported(data.decode(errors="replace")) if data else (None, None)
        board_step, board_total = training.tensorboard_progress(scalars)
        step, total = (step, total or board_total) if step is not None else (board_step, board_total)
        if step is None:
            return None
        now = time.time()
        with self.lock:
            self.pace.note(step, now)
            rate = self.pace.rate()
        plan = self.plan()
        requeues = sum(1 for a in status.attempts[:-1] if a.requeued and not a.in_place)
        deadline = training.time_limit_at(status, plan)
        return training.estimate(step, total, rate, now, deadline, training.at_the_limit(plan, requeues)).as_dict()

    def asked_anew(self) -> None:
        """The next status asks the controller at once (after a cancel from the page)."""
        with self.lock:
            self.follower = self.job.follower(FOLLOW_MAX)


COMPARED_AT_MOST = 20  # runs one comparison overlays


def compared_ids(text: str) -> list[str]:
    """The job ids a comparison names (``a,b,c``): 2 to :data:`COMPARED_AT_MOST`, each once, in order."""
    from ti_slurm.core.errors import ConfigError

    ids = list(dict.fromkeys(i.strip() for i in text.split(",") if i.strip()))
    if not 2 <= len(ids) <= COMPARED_AT_MOST:
        raise ConfigError("jobs", text[:200], f"compare 2 to {COMPARED_AT_MOST} jobs: pick them in the list")
    return ids


class Console:
    """The views of one console: the login it reads through (``host``: over SSH), its guard, and the jobs it
    follows (:class:`JobView`, the newest FOLLOWED_AT_MOST). Its backends are opened once for its life
    (:func:`~ti_slurm.backends.kept.keep_backends`, entered by :func:`serve`)."""

    def __init__(self, guard: Guard, host: str | None = None, ssh: dict[str, Any] | None = None) -> None:
        self.guard, self.host, self.ssh = guard, host, ssh or {}
        self.lock = threading.Lock()  # over the dicts below (each view has its own lock for its job)
        self.views: dict[str, JobView] = {}
        # a sweep point that ended: its final status and its scalars' last values (it changes no more: its
        # page reads its record and files no more, which over SSH is a round trip each per refresh)
        self.ended: dict[str, tuple[Any, dict[str, dict[str, float]]]] = {}

    def view(self, job_id: str, handle: Any = None) -> JobView:
        """The view of job ``job_id`` (``handle``: its Job, when the caller has it), made at its first request:
        an id that is no id, or no job of this user's, raises here (the error page, nothing else)."""
        with self.lock:
            found = self.views.get(job_id)
        if found is None:  # made outside the lock: reaching the job may take a round trip to a login node
            from ti_slurm.client import get_job

            found = JobView(handle or get_job(job_id, host=self.host, **self.ssh))
        with self.lock:  # another thread's view, made meanwhile, is kept; either is now the most recently used
            view: JobView = kept(self.views, job_id, lambda: found, FOLLOWED_AT_MOST)
        return view

    def job(self, job_id: str) -> Any:
        return self.view(job_id).job

    def page(self, template: str, **values: Any) -> HTMLResponse:
        html = TEMPLATES.get_template(template).render(csrf=self.guard.csrf, host=self.host or "", **values)
        return HTMLResponse(html)

    # -- pages -----------------------------------------------------------------------------------------
    def list_page(self, request: Request) -> Response:
        from ti_slurm.submitting.userconfig import read_user_config

        return self.page("list.html.j2", clusters=[c.name for c in read_user_config().cluster])

    def compare_page(self, request: Request) -> Response:
        ids = compared_ids(request.query_params.get("jobs", ""))
        for job_id in ids:
            self.view(job_id)  # an id that is no id, or no job of this user's: the error page
        return self.page("compare.html.j2", jobs=",".join(ids))

    def compare_json(self, request: Request) -> Response:
        """The jobs compared: each one's state, settings and one scalar's points (``tag``; the first tag they
        share when none is asked), and every tag any of them wrote."""
        views = [self.view(job_id) for job_id in compared_ids(request.query_params.get("jobs", ""))]
        runs = [(view, view.status(), view.scalars()) for view in views]
        tags = sorted({tag for _, _, scalars in runs for tag in scalars})
        tag = request.query_params.get("tag") or next(
            (t for t in tags if all(t in scalars for _, _, scalars in runs)), tags[0] if tags else ""
        )
        shown = [
            {"id": view.job.id, "name": status.name, "state": str(status.state),
             "settings": dict(pages.compared_settings(view.plan())), "points": scalars.get(tag, [])}
            for view, status, scalars in runs
        ]  # fmt: skip
        return ConsoleJSON({"tag": tag, "tags": tags, "runs": shown})

    def nodes_page(self, request: Request) -> Response:
        return self.page("nodes.html.j2")

    def nodes_json(self, request: Request) -> Response:
        from ti_slurm.submitting.avoided import read_avoided

        return ConsoleJSON(pages.avoided_rows(read_avoided()))

    def release_node(self, request: Request) -> Response:
        from ti_slurm.core.errors import ConfigError
        from ti_slurm.submitting.avoided import release

        node = request.path_params["node"]
        if not release(node):
            raise ConfigError("node", node, "your jobs do not avoid this node")
        return JSONResponse({"released": node})

    def job_page(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]
        self.job(job_id)  # an id that is no id, or no job of this user's: the error page, nothing else
        return self.page("job.html.j2", job_id=job_id)

    def sweep_page(self, request: Request) -> Response:
        sweep_id = request.path_params["sweep_id"]
        self.sweep(sweep_id)
        return self.page("sweep.html.j2", sweep_id=sweep_id)

    def sweep(self, sweep_id: str) -> Any:
        from ti_slurm.sweeps import get_sweep

        found = get_sweep(sweep_id, host=self.host, **self.ssh)
        if found is None:
            raise UnknownJobError(f"sweep {sweep_id}: no such sweep was submitted from this account")
        return found

    # -- their data --------------------------------------------------------------------------------------
    def sweep_json(self, request: Request) -> Response:
        sweep = self.sweep(request.path_params["sweep_id"])
        with self.lock:
            ended = {ref: final for ref, (final, _) in self.ended.items()}
        status = sweep.status(max_age=FOLLOW_MAX, ended=ended)  # the points' records first, as the list
        last: dict[int, dict[str, dict[str, float]]] = {}
        for k, (p, job) in enumerate(zip(status.points, sweep.jobs(), strict=True)):
            if job.id in ended:  # shown again: now the most recently used
                with self.lock:
                    last[p.index] = kept(self.ended, job.id, lambda: ended[job.id], ENDED_AT_MOST)[1]  # noqa: B023
                continue
            # the first points' scalars: read after a point's end, they are all it wrote
            series = self.view(job.id, job).scalars() if k < pages.SCALAR_POINTS else {}
            values = {"last": last_values(series), "best": best_values(series)}
            last[p.index] = values
            if p.status.state.is_terminal:
                final = (p.status, values)
                with self.lock:
                    kept(self.ended, job.id, lambda: final, ENDED_AT_MOST)  # noqa: B023 (called at once)
        return ConsoleJSON(pages.sweep_rows(status, last))

    def jobs_json(self, request: Request) -> Response:
        from ti_slurm.client import jobs

        q = request.query_params
        cluster = q.get("cluster")  # "-": the default cluster's jobs ("" or none: every cluster's)
        newest = None if q.get("state") or q.get("name") or cluster else pages.LIST_LIMIT  # a filter: every job
        # the list refreshes each second: a job's own record says when it runs and ends, a job submitted since
        # the last answer is asked about anew, and the rest of the queue (a pending job's reason) once a minute
        statuses = jobs(host=self.host, newest=newest, max_age=FOLLOW_MAX, **self.ssh)
        wanted = None if not cluster else "" if cluster == "-" else cluster
        return ConsoleJSON(pages.job_rows(statuses, q.get("state", ""), q.get("name", ""), wanted))

    def job_json(self, request: Request) -> Response:
        view = self.view(request.path_params["job_id"])
        job, status = view.job, view.status()
        data = pages.job_page(job, status, job.usage(status), view.plan())
        data["events"] = pages.events(job)
        scalars = view.scalars()
        data["scalars"] = {tag: scalars[tag] for tag in sorted(scalars)[: pages.SCALAR_CHARTS]}  # what is drawn
        data["scalar_tags"] = len(scalars)
        data["progress"] = view.progress(status, scalars)
        return ConsoleJSON(data)

    def log_json(self, request: Request) -> Response:
        view = self.view(request.path_params["job_id"])
        q = request.query_params
        given = q.get("offset", "-1")
        offset = min(int(given), LOG_OFFSET_MOST) if given.lstrip("-").isdigit() and len(given) < 40 else -1
        attempt = int(q["attempt"]) if q.get("attempt", "").isdigit() else None
        # the node's log file as the job's status (the follower's, shared) names it: no query of its own
        return ConsoleJSON(pages.log_chunk(view.job, view.status(), q.get("node", ""), offset, attempt))

    def log_download(self, request: Request) -> Response:
        view = self.view(request.path_params["job_id"])
        job, label = view.job, request.path_params["node"]
        path = pages.node_log(job, view.status(), label)

        def chunks() -> Any:
            offset = 0
            while path:
                data = job.backend.read_bytes(path, offset, pages.LOG_STEP)
                if not data:
                    return
                offset += len(data)
                yield data

        name = f"{job.id}-{label}.log".replace('"', "")
        headers = {"content-disposition": f'attachment; filename="{name}"'}
        return StreamingResponse(chunks(), media_type="text/plain; charset=utf-8", headers=headers)

    def cancel(self, request: Request) -> Response:
        view = self.view(request.path_params["job_id"])
        view.job.cancel()
        view.asked_anew()  # the next refresh asks the controller at once
        return JSONResponse({"cancel": "requested", "job": view.job.id})

    def resubmit(self, request: Request) -> Response:
        from ti_slurm.client import resubmit

        again = resubmit(self.job(request.path_params["job_id"]))
        return JSONResponse({"resubmitted": again.id})


async def refusal(request: Request, exc: Exception) -> Response:
    """A user error (no such job, an id that is no id, a login that cannot be reached): one line, escaped."""
    code = 404 if isinstance(exc, UnknownJobError) else 502 if isinstance(exc, BackendError) else 400
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": str(exc)}, status_code=code)
    html = TEMPLATES.get_template("error.html.j2").render(message=str(exc), csrf="", host="")
    return HTMLResponse(html, status_code=code)


def make_app(guard: Guard, host: str | None = None, ssh: dict[str, Any] | None = None) -> Starlette:
    console = Console(guard, host, ssh)
    routes = [
        Route("/", console.list_page),
        Route("/job/{job_id}", console.job_page),
        Route("/job/{job_id}/log/{node}", console.log_download),
        Route("/sweep/{sweep_id}", console.sweep_page),
        Route("/compare", console.compare_page),
        Route("/api/compare", console.compare_json),
        Route("/nodes", console.nodes_page),
        Route("/api/nodes", console.nodes_json),
        Route("/api/nodes/{node}/release", console.release_node, methods=["POST"]),
        Route("/api/sweep/{sweep_id}", console.sweep_json),
        Route("/api/jobs", console.jobs_json),
        Route("/api/job/{job_id}", console.job_json),
        Route("/api/job/{job_id}/log", console.log_json),
        Route("/api/job/{job_id}/cancel", console.cancel, methods=["POST"]),
        Route("/api/job/{job_id}/resubmit", console.resubmit, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Starlette(
        routes=routes,
        middleware=[Middleware(BaseHTTPMiddleware, dispatch=guard)],
        exception_handlers={TiSlurmError: refusal},
    )


PORTS_TRIED = 50  # the default port and the next ones, for a console of its own when others hold the first
LOOPBACK_BINDS = ("127.0.0.1", "localhost", "::1")


def console_port(bind: str, wanted: int | None) -> int:
    """The port the console will listen on: ``wanted``, or the first from CONSOLE_PORT that is free. On a
    loopback bind a port counts as free only when nobody holds it on 127.0.0.1 *or* ::1 (``localhost`` may
    be either: another user's server there would get the browser's requests); a port of a console just
    stopped (its connections in TIME_WAIT) is free again at once."""
    import socket

    from ti_slurm.core.choices import CONSOLE_PORT
    from ti_slurm.core.errors import ConfigError

    def held(port: int) -> str:
        addresses = ("127.0.0.1", "::1") if bind in LOOPBACK_BINDS else (bind,)
        for address in addresses:
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            with socket.socket(family) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
                try:
                    probe.bind((address, port))
                except OSError as exc:
                    if exc.errno == 99 and address == "::1":  # no IPv6 here: nobody can hold it
                        continue
                    return f"{address}: {exc.strerror}"
        return ""

    if wanted is not None:
        why = held(wanted)
        if why:
            raise ConfigError("--port", wanted, f"cannot listen there ({why}); pick another")
        return wanted
    for port in range(CONSOLE_PORT, CONSOLE_PORT + PORTS_TRIED):
        if not held(port):
            return port
    raise ConfigError("--port", CONSOLE_PORT, f"the {PORTS_TRIED} ports from it are all in use; pick one with --port")


def serve(port: int, host: str | None = None, ssh: dict[str, Any] | None = None, bind: str = "127.0.0.1") -> None:
    """Serve the console until interrupted; print its URL (with the token) first."""
    import socket
    import sys

    import uvicorn

    guard = Guard(port)
    if bind not in LOOPBACK_BINDS:
        # a URL that works from elsewhere: this machine's name (0.0.0.0 and :: are no address to open)
        name = socket.gethostname() if bind in ("0.0.0.0", "::", "") else bind
        guard.hosts.update({f"{name}:{port}", f"[{name}]:{port}", f"{bind}:{port}"})
        guard.public = name
        print(f"ti-slurm: warning: --bind {bind}: anyone who can reach this machine and has the URL can act on your"
              " jobs, and plain http is not encrypted; prefer the default (127.0.0.1) with ssh -L", file=sys.stderr)
    print(f"ti-slurm console: {guard.url()}", flush=True)
    print("  (the token is the key: anyone with this URL can act on your jobs; Ctrl-C stops the console)",
          file=sys.stderr, flush=True)  # fmt: skip
    more_files()
    from ti_slurm.backends.kept import keep_backends

    app, protocol = make_app(guard, host, ssh), Doorman(guard).protocol()
    with keep_backends():  # one SSH session, one slurmrestd connection per cluster, for the console's life
        uvicorn.run(app, host=bind, port=port, log_level="warning", http=protocol, timeout_keep_alive=5)


def more_files() -> None:
    """As many open files as this user may have (a console's connections each hold one; running out makes
    every accept fail, and asyncio says each failure at length)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 8192 if hard == resource.RLIM_INFINITY else min(hard, 8192)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
