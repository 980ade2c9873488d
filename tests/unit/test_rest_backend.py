"""The rest backend's pure parts: which API version is used, a plan as each version's submit body, tokens
read and timed, and slurmrestd's refusals told apart (the cluster tier runs the real slurmrestd)."""

from __future__ import annotations

import base64
import json
import time

import pytest

from tests.factories import plan_from
from ti_slurm.backends.rest import RENEW_BEFORE, Tokens, refused_token, token_renewal
from ti_slurm.core.environ import SUPERVISOR_TIMES_SIGNAL
from ti_slurm.core.errors import BackendError, ConfigError
from ti_slurm.slurm import rest
from ti_slurm.slurm.text import mem_bytes, token_from_text


def jwt(**claims: object) -> str:
    def part(data: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    return f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part(claims)}.c2lnbmF0dXJl"


def test_the_newest_version_both_know_is_used() -> None:
    paths = {f"/slurm/{v}/jobs": {} for v in ("v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44")}
    paths["/slurmdb/v0.0.44/jobs"] = {}
    assert rest.served_versions({"paths": paths}) == ["v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44"]
    assert rest.pick_version(rest.served_versions({"paths": paths})) == "v0.0.44"
    assert rest.pick_version(["v0.0.36", "v0.0.37", "v0.0.38"]) == "v0.0.38"  # Slurm 22.05
    assert rest.pick_version(["v0.0.99"]) is None  # a release newer than this ti-slurm: no guess
    assert rest.pick_version(["v0.0.36"]) is None


def test_a_token_is_read_as_scontrol_prints_it_and_renewed_before_it_expires() -> None:
    token = jwt(exp=1_900_000_000, iat=1_899_998_200, sun="alice")  # 1,800 s: scontrol token's default
    assert token_from_text(f"SLURM_JWT={token}\n") == token
    assert token_from_text(f"{token}\n") == token
    assert token_renewal(token) == 1_900_000_000 - RENEW_BEFORE
    assert token_renewal(jwt(exp=1_000_060, iat=1_000_000)) == 1_000_048  # a short one: in its last fifth
    assert token_renewal("not-a-jwt") is None


def test_a_token_from_a_file_is_read_again_once_it_is_about_to_expire(tmp_path) -> None:
    path = tmp_path / "jwt"
    soon, later = jwt(exp=int(time.time()) + 30), jwt(exp=int(time.time()) + 3600)
    path.write_text(f"SLURM_JWT={soon}\n")
    path.chmod(0o600)
    tokens = Tokens(f"file:{path}", environ={})
    assert tokens.current() == soon
    path.write_text(f"{later}\n")  # what a site's agent does: the file is replaced before the old one expires
    assert tokens.current() == later
    assert tokens.current() == later  # held while good


def test_no_token_is_one_line_saying_how_to_get_one(tmp_path) -> None:
    (tmp_path / "jwt").write_text("")
    (tmp_path / "jwt").chmod(0o600)
    with pytest.raises(BackendError, match=r"gave none: get one with `scontrol token lifespan=3600`"):
        Tokens(f"file:{tmp_path / 'jwt'}", environ={}).current()
    with pytest.raises(ConfigError, match="rest_token"):
        Tokens(f"file:{tmp_path / 'missing'}", environ={}).current()
    with pytest.raises(BackendError, match="SLURM_JWT gave none"):
        Tokens("env", environ={}).current()


def test_refusals_of_the_token_are_told_apart_from_other_errors() -> None:
    assert refused_token(401, {})
    said = {"errors": [{"description": "Unable to query jobs", "error": "Protocol authentication error"}]}
    assert refused_token(511, said)  # 25.11
    assert rest.error_text(said) == "Unable to query jobs: Protocol authentication error"
    assert refused_token(500, {"errors": [{"description": "Zero Bytes were transmitted or received"}]})  # 22.05
    assert refused_token(500, {"errors": [{"description": "Authentication failure"}]})  # 25.11.0's way
    assert not refused_token(500, {"errors": [{"description": "Unable to contact slurmctld"}]})
    assert not refused_token(200, {"errors": []})


def test_memory_sizes_are_megabytes() -> None:
    assert [mem_bytes(t) >> 20 for t in ("4096", "500M", "4G", "1T", "2048K")] == [4096, 500, 4096, 1 << 20, 2]


def test_a_plan_is_each_versions_submit_body() -> None:
    """The options the #SBATCH lines carry, as fields: a 2-node DDP job with GPUs, memory, a time limit and
    restarts (the checkpoint signal to the batch step, requeue, append)."""
    plan = plan_from(
        {"mode": "ddp", "nodes": 2, "gpus_per_node": 8, "mem": "4G", "time": "1:00:00", "restart": {"max": 2}},
        submission="abc",
    )
    new = rest.submit_body(plan, "#!/bin/bash\n", {"PATH": "/usr/bin"}, rest.dialect_of("v0.0.44"))
    job = new["job"]
    assert new["script"] == "#!/bin/bash\n" and "jobs" not in new
    assert (job["minimum_nodes"], job["maximum_nodes"], job["tasks_per_node"], job["tasks"]) == (2, 2, 1, 2)
    assert job["tres_per_node"] == "gres/gpu:8" and job["memory_per_node"] == {"set": True, "infinite": False,
                                                                               "number": 4096}
    assert job["time_limit"]["number"] == 60 and job["requeue"] is True and job["open_mode"] == ["APPEND"]
    assert (job["kill_warning_signal"], job["kill_warning_flags"]) == ("USR2", ["BATCH_JOB"])
    assert job["comment"] == "ti-slurm:abc" and job["environment"] == ["PATH=/usr/bin"]
    old = rest.submit_body(plan.replace(checkpoint_signal=""), "s", {"PATH": "/usr/bin"}, rest.dialect_of("v0.0.38"))
    assert old["job"]["nodes"] == [2, 2] and old["job"]["gres"] == "gpu:8" and old["job"]["memory_per_node"] == 4096
    assert old["job"]["environment"] == {"PATH": "/usr/bin"} and old["job"]["open_mode"] == "append"


def test_on_22_05_the_supervisor_is_told_to_time_the_checkpoint_signal_itself() -> None:
    """22.05's API cannot ask for ``--signal=B:...``: no signal field, and the batch step's word instead."""
    with_restarts = plan_from({"mode": "ddp", "nodes": 1, "restart": {"max": 1}})
    old = rest.submit_body(with_restarts, "s", {"PATH": "/usr/bin"}, rest.dialect_of("v0.0.38"))["job"]
    assert "signal" not in old and old["environment"] == {"PATH": "/usr/bin", SUPERVISOR_TIMES_SIGNAL: "1"}
    new = rest.submit_body(with_restarts, "s", {"PATH": "/usr/bin"}, rest.dialect_of("v0.0.44"))["job"]
    assert new["kill_warning_signal"] == "USR2" and new["environment"] == ["PATH=/usr/bin"]


def test_what_a_version_cannot_say_is_one_line() -> None:
    odd = plan_from({"mode": "ddp", "nodes": 1, "sbatch": {"gpu-bind": "closest"}})
    with pytest.raises(ConfigError, match=r"sbatch.gpu-bind.*the rest backend cannot pass this option"):
        rest.submit_body(odd, "s", {}, rest.dialect_of("v0.0.44"))


def test_a_multi_role_plan_is_one_description_per_component() -> None:
    plan = plan_from({"mode": "ps-worker", "ps": {"nodes": 1}, "worker": {"nodes": 2}})
    body = rest.submit_body(plan, "s", {}, rest.dialect_of("v0.0.44"))
    assert [j["minimum_nodes"] for j in body["jobs"]] == [1, 2] and "job" not in body


def test_the_user_config_names_the_backend_and_slurmrestd(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from ti_slurm.backends.rest import RestBackend
    from ti_slurm.routing import default_backend

    (tmp_path / "ti-slurm").mkdir()
    config = tmp_path / "ti-slurm" / "config.toml"
    config.write_text('backend = "rest"\n[rest]\nurl = "unix:/run/slurmrestd.sock"\ntoken = "env"\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("TI_SLURM_CONFIG", str(tmp_path / "site.toml"))
    (tmp_path / "site.toml").write_text('rest_url = "http://127.0.0.1:6820"\n')
    assert default_backend() == "rest"
    backend = RestBackend()
    assert backend.client.url == "unix:/run/slurmrestd.sock" and backend.client.tokens.source == "env"
    config.write_text('backend = "sbatch"\n')
    said = r"config.toml: backend: 'sbatch': expected one of: slurm, pyslurm, rest, local \(see docs/reference/"
    with pytest.raises(ConfigError, match=said):
        default_backend()
    (tmp_path / "site.toml").write_text('rest_url = "ftp://x"\n')
    config.write_text("")
    with pytest.raises(ConfigError, match=r"rest_url.*expected http://host:6820"):
        RestBackend()


def test_an_exclusive_job_is_said_as_each_version_reads_it() -> None:
    """22.05 reads ``exclusive`` as --exclusive's words (``"true"`` is refused there); 23.02 on, ``shared``."""
    plan = plan_from({"mode": "ddp", "nodes": 2, "sbatch": {"exclusive": True}})
    assert rest.submit_body(plan, "s", {}, rest.dialect_of("v0.0.38"))["job"]["exclusive"] == "exclusive"
    assert rest.submit_body(plan, "s", {}, rest.dialect_of("v0.0.44"))["job"]["shared"] == ["none"]


# -- token sources that fail or misbehave: one line, never token material, never a hang -----------------------
SECRET = jwt(exp=1_900_000_000, sun="alice", secret="do-not-show")


def token_script(tmp_path, body: str) -> str:  # type: ignore[no-untyped-def]
    script = tmp_path / "get-token"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o700)
    return f"command:{script}"


@pytest.mark.parametrize(
    "body",
    [
        f"echo SLURM_JWT={SECRET}; exit 1",  # the token printed, then a failure
        f"echo SLURM_JWT={SECRET}; echo 'scontrol: error: {SECRET} refused' >&2; exit 3",  # and echoed in the error
        f"echo {SECRET} >&2; exit 2",
    ],
)
def test_a_failing_token_command_never_puts_the_token_in_its_error(tmp_path, body: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(BackendError) as refused:
        Tokens(token_script(tmp_path, body), environ={}).current()
    said = str(refused.value)
    assert "getting a token with" in said and "\n" not in said
    assert SECRET not in said and "do-not-show" not in said and SECRET.split(".")[1] not in said


def test_odd_token_sources_are_one_line_and_end(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import os
    import subprocess

    from ti_slurm.backends import rest as rest_backend

    monkeypatch.setattr(rest_backend, "TIMEOUT", 1.0)
    started = time.monotonic()
    with pytest.raises(BackendError, match=r"printed more than 65536 bytes: stopped"):
        Tokens("command:cat /dev/zero", environ={}).current()
    with pytest.raises(BackendError, match=r"did not end within 1 s: stopped"):
        Tokens(token_script(tmp_path, f"echo $$ > {tmp_path}/pid; exec sleep 60"), environ={}).current()
    assert time.monotonic() - started < 10
    pid = (tmp_path / "pid").read_text().strip()
    assert subprocess.run(["kill", "-0", pid], capture_output=True).returncode != 0  # nothing of it outlives the call
    with pytest.raises(BackendError, match=r"holds characters no token has \(binary output\?\)"):
        Tokens(token_script(tmp_path, r"printf '\377\001\002abc\n'"), environ={}).current()
    unclosed = r"rest_token: 'command:scontrol \"token': its command cannot be read: No closing quotation"
    with pytest.raises(ConfigError, match=unclosed):
        Tokens('command:scontrol "token', environ={}).current()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match=r"cannot read the token: not a regular file"):
        Tokens(f"file:{fifo}", environ={}).current()
    with pytest.raises(ConfigError, match=r"cannot read the token"):
        Tokens("file:/dev/zero", environ={}).current()
    big = tmp_path / "big"
    big.write_bytes(b"a" * 70_000)
    with pytest.raises(ConfigError, match=r"over 65536 bytes"):
        Tokens(f"file:{big}", environ={}).current()


def test_a_token_file_others_may_read_is_warned_of_as_ssh_does(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "jwt"
    path.write_text(f"{SECRET}\n")
    path.chmod(0o644)
    with pytest.warns(RuntimeWarning, match=r"has mode -rw-r--r--: others may read your token; chmod 600 it"):
        assert Tokens(f"file:{path}", environ={}).current() == SECRET
    path.chmod(0o600)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Tokens(f"file:{path}", environ={}).current() == SECRET


def test_a_refused_token_is_said_as_such_not_as_a_server_without_versions(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from ti_slurm.backends.rest import RestBackend, RestClient

    monkeypatch.setattr(RestClient, "send", lambda *a: (401, {"errors": [{"description": "Authentication failure"}]}))
    backend = RestBackend("http://127.0.0.1:9", "env", "alice")
    backend.client.tokens.environ = {"SLURM_JWT": SECRET}
    with pytest.raises(BackendError, match="refused the token from SLURM_JWT") as refused:
        backend.version()
    assert "serves" not in str(refused.value) and SECRET not in str(refused.value)


def test_what_slurmrestd_says_reaches_a_message_without_the_token(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from ti_slurm.backends.rest import RestClient, Tokens, without_tokens

    echoed = {"errors": [{"description": f"bad header X-SLURM-USER-TOKEN: {SECRET}"}]}
    monkeypatch.setattr(RestClient, "send", lambda *a: (400, echoed))
    client = RestClient("http://127.0.0.1:9", Tokens("env", environ={"SLURM_JWT": SECRET}), "alice")
    with pytest.raises(BackendError) as refused:
        client.request("GET", "/slurm/v0.0.40/jobs")
    assert SECRET not in str(refused.value) and "<token>" in str(refused.value)
    assert without_tokens(f"x SLURM_JWT=abc.def y {SECRET}") == "x SLURM_JWT=<token> y <token>"


@pytest.mark.parametrize("job_id", ["../../.config/PLANTED", "..", "12/../../x", ".hidden", "", "1" * 70])
def test_a_job_id_in_slurmrestds_answer_that_is_no_id_becomes_no_path(tmp_path, monkeypatch, job_id: str) -> None:  # type: ignore[no-untyped-def]
    from ti_slurm.backends.rest import RestBackend, RestClient
    from ti_slurm.core.errors import TiSlurmError

    answers = {"/openapi/v3": {"paths": {"/slurm/v0.0.40/jobs": {}}}, "/slurm/v0.0.40/job/submit": {"job_id": job_id}}
    monkeypatch.setattr(RestClient, "request", lambda self, method, path, *a, **k: answers[path])
    backend = RestBackend("http://127.0.0.1:9", "env", "alice")
    plan = plan_from({"mode": "ddp", "nodes": 1, "command": "true", "output_dir": str(tmp_path / "out")})
    with pytest.raises(TiSlurmError) as refused:
        backend.submit(plan, "#!/bin/sh\n", check_fit=False)
    assert "\n" not in str(refused.value)
    assert not (tmp_path / ".config").exists() and not list(tmp_path.rglob("*PLANTED*"))


def test_the_registry_keeps_no_record_under_a_name_that_is_no_job_id(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from ti_slurm.backends.base import JobInfo
    from ti_slurm.follow.registry import remember

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    for job_id in ("../../PLANTED", "a/b", ".x"):
        with pytest.raises(BackendError, match="no job id: not recorded"):
            remember(JobInfo(job_id, backend="rest"))
    assert not list(tmp_path.rglob("*PLANTED*")) and not list(tmp_path.rglob("x.json"))


def test_a_queue_asked_again_through_slurmrestd_asks_only_what_changed(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The shared queue answer, taken again once stale, asks ``update_time=`` the server's mark of the answer
    held: "no job changes" (23.11+'s empty list and warning; 22.05's 304, no body) keeps the answer held;
    a changed table is a whole new answer. A server that gives no mark (22.05's API) is asked whole each time."""
    from ti_slurm.backends.base import JobInfo
    from ti_slurm.backends.rest import RestBackend, RestClient
    from ti_slurm.core.states import JobState
    from ti_slurm.follow import queue

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    clock = [1000.0]
    monkeypatch.setattr(queue.time, "time", lambda: clock[0])

    def job(job_id: int, state: str) -> dict[str, object]:
        return {"job_id": job_id, "name": "t", "user_name": "alice", "job_state": [state], "state_reason": "None"}

    asked: list[str] = []
    answers: list[dict[str, object]] = [
        {"jobs": [job(7, "PENDING")], "last_update": {"set": True, "number": 500}},
        {"jobs": [], "warnings": [{"description": "No job changes since update_time[500]"}]},
        {},  # 22.05's 304
        {"jobs": [job(7, "RUNNING")], "last_update": {"set": True, "number": 560}},
    ]

    def request(self, method: str, path: str, *a, **k):  # type: ignore[no-untyped-def]
        if path == "/openapi/v3":
            return {"paths": {"/slurm/v0.0.44/jobs": {}}}
        asked.append(path)
        return answers.pop(0)

    monkeypatch.setattr(RestClient, "request", request)
    backend = RestBackend("http://127.0.0.1:9", "env", "alice")
    shared = queue.SharedQueue(backend)
    states = []
    for _ in range(4):
        states.append(shared.states([JobInfo("7")], max_age=30)["7"].state)
        clock[0] += 31
    assert asked == [
        "/slurm/v0.0.44/jobs",
        "/slurm/v0.0.44/jobs?update_time=500",
        "/slurm/v0.0.44/jobs?update_time=500",
        "/slurm/v0.0.44/jobs?update_time=500",
    ]
    assert states == [JobState.PENDING, JobState.PENDING, JobState.PENDING, JobState.RUNNING]
    answers.append({"jobs": [job(7, "RUNNING")]})  # no mark given: the next one asks whole
    answers.append({"jobs": [job(7, "COMPLETED")]})
    for _ in range(2):
        shared.states([JobInfo("7")], max_age=30)
        clock[0] += 31
    assert asked[-2:] == ["/slurm/v0.0.44/jobs?update_time=560", "/slurm/v0.0.44/jobs"]
