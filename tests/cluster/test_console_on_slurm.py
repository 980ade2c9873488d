"""The console (`ti-slurm ui`) on the real test cluster, in Debian's chromium: a 2-node DDP job submitted with
the CLI appears in the list, its page shows both Slurm nodes and rank 1's lines as they come, the CPU chart
has both nodes, rank 0's TensorBoard scalars are charted, and cancel from the page ends the job in Slurm; the same
through `--host` over a real sshd (the event files found and read there)."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser import browser_page, console_process, need_browser, shot
from tests.conftest import run_cli

need_browser()
pytest.importorskip("paramiko", reason="the ssh extra is not installed (pip install 'ti-slurm[ssh]')")
from playwright.sync_api import Page, expect  # noqa: E402

from tests.sshd import Sshd, ssh_config  # noqa: E402

pytestmark = pytest.mark.usefixtures("cluster")

SPEC = """name: console-on-slurm
mode: ddp
nodes: 2
output_dir: {out}
command: |
  python3 -c '
  import os, time
  writer = None
  if os.environ["RANK"] == "0":  # the training scalars, where the console reads them
      from torch.utils.tensorboard import SummaryWriter
      writer = SummaryWriter(os.environ["TI_SLURM_TENSORBOARD_DIR"])
  for step in range(200):
      print("rank", os.environ["RANK"], "on", os.environ["SLURMD_NODENAME"], "step", step, flush=True)
      if writer:
          writer.add_scalar("train/loss", 1 / (step + 1), step)
          writer.flush()
      end = time.time() + 0.5
      while time.time() < end:
          pass
  '
"""


@pytest.fixture
def page() -> Iterator[Page]:
    with browser_page() as tab:
        yield tab


def slurm_state(job: str) -> str:
    """The job's state in Slurm once it has finished ending (a cancelled job is COMPLETING while its steps end)."""
    deadline = time.monotonic() + 60
    while True:
        shown = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True).stdout
        state = next((w.split("=", 1)[1] for w in shown.split() if w.startswith("JobState=")), "")
        if state != "COMPLETING" or time.monotonic() > deadline:
            return state
        time.sleep(0.5)


def follow_in_the_console(page: Page, url: str, job: str, folder: Path) -> None:
    page.goto(url)
    row = page.locator(f'#jobs tr[data-job="{job}"]')
    expect(row).to_be_visible(timeout=15000)  # at the list's next refresh at the latest
    row.locator("a").first.click()  # its id (the row's logs link is another)
    expect(page.locator("#nodes tbody tr")).to_have_count(2, timeout=30000)  # once its record names the nodes
    page.select_option("#log-node", "ddp-1")
    expect(page.locator("#log")).to_contain_text("rank 1 on node", timeout=30000)
    seen = page.locator("#log").text_content() or ""
    expect(page.locator("#log")).not_to_have_text(seen, timeout=3000)  # new lines, no reload
    expect(page.locator("#chart-cpu polyline")).to_have_count(2, timeout=20000)
    # rank 0 writes its scalars once it imported torch: 60 s and more on a loaded machine
    expect(page.locator('#scalars svg[data-tag="train/loss"] polyline')).to_have_count(1, timeout=90000)
    shot(page, f"slurm-{folder.name}", folder)
    page.click("#cancel")
    expect(page.locator("#state")).to_have_text("CANCELLED", timeout=30000)


def test_a_slurm_job_in_the_console(tmp_path: Path, page: Page) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    (tmp_path / "job.yaml").write_text(SPEC.format(out=tmp_path / "out"))
    with console_process(tmp_path, env) as url:
        res = run_cli("submit", "job.yaml", cwd=tmp_path, env=env)
        assert res.returncode == 0, res.stderr
        job = res.stdout.strip()
        follow_in_the_console(page, url, job, tmp_path)
    assert slurm_state(job) == "CANCELLED"


def test_the_console_through_ssh(tmp_path: Path, page: Page, sshd: Sshd) -> None:
    config = ssh_config(tmp_path, sshd)
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "SSH_AUTH_SOCK": ""}
    (tmp_path / "job.yaml").write_text(SPEC.format(out=tmp_path / "out"))
    res = run_cli("submit", "job.yaml", "--host", "login", "--ssh-config", str(config), cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr
    job = res.stdout.strip()
    logins = sshd.dir / "sshd.log"
    before = logins.read_text().count("Accepted ")
    with console_process(tmp_path, env, "--host", "login", "--ssh-config", str(config)) as url:
        follow_in_the_console(page, url, job, tmp_path)
        # the list, the page, its log and charts, and the cancel: a request a second or more, for a minute
        assert logins.read_text().count("Accepted ") - before == 1, "one SSH session for the console's life"
    assert slurm_state(job) == "CANCELLED"


def test_a_restart_in_place_and_a_requeue_on_the_timeline(tmp_path: Path, page: Page) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    (tmp_path / "job.yaml").write_text(
        f"name: console-restarts\nmode: ddp\nnodes: 2\noutput_dir: {tmp_path / 'out'}\n"
        "restart: {max: 1, on: [failure], in_place: 1}\n"
        "command: 'echo attempt $TI_SLURM_RESTART_COUNT; test $TI_SLURM_RESTART_COUNT -ge 2'\n"
    )
    res = run_cli("submit", "job.yaml", cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr
    job = res.stdout.strip()
    with console_process(tmp_path, env) as url:
        page.goto(url)
        page.goto(url.split("?")[0] + f"job/{job}")
        expect(page.locator("#state")).to_have_text("COMPLETED", timeout=120000)
        attempts = page.locator("#attempts li")
        expect(attempts).to_have_count(3)
        expect(attempts.nth(0)).to_contain_text("FAILED -> restarted in place")
        expect(attempts.nth(1)).to_contain_text("-> requeued")
        expect(attempts.nth(2)).to_contain_text("COMPLETED")
        shot(page, "restarts", tmp_path)


def test_a_slurm_job_stepping_every_second_shows_its_progress_and_estimated_finish(tmp_path: Path, page: Page) -> None:
    """A 2-node job whose ranks write `STEP TOTAL` to their progress files every second, 600 steps in a job of
    two minutes: its page shows the step of the total, the pace, when it would end, and that this is past the
    limit, where restart: with signal: would save and requeue it."""
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    (tmp_path / "job.yaml").write_text(
        f"name: progress-on-slurm\nmode: ddp\nnodes: 2\ntime: 2\noutput_dir: {tmp_path / 'out'}\n"
        "restart: {max: 1}\nsignal: {name: USR2, before: 30}\n"
        "command: 'for s in $(seq 1 600); do echo \"$s 600\" > \"$TI_SLURM_PROGRESS_FILE\"; sleep 1; done'\n"
    )
    with console_process(tmp_path, env) as url:
        res = run_cli("submit", "job.yaml", cwd=tmp_path, env=env)
        assert res.returncode == 0, res.stderr
        job = res.stdout.strip()
        try:
            page.goto(url)
            page.goto(url.split("?")[0] + f"job/{job}")
            said = re.compile(r"^step \d+ of 600 \(\d+\.\d%\), [0-9.]+ steps/s, ends in ")
            expect(page.locator("#progress-text")).to_contain_text(said, timeout=90000)
            expect(page.locator("#progress-warning")).to_contain_text(
                re.compile(r"after the job's time limit \(in .*\): every node gets SIGUSR2 30 s before it to save,"
                           r" and the job is requeued to go on \(1 requeue\(s\) left\)")
            )  # fmt: skip
            shot(page, f"slurm-progress-{tmp_path.name}", tmp_path)
        finally:
            run_cli("cancel", job, cwd=tmp_path, env=env)
