"""The console (`ti-slurm ui`) in a real browser: Debian's chromium, driven by Playwright for Python, against
jobs of the local runner submitted with the CLI as a process. What a user checks: a job appears in the list
at once; its page shows every node; a line a rank prints appears in its log view without a reload; the CPU
chart has every node; a failed node is marked with its last lines; cancel from the page ends the job; a
request without the token shows nothing; job text is shown as text, never run as HTML.

Screenshots of each page go to $TI_SLURM_ARTIFACTS (default: the test's own folder)."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_cli

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
playwright = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the browser is Debian's)")
if not os.path.exists(CHROMIUM):
    pytest.skip("Debian's chromium is not installed (apt install chromium)", allow_module_level=True)
pytest.importorskip("starlette", reason="the console's extra: pip install 'ti-slurm[ui]'")

from playwright.sync_api import Page, expect, sync_playwright  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def console(tmp_path: Path) -> Iterator[tuple[str, dict[str, str], Path]]:
    """A console for a user of our own (their registry), its URL with the token, their env, their folder."""
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "XDG_RUNTIME_DIR": str(tmp_path / "run")}
    (tmp_path / "run").mkdir(mode=0o700)
    port = free_port()
    proc = subprocess.Popen(
        ["ti-slurm", "ui", "--port", str(port)], cwd=tmp_path, env={**os.environ, **env},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    url = re.search(r"http://\S+", line)
    assert url, line + (proc.stderr.read() if proc.stderr else "")
    for _ in range(50):  # listening
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/static/console.css", timeout=1)
        except urllib.error.HTTPError:
            break  # it answers (403 without the token)
        except OSError:
            time.sleep(0.1)
    yield url.group(0), env, tmp_path
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Page]:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        context = browser.new_context(viewport={"width": 1300, "height": 1000})
        tab = context.new_page()
        tab.on("dialog", lambda dialog: dialog.accept())  # the cancel's confirmation: yes
        yield tab
        browser.close()


def shot(page: Page, name: str, folder: Path) -> None:
    out = Path(os.environ.get("TI_SLURM_ARTIFACTS", folder))
    out.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out / f"console-{name}.png"), full_page=True)


def submit(folder: Path, env: dict[str, str], spec: str) -> str:
    (folder / "job.yaml").write_text(spec)
    res = run_cli("submit", "--local", "job.yaml", cwd=folder, env=env)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


TRAIN = """name: console-ddp
mode: ddp
nodes: 2
command: |
  python3 -c '
  import os, time
  rank = os.environ["RANK"]
  print("rank", rank, "starts", flush=True)
  end = time.time() + float(os.environ.get("SECONDS_TO_RUN", "14"))
  n = 0
  while time.time() < end:
      n += 1
      if n % 400000 == 0:
          print("rank", rank, "step", n // 400000, flush=True)
  print("rank", rank, "done <img src=x onerror=alert(1)> \\x1b[31m", flush=True)
  '
"""


def test_a_job_in_the_list_its_nodes_live_log_and_charts(console: tuple[str, dict[str, str], Path], page: Page) -> None:
    url, env, folder = console
    page.goto(url)  # the token becomes a cookie; the address bar keeps no token
    assert "token" not in page.url
    job = submit(folder, env, TRAIN)
    row = page.locator(f'#jobs tr[data-job="{job}"]')
    expect(row).to_be_visible(timeout=3000)  # 2 s on an idle machine (the list polls each second); 3 s under load
    expect(row.locator("td").nth(1)).to_have_text("console-ddp")
    shot(page, "list", folder)
    row.locator("a").click()
    expect(page.locator("#nodes tbody tr")).to_have_count(2, timeout=5000)
    page.select_option("#log-node", "ddp-1")
    expect(page.locator("#log")).to_contain_text("rank 1 step 1", timeout=8000)
    seen = page.locator("#log").text_content() or ""
    expect(page.locator("#log")).not_to_have_text(seen, timeout=3000)  # it grows without a reload
    expect(page.locator("#chart-cpu polyline")).to_have_count(2, timeout=15000)  # a line per node once sampled
    expect(page.locator("#state")).to_have_text("COMPLETED", timeout=30000)
    expect(page.locator("#log")).to_contain_text("done <img src=x onerror=alert(1)>")
    assert page.locator("#log img").count() == 0  # a log line is text, never HTML
    shot(page, "job", folder)


def test_a_failed_node_is_marked_with_its_last_lines(console: tuple[str, dict[str, str], Path], page: Page) -> None:
    url, env, folder = console
    spec = "name: fails\nmode: ddp\nnodes: 2\ncommand: 'echo \"last words of $RANK\"; test $RANK != 1'\n"
    job = submit(folder, env, spec)
    page.goto(url)
    page.goto(url.split("?")[0] + f"job/{job}")
    expect(page.locator("#state")).to_have_text("FAILED", timeout=20000)
    expect(page.locator("#nodes tr.failed td").first).to_have_text("ddp-1")
    expect(page.locator("#log")).to_contain_text("last words of 1")  # the failed node's log is the one shown
    expect(page.locator("#reason")).to_contain_text("exited 1")
    expect(page.locator("#events tr.error")).not_to_have_count(0)
    shot(page, "failed", folder)


def test_cancel_from_the_page_ends_the_job(console: tuple[str, dict[str, str], Path], page: Page) -> None:
    url, env, folder = console
    job = submit(folder, env, "name: long\nmode: ddp\nnodes: 2\ncommand: sleep 300\n")
    page.goto(url)
    page.goto(url.split("?")[0] + f"job/{job}")
    expect(page.locator("#state")).to_have_text("RUNNING", timeout=10000)
    page.click("#cancel")  # the confirmation is accepted
    expect(page.locator("#state")).to_have_text("CANCELLED", timeout=20000)
    status = run_cli("status", job, cwd=folder, env=env).stdout
    assert "CANCELLED" in status.splitlines()[0], status


def test_nothing_without_the_token(console: tuple[str, dict[str, str], Path], page: Page) -> None:
    url, env, folder = console
    job = submit(folder, env, "name: secret-job\nmode: ddp\nnodes: 1\ncommand: 'true'\n")
    base = url.split("?")[0]
    for path in ("", "api/jobs", f"job/{job}", f"api/job/{job}/log?node=ddp-0&offset=0"):
        response = page.goto(base + path)
        assert response is not None and response.status == 403
        assert "secret-job" not in page.content() and job not in page.content()
    wrong = page.goto(base + "?token=guess")
    assert wrong is not None and wrong.status == 403
    page.goto(url)  # with the token: a page; a change without the CSRF token: refused
    refused = page.request.post(base + f"api/job/{job}/cancel")
    assert refused.status == 403
    rebinding = page.request.get(base + "api/jobs", headers={"host": f"evil.example:{base.rsplit(':', 1)[1]}"})
    assert rebinding.status == 403


def test_an_unknown_or_hostile_job_id_is_one_line(console: tuple[str, dict[str, str], Path], page: Page) -> None:
    url = console[0]
    page.goto(url)
    base = url.split("?")[0]
    response = page.goto(base + "job/--me")
    assert response is not None and response.status in (400, 404)
    expect(page.locator("#error")).to_contain_text("--me")
    missing = page.request.get(base + "api/job/local-999999")
    assert missing.status == 404 and "unknown local job" in missing.json()["error"]
