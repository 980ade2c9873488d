"""A shared login node, with another real user on it (a throwaway account, ``runuser``): what one user's jobs
keep on shared storage (the code store, staged copies) is theirs alone, and what another user planted there
first is refused, not written into, trusted or deleted through. The victim is root here (the test's user);
the other user runs only coreutils, as an attacker with a shell would."""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_cli
from ti_slurm.submitting.packager import take

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="makes a second real user (useradd, runuser)")
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def mallory() -> str:
    """Another user of the login node."""
    name = "tismallory"
    if subprocess.run(["id", name], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/bin/sh", name], check=True)
    return name


def as_user(user: str, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", user, "--", "sh", "-c", script], capture_output=True, text=True)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder every user may write, as /tmp or a team's output folder (pytest's own is root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="ti-slurm-shared-", dir="/tmp"))
    folder.chmod(0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def code_job(tmp_path: Path, out: Path) -> Path:
    code = tmp_path / "proj"
    code.mkdir()
    (code / "train.py").write_text("print('the real training')\n")
    spec = tmp_path / "job.yaml"
    spec.write_text(f"mode: ddp\nnodes: 1\ncode: {code}\noutput_dir: {out}\ncommand: python3 train.py\n")
    return spec


def test_a_tree_another_user_planted_in_the_code_store_is_refused_not_run(
    tmp_path: Path, shared: Path, mallory: str
) -> None:
    out = shared / "out"  # a team's output folder, open to all
    out.mkdir(mode=0o1777)
    out.chmod(0o1777)
    spec = code_job(tmp_path, out)
    tree = take(str(tmp_path / "proj"), str(tmp_path / "private")).tree  # the hash is computable by anyone
    for store in (".ti-slurm-code", f".ti-slurm-code-{os.getuid()}"):  # today's name and the last one
        planted = out / store / "trees" / tree / "proj"
        made = as_user(mallory, f"mkdir -p {planted} && echo \"print('PWNED')\" > {planted}/train.py && "
                       f"chmod -R 777 {out / store}")  # fmt: skip
        assert made.returncode == 0, made.stderr
    res = run_cli("submit", "--local", "--wait", str(spec), env={"XDG_STATE_HOME": str(tmp_path / "state")})
    assert res.returncode == 2, res.stdout + res.stderr
    uid = pwd.getpwnam(mallory).pw_uid
    store = out / f".ti-slurm-code-{os.getuid()}"
    assert res.stderr.startswith("ti-slurm: error: code: '") and res.stderr.count("\n") == 1  # the path shortened
    assert res.stderr.endswith(
        f": cannot keep its snapshot: {store} belongs to uid {uid}, not to you (uid {os.getuid()}); remove it or "
        "use another folder\n"
    )
    assert "PWNED" not in "".join(p.read_text() for p in out.rglob("*.log"))


def test_the_code_store_is_unreadable_to_other_users(tmp_path: Path, shared: Path, mallory: str) -> None:
    out = shared / "out"
    out.mkdir()
    out.chmod(0o1777)
    spec = code_job(tmp_path, out)
    (tmp_path / "proj").chmod(0o700)
    (tmp_path / "proj" / ".env").write_text("API_TOKEN=s3cr3t-of-root\n")
    (tmp_path / "proj" / ".env").chmod(0o600)
    res = run_cli("submit", "--local", "--wait", str(spec), env={"XDG_STATE_HOME": str(tmp_path / "state")})
    assert res.returncode == 0, res.stderr
    peek = as_user(mallory, f"cat $(find {out} -path '*ti-slurm-code*' -type f) 2>/dev/null; ls -R {out} 2>&1")
    assert "s3cr3t" not in peek.stdout
    store = out / f".ti-slurm-code-{os.getuid()}"
    assert oct(store.stat().st_mode & 0o777) == "0o700"
    objects = [p for p in (store / "objects").iterdir()]
    assert objects and all(p.stat().st_mode & 0o077 == 0 for p in objects)


def test_staging_refuses_a_folder_another_user_made_first(tmp_path: Path, shared: Path, mallory: str) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "shard").write_text("the real data\n")
    planted = shared / f"ti-slurm-{os.getuid()}"  # job ids are predictable: the folder can be made first
    assert as_user(mallory, f"mkdir -m 777 {planted}").returncode == 0
    (tmp_path / "site.toml").write_text(f'stage_dir = "{shared}"\n')
    (tmp_path / "job.yaml").write_text(
        f"mode: ddp\nnodes: 1\noutput_dir: out\ninputs: {{val: {{path: {data}, stage: local}}}}\n"
        "command: cat $TI_SLURM_INPUT_VAL/shard\n"
    )
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "TI_SLURM_CONFIG": str(tmp_path / "site.toml")}
    res = run_cli("submit", "--local", "--wait", "job.yaml", cwd=tmp_path, env=env)
    assert res.returncode == 1, res.stderr
    uid = pwd.getpwnam(mallory).pw_uid
    line = f"failed staging on localhost: cannot stage the inputs: {planted} belongs to uid {uid}, not to you"
    assert line in res.stderr, res.stderr
    assert list(planted.iterdir()) == []  # nothing of the job's went in


def test_the_epilog_deletes_nothing_through_a_symlink_planted_as_the_users_stage_folder(
    tmp_path: Path, shared: Path, mallory: str
) -> None:
    victim = pwd.getpwnam("nobody")
    model = shared / "victims-out" / "4646" / "model.pt"  # the job's own output folder, on shared storage
    model.parent.mkdir(parents=True)
    model.write_text("weeks of training")
    planted = shared / f"ti-slurm-{victim.pw_uid}"
    assert as_user(mallory, f"ln -s {shared / 'victims-out'} {planted}").returncode == 0
    config = tmp_path / "config.toml"
    config.write_text(f'job_dir_base = "{tmp_path / "jobs"}"\nlog_file = "{tmp_path / "hooks.log"}"\n'
                      f'stage_dir = "{shared}"\n')  # fmt: skip
    env = {"PATH": "/usr/bin:/bin", "TI_SLURM_CONFIG": str(config), "SLURM_JOB_USER": "nobody",
           "SLURM_JOB_ID": "4646"}  # fmt: skip
    res = subprocess.run([str(BIN / "ti-slurm-epilog")], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert model.read_text() == "weeks of training"


def test_another_user_gets_nothing_of_the_console_nor_of_a_jobs_start_notes_and_scalars(
    tmp_path: Path, mallory: str
) -> None:
    """The console of this user runs on the login node: another user there, without the token, gets a refusal
    and nothing of the jobs (not their names), finds no token in the console's command line, and cannot read
    the job's start notes or its TensorBoard folder."""
    from tests.browser import console_process

    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "XDG_RUNTIME_DIR": str(tmp_path / "run")}
    (tmp_path / "run").mkdir(mode=0o700)
    (tmp_path / "job.yaml").write_text(
        f"name: secret-training\nmode: ddp\nnodes: 2\noutput_dir: {tmp_path / 'out'}\ncommand: 'true'\n"
    )
    res = run_cli("submit", "--local", "--wait", "job.yaml", cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr
    job = res.stdout.split()[0]
    job_dir = tmp_path / "out" / job
    assert sorted(p.name for p in (job_dir / "nodes").glob("*.started")) == ["ddp.0.started", "ddp.1.started"]
    tmp_path.chmod(0o755)  # the folders above the job directory are open: the job's own must not be
    with console_process(tmp_path, env) as url:
        port = url.split(":")[2].split("/")[0]
        token = url.split("token=")[1]
        probe = (
            "import urllib.request, urllib.error\n"
            f"for path in ('/api/jobs', '/api/job/{job}', '/'):\n"
            "    try:\n"
            f"        answer = urllib.request.urlopen('http://127.0.0.1:{port}' + path, timeout=10)\n"
            "        print('GOT', answer.status, answer.read()[:200])\n"
            "    except urllib.error.HTTPError as exc:\n"
            "        print('REFUSED', exc.code, exc.read()[:200])\n"
        )
        seen = as_user(mallory, f"python3 -c {shlex.quote(probe)}; ps -eo args")
    assert seen.stdout.count("REFUSED 403") == 3 and "GOT" not in seen.stdout, seen.stdout + seen.stderr
    assert "secret-training" not in seen.stdout and token not in seen.stdout
    peek = as_user(mallory, f"ls {job_dir}/nodes; cat {job_dir}/nodes/ddp.0.started; ls {job_dir}/output/tensorboard")
    assert peek.returncode != 0 and peek.stdout == "", peek.stdout
    assert "Permission denied" in peek.stderr


def planted_job(tmp_path: Path, shared: Path, mallory: str, dir_mode: str, plan_mode: str) -> Path:
    """Another user's job directory in a shared output folder, holding a plan whose command leaves a mark of the
    user it runs as: a real plan (submitted by this user and copied), its command changed by the other user."""
    out = shared / "out"
    out.mkdir(exist_ok=True)
    out.chmod(0o1777)
    (tmp_path / "job.yaml").write_text(f"mode: ddp\nnodes: 1\noutput_dir: {tmp_path / 'mine'}\ncommand: 'true'\n")
    res = run_cli("submit", "--local", "--wait", "job.yaml", cwd=tmp_path, env={"XDG_STATE_HOME": str(tmp_path / "st")})
    assert res.returncode == 0, res.stderr
    plan = next((tmp_path / "mine").glob("local-*/plan.json")).read_text()
    mark = shared / "ran-as"
    hostile = plan.replace('"command":"true"', f'"command":"id -un > {mark}"')
    assert hostile != plan
    theirs = out / "local-4242"
    made = as_user(mallory, f"mkdir -p {theirs} && printf '%s' {shlex.quote(hostile)} > {theirs}/plan.json && "
                   f"chmod {dir_mode} {theirs} && chmod {plan_mode} {theirs}/plan.json")  # fmt: skip
    assert made.returncode == 0, made.stderr
    return theirs


@pytest.mark.parametrize(("dir_mode", "plan_mode"), [("755", "644"), ("700", "600"), ("777", "666")])
def test_resubmit_of_another_users_job_runs_nothing(
    tmp_path: Path, shared: Path, mallory: str, dir_mode: str, plan_mode: str
) -> None:
    """Another user's job (its directory theirs, open or not: root reads either) is never run again as you: one
    line, nothing submitted, no command of theirs run. The console's button and the CLI call this same API."""
    from ti_slurm.backends.base import JobInfo
    from ti_slurm.backends.local import LocalBackend
    from ti_slurm.client import Job, resubmit
    from ti_slurm.core.errors import UnknownJobError

    theirs = planted_job(tmp_path, shared, mallory, dir_mode, plan_mode)
    job = Job(JobInfo("local-4242", backend="local", job_dir=str(theirs)), LocalBackend())
    with pytest.raises(UnknownJobError) as refused:
        resubmit(job)
    said = str(refused.value)
    assert said.startswith("job local-4242: not resubmitted: it is not a job of yours (") and "\n" not in said, said
    assert f"uid {pwd.getpwnam(mallory).pw_uid}" in said
    assert not list(shared.glob("out/local-*[!2]"))  # no new job directory beside theirs
    time.sleep(2)
    assert not (shared / "ran-as").exists()


def test_resubmit_follows_no_link_into_another_users_plan(tmp_path: Path, shared: Path, mallory: str) -> None:
    """A job directory of yours whose plan is a link to another user's plan (or that is itself a link to their
    directory) is refused as well: links are not followed."""
    from ti_slurm.backends.base import JobInfo
    from ti_slurm.backends.local import LocalBackend
    from ti_slurm.client import Job, resubmit
    from ti_slurm.core.errors import UnknownJobError

    theirs = planted_job(tmp_path, shared, mallory, "755", "644")
    mine = tmp_path / "linked"
    mine.mkdir(mode=0o700)
    (mine / "plan.json").symlink_to(theirs / "plan.json")
    (tmp_path / "dirlink").symlink_to(theirs)
    for where, why in ((mine, "a symlink"), (tmp_path / "dirlink", "a symlink")):
        job = Job(JobInfo("local-4243", backend="local", job_dir=str(where)), LocalBackend())
        with pytest.raises(UnknownJobError, match=f"not resubmitted: it is not a job of yours .*{why}"):
            resubmit(job)
    assert not (shared / "ran-as").exists()


def test_over_ssh_a_plan_is_read_only_when_it_is_the_users_own(tmp_path: Path, shared: Path, mallory: str) -> None:
    """The login node's side of ``read_own`` (the shell the SSH transport runs there), run here as it runs there:
    the user's own private job directory gives its plan; another user's, a link, or a missing one give why."""
    from ti_slurm.transports.ssh import OWN_FILE

    def read(folder: Path) -> subprocess.CompletedProcess[str]:
        argv = ["sh", "-c", OWN_FILE, "sh", str(folder), str(folder / "plan.json")]
        return subprocess.run(argv, capture_output=True, text=True)

    mine = tmp_path / "local-1"
    mine.mkdir(mode=0o700)
    (mine / "plan.json").write_text("{}")
    assert read(mine).stdout == "{}" and read(mine).returncode == 0
    theirs = planted_job(tmp_path, shared, mallory, "755", "644")
    assert "is not a private directory of yours" in read(theirs).stderr and read(theirs).stdout == ""
    (tmp_path / "dirlink").symlink_to(theirs)
    assert read(tmp_path / "dirlink").returncode != 0 and read(tmp_path / "dirlink").stdout == ""
    (mine / "plan.json").unlink()
    (mine / "plan.json").symlink_to(theirs / "plan.json")
    assert "is not a file of yours" in read(mine).stderr and read(mine).stdout == ""
    assert "No such file" in read(tmp_path / "gone").stderr


SNOOP = r"""
import http.server, sys
class Snoop(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open(sys.argv[2], "a") as fh:
            fh.write(self.headers.get("Cookie", "") + "\n")
        self.send_response(200); self.end_headers(); self.wfile.write(b"hello")
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Snoop).serve_forever()
"""


def test_a_cookie_another_users_server_receives_is_worth_nothing_to_them(
    tmp_path: Path, shared: Path, mallory: str
) -> None:
    """The browser sends a 127.0.0.1 cookie to every port of 127.0.0.1. Another user's server on another port
    gets this console's cookie when the user's browser (Debian's chromium) visits it, but not the token; and
    replayed by that user, the cookie reads nothing and cancels nothing: the job runs on."""
    from tests.browser import browser_page, console_process, free_port, need_browser

    need_browser()
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "XDG_RUNTIME_DIR": str(tmp_path / "run")}
    (tmp_path / "run").mkdir(mode=0o700)
    (tmp_path / "job.yaml").write_text("name: long-one\nmode: ddp\nnodes: 1\ncommand: sleep 300\n")
    res = run_cli("submit", "--local", "job.yaml", cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr
    job = res.stdout.split()[0]
    seen = shared / "seen"
    theirs = free_port()
    snoop = subprocess.Popen(["runuser", "-u", mallory, "--", "python3", "-c", SNOOP, str(theirs), str(seen)])
    try:
        with console_process(tmp_path, env) as url, browser_page() as page:
            port, token = url.split(":")[2].split("/")[0], url.split("token=")[1]
            page.goto(url)
            page.locator(f'#jobs tr[data-job="{job}"]').wait_for(timeout=10000)
            for _ in range(50):
                try:
                    page.goto(f"http://127.0.0.1:{theirs}/")  # the user visits another server on this machine
                    break
                except Exception:
                    time.sleep(0.1)
            received = seen.read_text()
            assert f"ti_slurm_ui_{port}_" in received  # the browser did hand the cookie over ...
            assert token not in received  # ... but never the token
            cookie = next(c.strip() for line in received.splitlines() for c in line.split(";") if "ti_slurm_ui_" in c)
            replay = (
                "import urllib.request, sys\n"
                "for method, path in (('GET', '/api/jobs'), ('GET', '/'), ('POST', '/api/job/" + job + "/cancel')):\n"
                "    ask = urllib.request.Request('http://127.0.0.1:" + port + "' + path, method=method,\n"
                "                                 headers={'Cookie': sys.argv[1]})\n"
                "    try:\n"
                "        print('GOT', urllib.request.urlopen(ask, timeout=10).read()[:300])\n"
                "    except Exception as exc:\n"
                "        print('REFUSED', getattr(exc, 'code', exc))\n"
            )
            replayed = as_user(mallory, f"python3 -c {shlex.quote(replay)} {shlex.quote(cookie)}")
            assert replayed.stdout.count("REFUSED 403") == 3 and "GOT" not in replayed.stdout, replayed
            page.goto(url.split("?")[0])  # the user's own browser still gets the page with the same cookie
            page.locator(f'#jobs tr[data-job="{job}"]').wait_for(timeout=10000)
        status = run_cli("status", job, cwd=tmp_path, env=env)
        assert "RUNNING" in status.stdout, status.stdout + status.stderr
    finally:
        snoop.terminate()
        run_cli("cancel", job, cwd=tmp_path, env=env)


def test_two_consoles_in_one_browser_each_keep_their_session(tmp_path: Path) -> None:
    """Two consoles (say two users' on one login node, or one's own on two ports) in one browser: opening the
    second does not log the first out, and a cookie of one is no key to the other."""
    from tests.browser import browser_page, console_process, need_browser

    need_browser()
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "XDG_RUNTIME_DIR": str(tmp_path / "run")}
    (tmp_path / "run").mkdir(mode=0o700)
    with console_process(tmp_path, env) as first, console_process(tmp_path, env) as second, browser_page() as page:
        page.goto(first)
        page.goto(second)
        for url in (first, second):
            answer = page.goto(url.split("?")[0] + "api/jobs")
            assert answer is not None and answer.status == 200, (url, answer and answer.text())
        cookies = {c["name"]: c["value"] for c in page.context.cookies()}
        assert len(cookies) == 2 and all(first.split("token=")[1] not in v for v in cookies.values())


FLOOD = r"""
import socket, sys, time
port, count = int(sys.argv[1]), int(sys.argv[2])
held = []
for _ in range(count):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /api/jobs HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % port)  # never ends its headers
        held.append(s)
    except OSError:
        pass
print("opened", len(held), flush=True)
time.sleep(float(sys.argv[3]))
"""


def test_another_users_flood_of_half_open_connections_leaves_the_console_answering(
    tmp_path: Path, mallory: str
) -> None:
    """About a thousand half-open connections from another user: the console goes on answering its user at
    once, and says each kind of refusal in one line (not a traceback per connection)."""
    import resource
    import urllib.request

    from tests.browser import free_port

    pytest.importorskip("starlette", reason="the console's extra: pip install 'ti-slurm[ui]'")
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_RUNTIME_DIR": str(tmp_path / "run")}
    (tmp_path / "run").mkdir(mode=0o700)
    port = free_port()
    err = (tmp_path / "console.err").open("w")
    console = subprocess.Popen(
        ["ti-slurm", "ui", "--port", str(port)], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=err, text=True
    )
    try:
        assert console.stdout is not None
        url = console.stdout.readline().split()[-1]
        token = url.split("token=")[1]
        ask = urllib.request.Request(f"http://127.0.0.1:{port}/api/jobs", headers={"Authorization": f"token {token}"})
        for _ in range(100):
            try:
                urllib.request.urlopen(ask, timeout=5)
                break
            except OSError:
                time.sleep(0.1)
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        flood = subprocess.Popen(
            ["runuser", "-u", mallory, "--", "sh", "-c", f"ulimit -n {min(limit, 4096)}; exec python3 -c "
             f"{shlex.quote(FLOOD)} {port} 1100 20"], stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert flood.stdout is not None
        opened = flood.stdout.readline()
        started = time.monotonic()
        answer = urllib.request.urlopen(ask, timeout=10)
        assert answer.status == 200 and time.monotonic() - started < 3, opened
        flood.kill()
        flood.wait()
    finally:
        console.terminate()
        console.wait(timeout=10)
        err.close()
    said = (tmp_path / "console.err").read_text()
    assert "Traceback" not in said and len(said) < 2000, said[:2000]
    assert "refusing connections from another user's processes (said once)" in said


def test_a_plan_nested_a_hundred_thousand_deep_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    from ti_slurm.backends.base import JobInfo
    from ti_slurm.backends.local import LocalBackend
    from ti_slurm.client import Job, resubmit
    from ti_slurm.core.errors import UnknownJobError

    mine = tmp_path / "local-7"
    mine.mkdir(mode=0o700)
    (mine / "plan.json").write_text("[" * 100_000 + "]" * 100_000)
    job = Job(JobInfo("local-7", backend="local", job_dir=str(mine)), LocalBackend())
    with pytest.raises(UnknownJobError, match=r"job local-7: its plan was written by another ti-slurm \("):
        resubmit(job)


def test_a_console_bound_beyond_loopback_warns_and_prints_a_url_that_works(tmp_path: Path) -> None:
    from tests.browser import free_port

    pytest.importorskip("starlette", reason="the console's extra: pip install 'ti-slurm[ui]'")
    port = free_port()
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_RUNTIME_DIR": str(tmp_path / "run")}
    (tmp_path / "run").mkdir(mode=0o700)
    console = subprocess.Popen(["ti-slurm", "ui", "--port", str(port), "--bind", "0.0.0.0"], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert console.stdout is not None and console.stderr is not None
        url = console.stdout.readline().split()[-1]
        warning = console.stderr.readline()
        assert warning.startswith("ti-slurm: warning: --bind 0.0.0.0: anyone who can reach this machine"), warning
        import http.cookiejar
        import socket
        import urllib.error
        import urllib.request

        assert url.startswith(f"http://{socket.gethostname()}:{port}/?token="), url
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        for _ in range(100):
            try:
                answer = browser.open(url, timeout=5)  # the printed URL, as printed (its cookie kept)
                break
            except urllib.error.URLError:
                time.sleep(0.1)
        assert answer.status == 200 and "token" not in answer.url
    finally:
        console.terminate()
        console.wait(timeout=10)
