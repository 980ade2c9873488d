"""The docs as a site: the reference pages are what the code makes, every link and anchor of the README and
of docs/ resolves, and mkdocs builds the site with no warning."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs import PAGES, ROOT
from ti_slurm.help.reference import pages

LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_reference_pages_are_what_the_code_makes() -> None:
    stale = [name for name, text in pages().items() if (ROOT / "docs/reference" / name).read_text() != text]
    assert not stale, f"run: python -m ti_slurm.help.reference docs/reference  (stale: {stale})"


def anchors(page: Path) -> set[str]:
    """The ids mkdocs gives a page's headings."""
    out = set()
    for title in re.findall(r"^#+ (.+)$", re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M), re.M):
        out.add(re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", title.lower())).strip("-"))
    return out


def links() -> list[tuple[Path, str]]:
    return [(page, target) for page in PAGES for target in LINK.findall(page.read_text()) if "://" not in target]


@pytest.mark.parametrize("page,target", links(), ids=[f"{p.name}->{t}" for p, t in links()])
def test_every_link_and_anchor_resolves(page: Path, target: str) -> None:
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    assert dest.exists(), f"{page.relative_to(ROOT)}: {target}: no such file"
    if anchor:
        assert anchor in anchors(dest), f"{page.relative_to(ROOT)}: {target}: no such heading in {dest.name}"


def test_the_readme_is_a_front_door() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200 and "bash .ci/run" in text and "ti-slurm submit --local --wait" in text


def test_the_site_builds_with_no_warning(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert res.returncode == 0 and "WARNING" not in res.stderr, res.stderr
    assert (tmp_path / "site/quickstart/index.html").exists()
