"""What a running engine reports about itself: Prometheus scrapes of its ``/metrics``
(``scrapes``: read; ``scrape``: sample a live endpoint into a folder), cut into windows of exact
means (``windows``), vLLM's per-step log (``steplog``), and its KV cache against gpucap's memory
model (``memcheck``). The fit to them is ``gpucap.calibration.telemetryfit``."""

from typing import TYPE_CHECKING

from gpucap.lazy import public_names

if TYPE_CHECKING:
    from gpucap.telemetry.memcheck import MemoryCheck as MemoryCheck
    from gpucap.telemetry.memcheck import memory_check as memory_check
    from gpucap.telemetry.scrape import scrape_to_folder as scrape_to_folder
    from gpucap.telemetry.scrapes import Scrape as Scrape
    from gpucap.telemetry.scrapes import Series as Series
    from gpucap.telemetry.scrapes import read_scrapes as read_scrapes
    from gpucap.telemetry.steplog import StepLog as StepLog
    from gpucap.telemetry.steplog import read_step_log as read_step_log
    from gpucap.telemetry.windows import Window as Window
    from gpucap.telemetry.windows import Windows as Windows
    from gpucap.telemetry.windows import cut_windows as cut_windows

__getattr__, __dir__, __all__ = public_names(__name__, __file__)
