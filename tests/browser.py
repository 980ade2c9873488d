"""The console under test: `ti-slurm ui` as a process, and Debian's chromium driven by Playwright for Python
(pointed at Debian's executable: Playwright's own browser download is not used). Tests that use these skip
with the reason when chromium, Playwright or the console's extra is missing."""

from __future__ import annotations

import contextlib
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
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def need_browser() -> None:
    """Skip the calling module, with the reason, unless the console and a browser can run here."""
    pytest.importorskip("playwright.sync_api", reason="pip install playwright (the browser is Debian's chromium)")
    pytest.importorskip("starlette", reason="the console's extra: pip install 'ti-slurm[ui]'")
    if not os.path.exists(CHROMIUM):
        pytest.skip("Debian's chromium is not installed (apt install chromium)", allow_module_level=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def console_process(folder: Path, env: dict[str, str], *args: str) -> Iterator[str]:
    """``ti-slurm ui`` run in ``folder`` with ``env`` (and ``args``, say ``--host login``); yields its printed URL
    (with the token) once it answers."""
    port = free_port()
    proc = subprocess.Popen(
        ["ti-slurm", "ui", "--port", str(port), *args], cwd=folder, env={**os.environ, **env},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = re.search(r"http://\S+", line)
        assert url, line + (proc.stderr.read() if proc.stderr else "")
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/static/console.css", timeout=1)
            except urllib.error.HTTPError:
                break  # it answers (403: no token)
            except OSError:
                time.sleep(0.1)
        yield url.group(0)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextlib.contextmanager
def browser_page() -> Iterator[Any]:
    """A fresh chromium tab that accepts confirmations (the cancel's)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        tab = browser.new_context(viewport={"width": 1300, "height": 1000}).new_page()
        tab.on("dialog", lambda dialog: dialog.accept())
        try:
            yield tab
        finally:
            browser.close()


def shot(page: Any, name: str, folder: Path) -> None:
    """A screenshot kept as a test artifact: in $TI_SLURM_ARTIFACTS, else the test's folder."""
    out = Path(os.environ.get("TI_SLURM_ARTIFACTS", folder))
    out.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out / f"console-{name}.png"), full_page=True)
