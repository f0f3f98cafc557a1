"""What a running engine reports about itself: Prometheus scrapes of its ``/metrics``
(``scrapes``: read; ``scrape``: sample a live endpoint into a folder), cut into windows of exact
means (``windows``), vLLM's per-step log (``steplog``), and its KV cache against gpucap's memory
model (``memcheck``). The fit to them is ``gpucap.calibration.telemetryfit``."""

from gpucap.telemetry.memcheck import MemoryCheck, memory_check
from gpucap.telemetry.scrape import scrape_to_folder
from gpucap.telemetry.scrapes import Scrape, Series, read_scrapes
from gpucap.telemetry.steplog import StepLog, read_step_log
from gpucap.telemetry.windows import Window, Windows, cut_windows

__all__ = [
    "MemoryCheck",
    "Scrape",
    "Series",
    "StepLog",
    "Window",
    "Windows",
    "cut_windows",
    "memory_check",
    "read_scrapes",
    "read_step_log",
    "scrape_to_folder",
]
