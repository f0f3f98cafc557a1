"""Sample a live ``/metrics`` endpoint into a folder of scrapes, one file per scrape.

Each scrape is written as it arrives, so that nothing sampled is lost if the run is stopped:
``scrape-<unix milliseconds>.prom``, the endpoint's text as it came, after one comment line

    # scraped at 2026-12-02T21:22:37.123Z (1796246557.123) from http://host:8000/metrics

that ``gpucap.telemetry.scrapes.read_scrapes`` takes as the scrape's time. A file is never
overwritten (created with exclusive mode); a scrape that fails (refused, timed out, not text) is
reported on ``on_error`` and skipped, and the sampling goes on.
"""

from __future__ import annotations

import datetime as dt
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from gpucap.textfiles import bounded_text

MAX_SCRAPE_BYTES = 64 << 20  # a vLLM /metrics page is ~100 kB; a page this large is not one
HEADER = "# scraped at {iso} ({unix:.3f}) from {url}\n"


def fetch_metrics(url: str, timeout_s: float = 10.0) -> str:
    """The text a ``/metrics`` URL serves (UTF-8), at most MAX_SCRAPE_BYTES; an error names the URL."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"scrape URL {url!r}: give an http:// or https:// address of a /metrics endpoint")
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            body = r.read(MAX_SCRAPE_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise ValueError(f"{url}: HTTP {exc.code} ({exc.reason})") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ValueError(f"{url}: cannot be reached ({reason})") from None
    return bounded_text(body, MAX_SCRAPE_BYTES, f"{url}: the metrics page")


def write_scrape(folder: Path, text: str, url: str, at_s: float) -> Path:
    """One scrape into ``folder`` (module docstring); an existing file is an error, never replaced."""
    stamp = dt.datetime.fromtimestamp(at_s, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    path = folder / f"scrape-{round(at_s * 1e3):013d}.prom"
    with path.open("x", encoding="utf-8") as f:
        f.write(HEADER.format(iso=stamp, unix=at_s, url=url))
        f.write(text)
    return path


def scrape_to_folder(
    url: str,
    folder: str | Path,
    *,
    every_s: float = 5.0,
    for_s: float = 600.0,
    timeout_s: float = 10.0,
    stop: Callable[[], bool] | None = None,
    on_error: Callable[[str], None] | None = None,
) -> list[Path]:
    """Scrape ``url`` every ``every_s`` seconds for ``for_s`` seconds (or until ``stop()`` is true)
    into ``folder`` (created if missing). Returns the files written; raises if none could be."""
    if not (every_s > 0 and for_s > 0):
        raise ValueError(f"scrape every {every_s!r} s for {for_s!r} s: both must be positive")
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"scrape folder {folder} is a file; give a folder")
    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    errors: list[str] = []
    t_end = time.monotonic() + for_s
    next_at = time.monotonic()
    while time.monotonic() <= t_end and not (stop and stop()):
        at = time.time()
        try:
            written.append(write_scrape(folder, fetch_metrics(url, timeout_s), url, at))
        except (ValueError, FileExistsError) as exc:
            errors.append(str(exc))
            if on_error:
                on_error(str(exc))
        next_at += every_s
        while (wait := min(next_at, t_end + every_s) - time.monotonic()) > 0 and not (stop and stop()):
            time.sleep(min(wait, 0.2))
    if not written:
        raise ValueError(f"no scrape of {url} succeeded ({errors[-1] if errors else 'stopped before the first'})")
    return written
