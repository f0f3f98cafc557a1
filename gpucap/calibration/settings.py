"""How a fit is made, declared once for every command and notebook that fits: which coefficients
are free, how each run is predicted, from how many starts, and whether every coefficient is kept
within its physical range. Each field is a keyword of ``gpucap.calibration.calibrate`` (all but
``starts`` also of ``error_tables``), and the command line offers it from its declaration
(``gpucap.options``)."""

from __future__ import annotations

from dataclasses import dataclass

from gpucap.calibration.calibrate import DEFAULT_FREE
from gpucap.calibration.validate import METHODS
from gpucap.options import option


@dataclass(frozen=True)
class FitSettings:
    """The keywords of a fit that a user sets (``calibrate``'s docstring says what each does)."""

    free: tuple[str, ...] = option(DEFAULT_FREE, kind="names", help="coefficients to fit, comma-separated")
    method: str = option(
        "closed-form",
        choices=METHODS,
        help="predict each run by the closed forms (default, fast) or by simulating it (a sweep of a few runs)",
    )
    starts: int | None = option(
        None,
        kind="positive_int",
        help="fit from this many starts and keep the lowest minimum, flagging others as good (default 3 with the "
        "closed forms, 1 by simulation)",
    )
    within_ranges: bool = option(
        False,
        kind="switch",
        help="keep every coefficient within its physical range (data/coefficient-ranges.csv)",
    )
