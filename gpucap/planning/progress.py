"""The planner's progress: a callback, or a bar on stderr, once a search has run long enough to
be worth watching."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

PROGRESS_AFTER_S = 1.0  # show progress once the search has run this long
PROGRESS_EVERY_S = 0.25


class Progress:
    """Progress of the search: a callback ``(done, total, started)``, True for a bar on stderr,
    shown once the search has run ``PROGRESS_AFTER_S``, at most every ``PROGRESS_EVERY_S``."""

    def __init__(self, progress: Callable[[int, int, float], None] | bool | None, total: int, started: float) -> None:
        self.show = progress if callable(progress) else (progress_bar if progress else None)
        self.total, self.started, self.shown = total, started, 0.0

    def tick(self, done: int) -> None:
        now = time.perf_counter()
        if self.show and now - self.started > PROGRESS_AFTER_S and now - self.shown > PROGRESS_EVERY_S:
            self.show(done, self.total, self.started)
            self.shown = now

    def done(self) -> None:
        if self.show and self.shown:
            self.show(self.total, self.total, self.started)


def progress_bar(done: int, total: int, started: float) -> None:
    """A bar on stderr: the options assessed of all, and the seconds since ``started``."""
    width = 30
    filled = int(width * done / max(total, 1))
    sys.stderr.write(
        f"\rsearching {'#' * filled}{'.' * (width - filled)} {done}/{total} ({time.perf_counter() - started:.1f} s)"
    )
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()
