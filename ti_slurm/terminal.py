"""What the CLI shows people: text that came from jobs, specs, records or the scheduler (a failure file, a log
tail, a sweep value, a job name, an error's path) reaches a terminal with its control characters written out
(``\\x1b``), so it can never move the cursor, clear the screen, retitle the window or hide a line. Output that
is data, not a display (``render``'s script, ``logs``, ``env``), stays as it is."""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    from typing import TextIO

# C0 controls but tab and newline, DEL, and the C1 controls (a lone 0x9b is a terminal's CSI, as ESC [ is)
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c not in (0x09, 0x0A)}


def shown(text: str) -> str:
    """``text`` with its control characters written out."""
    return text.translate(_CONTROLS)


class Shown:
    """A text stream whose writes pass through :func:`shown` (the rest of the stream's interface as it is)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        return self.stream.write(shown(text))

    def __getattr__(self, name: str) -> object:
        return getattr(self.stream, name)


def install(stdout_too: bool) -> None:
    """Show the CLI's messages (standard error) through :func:`shown`, and its standard output with them."""
    if not isinstance(sys.stderr, Shown):
        sys.stderr = Shown(sys.stderr)
    if stdout_too and not isinstance(sys.stdout, Shown):
        sys.stdout = Shown(sys.stdout)


def raw(stream: TextIO) -> TextIO:
    """The stream under :class:`Shown`: for the CLI's own control sequences (``top`` clearing the screen)."""
    return stream.stream if isinstance(stream, Shown) else stream
