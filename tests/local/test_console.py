"""The console (`ti-slurm ui`) in a real browser: Debian's chromium, driven by Playwright for Python, against
jobs of the local runner submitted with the CLI as a process. What a user checks: a job appears in the list
at once; its page shows every node; a line a rank prints appears in its log view without a reload; the CPU
chart has every node; a failed node is marked with its last lines; cancel from the page ends the job; a
request without the token shows nothing; job text is shown as text, never run as HTML.

Screenshots of each page go to $TI_SLURM_ARTIFACTS (default: the test's own folder)."""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser import browser_page, console_process, need_browser, shot
from tests.conftest import run_cli

need_browser()
from playwright.sync_api import Page, expect  # noqa: E402


@pytest.fixture
def console(tmp_path: Path) -> Iterator[tuple[str, dict[str, str], Path]]:
    """A console for a user of our own (their registry), its URL with the token, their env, their folder."""
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "XDG_RUNTIME_DIR": str(tmp_path / "run")}
    (tmp_path / "run").mkdir(mode=0o700)
    with console_process(tmp_path, env) as url:
        yield url, env, tmp_path


@pytest.fixture
def page() -> Iterator[Page]:
    with browser_page() as tab:
        yield tab


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
    expect(row.locator("td").nth(2)).to_have_text("console-ddp")
    shot(page, "list", folder)
    row.locator("a").first.click()  # its id (the row's logs link is another)
    expect(page.locator("#nodes tbody tr")).to_have_count(2, timeout=5000)
    page.select_option("#log-node", "ddp-1")
    expect(page.locator("#log")).to_contain_text("rank 1 step 1", timeout=8000)
    seen = page.locator("#log").text_content() or ""
    expect(page.locator("#log")).not_to_have_text(seen, timeout=3000)  # it grows without a reload
    expect(page.locator("#chart-cpu polyline")).to_have_count(2, timeout=15000)  # a line per node once sampled
    expect(page.locator("#state")).to_have_text("COMPLETED", timeout=30000)
    expect(page.locator("#attempts")).to_contain_text(re.compile(r"start: queued .*, commands \+.* \(last: ddp-[01]\)"))
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


def test_a_failed_attempt_shows_its_cause_and_the_line_that_showed_it(
    console: tuple[str, dict[str, str], Path], page: Page
) -> None:
    url, env, folder = console
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate <b>20.00 GiB</b>"
    spec = f"name: oom\nmode: ddp\nnodes: 2\ncommand: 'if [ $RANK = 1 ]; then echo \"{oom}\"; exit 1; fi; sleep 30'\n"
    job = submit(folder, env, spec)
    page.goto(url)
    page.goto(url.split("?")[0] + f"job/{job}")
    expect(page.locator("#state")).to_have_text("FAILED", timeout=20000)
    cause = page.locator("#attempts .cause")
    expect(cause).to_contain_text(re.compile(r"^cause: gpu_oom on \S+: logs/ddp-1.log:1: torch.OutOfMemoryError"))
    expect(cause).to_contain_text("<b>20.00 GiB</b>")  # the log's words as text, never HTML
    went = re.compile(r"queued [^,]+, starting [^,]+, productive [^,]+, lost")
    expect(page.locator("#summary")).to_contain_text(went)
    assert page.locator("#attempts b").count() == 0
    shot(page, "cause", folder)


def test_a_jobs_page_shows_when_and_how_it_was_submitted_its_settings_and_each_nodes_own_state(
    console: tuple[str, dict[str, str], Path], page: Page
) -> None:
    """At a glance: the submit's date and command line, the spec as submitted (its text, collapsed), the plan's
    key settings, each node's own state (rank 0's command exited 0 in a failed job: COMPLETED), the events as
    sentences and the time's split as a bar."""
    url, env, folder = console
    spec = "name: glance\nmode: ddp\nnodes: 2\ncommand: 'if [ $RANK = 1 ]; then sleep 2; exit 3; fi; echo done'\n"
    job = submit(folder, env, spec)
    page.goto(url)
    page.goto(url.split("?")[0] + f"job/{job}")
    expect(page.locator("#state")).to_have_text("FAILED", timeout=20000)
    summary = page.locator("#summary")
    expect(summary).to_contain_text(re.compile(r"submitted\s*\S.*20\d\d"))  # a date, not a time alone
    expect(summary).to_contain_text("ti-slurm submit --local job.yaml")
    settings = page.locator("#settings")
    expect(settings).to_contain_text(re.compile(r"ddp\s*2 node\(s\) x 1 CPU"))
    expect(settings).to_contain_text("none: a failure ends the job")
    spec_text = page.locator("#spec-text")
    expect(spec_text).to_be_hidden()  # collapsed until asked
    page.click("#spec summary")
    expect(spec_text).to_have_text(spec)
    rows = page.locator("#nodes tbody tr")
    expect(rows.nth(0).locator("td").nth(4)).to_have_text("COMPLETED")  # its own command exited 0
    expect(rows.nth(1).locator("td").nth(4)).to_have_text("FAILED")
    expect(rows.nth(1).locator("td").nth(5)).to_have_text("3")
    expect(page.locator("#events")).to_contain_text("attempt 0 ended FAILED: ddp node")
    expect(page.locator("#events")).to_contain_text("attempt 0 started: ddp on")
    expect(page.locator("#goodput .part")).not_to_have_count(0)
    expect(page.locator("#log-node")).to_have_value("ddp-1")  # the failed node's log: it said nothing
    expect(page.locator("#log")).to_have_text("")  # (never rank 0's lines under rank 1's name)
    shot(page, "glance", folder)


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


def test_the_list_shows_each_jobs_submit_date_and_cancels_and_resubmits_from_its_row(
    console: tuple[str, dict[str, str], Path], page: Page
) -> None:
    url, env, folder = console
    job = submit(folder, env, "name: from-the-list\nmode: ddp\nnodes: 1\ncommand: sleep 300\n")
    page.goto(url)
    row = page.locator(f'#jobs tr[data-job="{job}"]')
    expect(row.locator("td").nth(3)).to_have_text("RUNNING", timeout=10000)
    expect(row.locator("td").nth(4)).to_contain_text(re.compile(r"20\d\d"))  # the submit's date and time
    expect(row.locator("a", has_text="logs")).to_have_attribute("href", f"/job/{job}#log")
    row.locator("button.act-cancel").click()  # the confirmation is accepted
    expect(row.locator("td").nth(3)).to_have_text("CANCELLED", timeout=20000)
    row.locator("button.act-resubmit").click()
    expect(page.locator("#said")).to_contain_text(f"{job} submitted again as local-", timeout=20000)
    again = (page.locator("#said").text_content() or "").rsplit(" ", 1)[1]
    expect(page.locator(f'#jobs tr[data-job="{again}"] td').nth(2)).to_have_text("from-the-list", timeout=5000)
    run_cli("cancel", again, cwd=folder, env=env)
    shot(page, "list-actions", folder)


def test_the_nodes_your_jobs_avoid_are_listed_and_released_from_their_page(
    console: tuple[str, dict[str, str], Path], page: Page
) -> None:
    url, env, folder = console
    folder_of_list = Path(env["XDG_STATE_HOME"]) / "ti-slurm" / "avoided"
    folder_of_list.mkdir(parents=True, mode=0o700)
    now = time.time()
    entry = {"node": "node07", "cause": "gpu_fault", "job": "4242", "cluster": "", "key": "4242/0/node07",
             "since": now - 60, "until": now + 3600, "line": "gpu_fault in job 4242"}  # fmt: skip
    (folder_of_list / "nodes.json").write_text(json.dumps([entry]))
    page.goto(url)
    page.click("text=nodes your jobs avoid")
    row = page.locator('#avoided tr[data-node="node07"]')
    expect(row.locator("td").nth(2)).to_have_text("gpu_fault")
    expect(row.locator("a")).to_have_attribute("href", "/job/4242")
    shot(page, "avoided", folder)
    row.locator("button.act-release").click()
    expect(page.locator("#none")).to_be_visible(timeout=5000)
    assert "avoid no node" in run_cli("nodes", cwd=folder, env=env).stderr


def test_a_training_that_reports_its_step_and_total_shows_progress_and_a_finish_past_its_time_limit(
    console: tuple[str, dict[str, str], Path], page: Page
) -> None:
    """A 2-node job writing `STEP TOTAL` to its progress file twice a second, 1000 steps in a job of one minute:
    a progress bar, its pace, an estimated finish, and the warning that it ends past the limit, with what then."""
    url, env, folder = console
    command = ("'for s in $(seq 1 600); do echo \"$s 1000\" > \"$TI_SLURM_PROGRESS_FILE\"; sleep 0.5; done'")
    job = submit(folder, env, f"name: progress\nmode: ddp\nnodes: 2\ntime: 1\ncommand: {command}\n")
    page.goto(url)
    page.goto(url.split("?")[0] + f"job/{job}")
    text = page.locator("#progress-text")
    said = re.compile(r"^step \d+ of 1000 \(\d+\.\d%\), [0-9.]+ steps/s, ends in ")
    expect(text).to_contain_text(said, timeout=30000)
    expect(page.locator("#progress-warning")).to_contain_text(
        re.compile(r"^at this pace the training ends .* after the job's time limit \(in .*\): it is cut off there")
    )
    width = page.locator("#progress-bar").evaluate("e => e.style.width")
    assert width.endswith("%") and 0 < float(width[:-1]) < 50, width
    shot(page, "progress", folder)
    run_cli("cancel", job, cwd=folder, env=env)


def test_resubmit_from_the_page_runs_it_again_as_a_new_job(
    console: tuple[str, dict[str, str], Path], page: Page
) -> None:
    """A job that failed for want of a file: the file is made, the job resubmitted from its page (the same plan, a
    new job), and the new one completes; each CLI command shown has a button that copies it."""
    url, env, folder = console
    marker = folder / "data-ready"
    job = submit(folder, env, f"name: again\nmode: ddp\nnodes: 2\ncommand: 'echo try; test -e {marker}'\n")
    page.goto(url)
    page.goto(url.split("?")[0] + f"job/{job}")
    expect(page.locator("#state")).to_have_text("FAILED", timeout=20000)
    marker.write_text("")
    page.click("#resubmit")  # the confirmation is accepted; the page goes to the new job
    expect(page.locator("#job-id")).not_to_have_text(job, timeout=10000)
    again = page.locator("#job-id").text_content() or ""
    assert again.startswith("local-") and again != job
    expect(page.locator("#state")).to_have_text("COMPLETED", timeout=20000)
    listed = run_cli("list", cwd=folder, env=env).stdout
    assert re.search(rf"^{again}\s+again\s+COMPLETED", listed, re.M), listed
    assert re.search(rf"^{job}\s+again\s+FAILED", listed, re.M), listed
    copy = page.locator("button.copy-cli").first
    copy.click()
    expect(copy).to_have_text(re.compile("copied|selected"))
    copied = page.evaluate("window.getSelection().toString()") if copy.text_content() == "selected" else None
    assert copied in (None, f"ti-slurm status {again}"), copied


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


SCALARS = """\
import os, sys, time
from torch.utils.tensorboard import SummaryWriter

lr = float(sys.argv[1])  # "bad": the point fails before writing
if os.environ["RANK"] == "0":
    writer = SummaryWriter(os.environ["TI_SLURM_TENSORBOARD_DIR"])
    for step in range(int(sys.argv[2])):
        writer.add_scalar("train/loss", 10 * lr / (step + 1), step)
        writer.flush()
        time.sleep(float(sys.argv[3]))
    writer.close()
"""


def test_the_trainings_scalars_are_charted_as_the_job_writes_them(
    console: tuple[str, dict[str, str], Path], page: Page
) -> None:
    """A 2-node job writing TensorBoard scalars with PyTorch's SummaryWriter to TI_SLURM_TENSORBOARD_DIR: its page
    draws a chart per tag, growing while the job runs."""
    pytest.importorskip("torch.utils.tensorboard")
    url, env, folder = console
    (folder / "scalars.py").write_text(SCALARS)
    command = f"python3 {folder / 'scalars.py'} 0.5 12 1"  # rank 0 writes 12 points, one a second
    job = submit(folder, env, f"name: scalars\nmode: ddp\nnodes: 2\ncommand: {command}\n")
    page.goto(url)
    page.goto(url.split("?")[0] + f"job/{job}")
    chart = page.locator('#scalars svg[data-tag="train/loss"] polyline')
    expect(chart).to_have_count(1, timeout=90000)  # once rank 0 imported torch: 60 s and more on a loaded machine
    expect(page.locator("#scalars figcaption")).to_contain_text(re.compile(r"train/loss \(last: \S+ at step \d+\)"))
    early = page.locator("#scalars figcaption").text_content() or ""
    expect(page.locator("#state")).to_have_text("COMPLETED", timeout=60000)
    expect(page.locator("#scalars figcaption")).to_have_text("train/loss (last: 0.4167 at step 11)", timeout=10000)
    assert early != "train/loss (last: 0.4167 at step 11)"  # seen while the job still wrote it
    assert len((chart.get_attribute("points") or "").split()) == 12
    expect(page.locator("#scalars-none")).to_be_hidden()
    shot(page, "scalars", folder)


def test_two_tabs_and_overlapping_refreshes_leave_the_chart_with_exactly_the_points_written(
    console: tuple[str, dict[str, str], Path], page: Page
) -> None:
    """Two tabs on one job, and four clients asking for its page's data without pause while it writes 40 points:
    every answer and both tabs' charts hold each point once (the job's state on the server is one, locked)."""
    pytest.importorskip("torch.utils.tensorboard")
    url, env, folder = console
    (folder / "scalars.py").write_text(SCALARS)
    command = f"python3 {folder / 'scalars.py'} 0.5 40 0.1"  # 40 points, ten a second
    job = submit(folder, env, f"name: two-tabs\nmode: ddp\nnodes: 1\ncommand: {command}\n")
    page.goto(url)
    base = url.split("?")[0]
    second = page.context.new_page()
    for tab in (page, second):
        tab.goto(base + f"job/{job}")
    cookie = "; ".join(f"{c['name']}={c['value']}" for c in page.context.cookies())
    stop, answers = threading.Event(), []

    def ask() -> None:
        while not stop.is_set():
            request = urllib.request.Request(base + f"api/job/{job}", headers={"Cookie": cookie})
            with contextlib.suppress(OSError):
                answers.append(json.loads(urllib.request.urlopen(request, timeout=60).read()))

    askers = [threading.Thread(target=ask) for _ in range(4)]
    for asker in askers:
        asker.start()
    try:
        expect(page.locator("#state")).to_have_text("COMPLETED", timeout=120000)
        time.sleep(1)  # a last round after the job's end
    finally:
        stop.set()
        for asker in askers:
            asker.join()
    last = answers[-1]["scalars"]["train/loss"]
    assert [step for step, _ in last] == list(range(40)), last
    for answer in answers:  # each answer: the points so far, each once
        steps = [step for step, _ in answer["scalars"].get("train/loss", [])]
        assert steps == list(range(len(steps))), steps
    for tab in (page, second):
        expect(tab.locator("#scalars figcaption")).to_have_text("train/loss (last: 0.1250 at step 39)", timeout=10000)
        points = tab.locator('#scalars svg[data-tag="train/loss"] polyline').get_attribute("points") or ""
        assert len(points.split()) == 40
    shot(second, "two-tabs", folder)


def test_three_runs_loss_curves_overlaid_with_their_settings_side_by_side_hover_and_zoom(
    console: tuple[str, dict[str, str], Path], page: Page
) -> None:
    """Three jobs writing train/loss at different rates, ticked in the list and compared: one chart with a line
    each, the settings that differ (the command) marked and those that do not (the mode) not; hovering shows the
    values at the pointer; dragging zooms on a range, a double-click shows all of it."""
    pytest.importorskip("torch.utils.tensorboard")
    url, env, folder = console
    (folder / "scalars.py").write_text(SCALARS)
    script = folder / "scalars.py"
    jobs = [submit(folder, env, f"name: run{k}\nmode: ddp\nnodes: 1\ncommand: python3 {script} {k} 30 0\n")
            for k in (1, 2, 3)]  # fmt: skip
    for job in jobs:
        assert run_cli("wait", job, cwd=folder, env=env).returncode == 0
    page.goto(url)
    for job in jobs:
        page.locator(f'#jobs tr[data-job="{job}"] input.pick').check()
    page.click("#compare")
    chart = page.locator("#chart-compare")
    expect(chart.locator("polyline")).to_have_count(3, timeout=15000)
    expect(page.locator("#compare-tag")).to_have_value("train/loss")
    for line in chart.locator("polyline").all():
        assert len((line.get_attribute("points") or "").split()) == 30
    expect(page.locator('#compare-settings tr[data-setting="command"]')).to_have_class("differs")
    expect(page.locator('#compare-settings tr[data-setting="mode"]')).not_to_have_class("differs")
    expect(page.locator("#compare-legend")).to_contain_text(f"{jobs[0]} run1 (COMPLETED)")
    box = chart.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] * 0.9, box["y"] + box["height"] / 2)
    hover = re.compile(r"^step \d+: local-\d+ [0-9.]+, local-\d+ [0-9.]+, local-\d+ [0-9.]+$")
    expect(chart).to_have_attribute("data-hover", hover)
    shot(page, "compare", folder)
    page.mouse.move(box["x"] + box["width"] * 0.3, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] / 2, steps=5)
    page.mouse.up()
    expect(chart).to_have_class(re.compile(r"\bzoomed\b"))
    zoomed = len((chart.locator("polyline").first.get_attribute("points") or "").split())
    assert 3 <= zoomed < 30, zoomed  # the steps in the range dragged across
    chart.dblclick()
    expect(chart).not_to_have_class(re.compile(r"\bzoomed\b"))


def test_a_sweep_page_puts_its_failed_points_first(console: tuple[str, dict[str, str], Path], page: Page) -> None:
    url, env, folder = console
    pytest.importorskip("torch.utils.tensorboard")
    (folder / "scalars.py").write_text(SCALARS)
    command = f"python3 {folder / 'scalars.py'} {{lr}} 2 0"  # each point's loss: 10 * lr / 2 at its last step
    (folder / "job.yaml").write_text(f"name: grid\nmode: ddp\nnodes: 1\ncommand: '{command}'\n")
    res = run_cli("sweep", "job.yaml", "--local", "--param", "lr=0.1,bad,0.3", "--wait", cwd=folder, env=env)
    sweep = res.stdout.strip()
    assert res.returncode == 1 and sweep.startswith("sweep-"), res.stderr
    page.goto(url)
    row = page.locator(f'#jobs tr[data-job="{sweep}"]')
    expect(row.locator("td").nth(3)).to_have_text("SWEEP")
    row.locator("button.toggle").click()
    expect(page.locator("#jobs tr.point")).to_have_count(3)
    row.locator("a").click()
    rows = page.locator("#points tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.first.locator("td").nth(1)).to_have_text("bad")  # the failed point first
    expect(rows.first).to_have_class("failed")
    page.locator("#points th", has_text="lr").click()  # sorted by lr
    expect(rows.nth(2).locator("td").nth(1)).to_have_text("bad")
    loss = page.locator("#points th").nth(4)
    expect(loss).to_have_text("train/loss")  # the last value of each point's scalar, a column of its own
    expect(rows.nth(0).locator("td.scalar")).to_have_text("0.5000")
    expect(rows.nth(1).locator("td.scalar")).to_have_text("1.500")
    expect(rows.nth(2).locator("td.scalar")).to_have_text("")  # the failed point wrote none
    loss.click()
    loss.click()  # by loss, largest first
    expect(rows.nth(0).locator("td").nth(1)).to_have_text("0.3")
    shot(page, "sweep", folder)


def test_a_nan_or_inf_loss_is_shown_not_a_blank_page(console: tuple[str, dict[str, str], Path], page: Page) -> None:
    """A training whose loss became NaN or Inf: the sweep's page and the point's page show those values (the
    chart draws the finite ones), where they were a 500 and a blank page."""
    url, env, folder = console
    pytest.importorskip("torch.utils.tensorboard")
    (folder / "scalars.py").write_text(SCALARS)
    command = f"python3 {folder / 'scalars.py'} {{lr}} 2 0"  # 10 * lr / (step + 1): nan, inf, or a number
    (folder / "job.yaml").write_text(f"name: diverged\nmode: ddp\nnodes: 1\ncommand: '{command}'\n")
    res = run_cli("sweep", "job.yaml", "--local", "--param", "lr=nan,inf,0.2", "--wait", cwd=folder, env=env)
    sweep = res.stdout.strip()
    assert res.returncode == 0 and sweep.startswith("sweep-"), res.stderr
    page.goto(url)
    page.goto(url.split("?")[0] + f"sweep/{sweep}")
    rows = page.locator("#points tbody tr")
    expect(rows).to_have_count(3)
    expect(page.locator("#points td.scalar")).to_have_text(["NaN", "Infinity", "1.000"], timeout=20000)
    point = rows.nth(0).locator("a")
    point.click()
    expect(page.locator("#scalars figcaption")).to_have_text("train/loss (last: NaN at step 1)", timeout=20000)
    expect(page.locator("#state")).to_have_text("COMPLETED")
