"""The docs' code blocks, as printed: tests run them exactly as a reader would copy them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def doc_block(marker: str, lang: str = "bash", page: str = "README.md") -> str:
    """The first ```` ```lang ```` block after ``<!-- marker: ... -->`` on ``page`` (a path from the repository's
    root), as printed. A page that lost the marker or its block fails the test that reads it."""
    text = (ROOT / page).read_text()
    start = text.find(f"<!-- {marker}:")
    assert start >= 0, f"{page} lost its {marker} block"
    found = re.compile(rf"^```{re.escape(lang)}\n(.*?)^```", re.S | re.M).search(text, start)
    assert found, f"{page} has no {lang} block after its {marker} marker"
    return found.group(1)
