"""The docs' code blocks, as printed: tests run them exactly as a reader would copy them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]  # the front door and every page
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)


def doc_block(marker: str, lang: str = "bash") -> str:
    """The first ```` ```lang ```` block after ``<!-- marker: ... -->``, on whichever page holds the marker
    (one page only), as printed. A page that lost the marker or its block fails the test that reads it."""
    holders = [page for page in PAGES if f"<!-- {marker}:" in page.read_text()]
    assert len(holders) == 1, f"the {marker} marker is on {len(holders)} pages, not one: {holders}"
    text = holders[0].read_text()
    start = text.find(f"<!-- {marker}:")
    found = re.compile(rf"^```{re.escape(lang)}\n(.*?)^```", re.S | re.M).search(text, start)
    assert found, f"{holders[0].name} has no {lang} block after its {marker} marker"
    return found.group(1)


def blocks(kind: str) -> list[tuple[str, str]]:
    """Every ```` ```kind ```` block of every page: (its body, ``page:line``)."""
    out = []
    for page in PAGES:
        text = page.read_text()
        for m in BLOCK.finditer(text):
            if m.group(1) == kind:
                out.append((m.group(2), f"{page.relative_to(ROOT)}:{text[: m.start()].count(chr(10)) + 1}"))
    return out
