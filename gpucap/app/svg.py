"""SVG drawing for the interactive estimator's figures (``gpucap.app.figures``): a canvas of shapes
and text, panels with linear or log axes, and readable tick positions and labels.

A figure is a string of a few hundred elements that the browser draws; building one takes about
a millisecond, where rasterizing the same figure with matplotlib takes 50-150 ms on one core.
Coordinates are pixels from the top left; sizes of text in pixels (matplotlib's 8 pt at 100 dpi
is 11 px).
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

FONT = "DejaVu Sans, Verdana, Arial, sans-serif"  # matplotlib's default first
DASHED = "4,2"
DOTTED = "1.5,2"
DASH_DOT = "6,2,1.5,2"
Box = tuple[float, float, float, float]  # left, top, width, height in pixels
MARGIN = 0.05  # share of an axis's span left free at each end (matplotlib's default margin)


def _px(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


@dataclass(frozen=True)
class Stroke:
    """How a line is drawn: its color, its width in pixels and its dash pattern ("": solid)."""

    color: str
    width: float = 1.0
    dash: str = ""

    def attrs(self) -> str:
        dash = f' stroke-dasharray="{self.dash}"' if self.dash else ""
        return f'stroke="{self.color}" stroke-width="{self.width:g}"{dash}'


GRID = Stroke("#b0b0b0", 0.4)
TICK = Stroke("#000", 0.8)
FRAME = TICK  # a panel's outline
TICK_PX = 3.5  # a tick mark's length, outside the panel


class Canvas:
    """Shapes and text in pixels; ``to_svg()`` gives the document."""

    def __init__(self, width_px: float, height_px: float) -> None:
        self.width_px = width_px
        self.height_px = height_px
        self._parts: list[str] = []

    def rect(
        self,
        box: Box,
        *,
        fill: str,
        opacity: float = 1.0,
        stroke: Stroke | None = None,
        kind: str = "",
        tip: str = "",
    ) -> None:
        """``box``: left, top, width, height; ``stroke``: the outline (none by default); ``tip``: a
        tooltip (an SVG ``<title>``) the browser shows over the rectangle."""
        x, y, w, h = box
        extra = f' fill-opacity="{opacity:g}"' if opacity < 1 else ""
        extra += f" {stroke.attrs()}" if stroke else ""
        end = f"><title>{html.escape(tip)}</title></rect>" if tip else "/>"
        self._parts.append(
            f'<rect{_kind(kind)} x="{_px(x)}" y="{_px(y)}" width="{_px(w)}" height="{_px(h)}" fill="{fill}"{extra}{end}'
        )

    def line(self, x1: float, y1: float, x2: float, y2: float, stroke: Stroke, *, kind: str = "") -> None:
        self._parts.append(
            f'<line{_kind(kind)} x1="{_px(x1)}" y1="{_px(y1)}" x2="{_px(x2)}" y2="{_px(y2)}" {stroke.attrs()}/>'
        )

    def polyline(self, xs: Sequence[float], ys: Sequence[float], stroke: Stroke, *, kind: str = "") -> None:
        points = " ".join(f"{_px(x)},{_px(y)}" for x, y in zip(xs, ys, strict=True))
        self._parts.append(
            f'<polyline{_kind(kind)} points="{points}" fill="none" {stroke.attrs()} stroke-linejoin="round"/>'
        )

    def text(
        self,
        x: float,
        y: float,
        text: str,
        *,
        size: float = 11.0,
        color: str = "#000",
        anchor: str = "start",
        valign: str = "middle",
        rotate: float = 0.0,
        kind: str = "",
    ) -> None:
        """``anchor``: start, middle or end; ``valign``: top, middle or bottom of the text at ``y``."""
        baseline = {"top": "hanging", "middle": "central", "bottom": "alphabetic"}[valign]
        extra = f' transform="rotate({rotate:g} {_px(x)} {_px(y)})"' if rotate else ""
        self._parts.append(
            f'<text{_kind(kind)} x="{_px(x)}" y="{_px(y)}" font-size="{size:g}" fill="{color}" '
            f'text-anchor="{anchor}" dominant-baseline="{baseline}"{extra}>{html.escape(text)}</text>'
        )

    def to_svg(self) -> str:
        w, h = _px(self.width_px), _px(self.height_px)
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
            f'font-family="{FONT}" style="max-width:100%;height:auto">'
            f'<rect width="{w}" height="{h}" fill="white"/>' + "".join(self._parts) + "</svg>"
        )


def _kind(kind: str) -> str:
    return f' class="{kind}"' if kind else ""


@dataclass(frozen=True)
class Scale:
    """Data to pixels along one axis: ``lo`` maps to ``start_px``, ``hi`` to ``end_px``."""

    lo: float
    hi: float
    start_px: float
    end_px: float
    log: bool = False

    def _t(self, v: float) -> float:
        return math.log10(v) if self.log else v

    def __call__(self, v: float) -> float:
        a, b = self._t(self.lo), self._t(self.hi)
        return self.start_px + (self._t(v) - a) / (b - a) * (self.end_px - self.start_px)

    def contains(self, v: float) -> bool:
        return self.lo <= v <= self.hi


def padded_limits(values: Sequence[float], *, log: bool = False, margin: float = MARGIN) -> tuple[float, float]:
    """Axis limits holding ``values`` with ``margin`` of the span free at each end (in log space on
    a log axis); non-finite values, and values <= 0 on a log axis, are left out."""
    ok = [float(v) for v in values if math.isfinite(v) and (v > 0 or not log)]
    if not ok:
        return (1.0, 10.0) if log else (0.0, 1.0)
    lo, hi = min(ok), max(ok)
    if log:
        a, b = math.log10(lo), math.log10(hi)
        if b - a < 1e-9:
            a, b = a - 0.5, b + 0.5
        pad = margin * (b - a)
        return 10 ** (a - pad), 10 ** (b + pad)
    if hi - lo < 1e-12 * max(abs(hi), 1.0):
        lo, hi = lo - max(abs(lo), 1.0) * 0.5, hi + max(abs(hi), 1.0) * 0.5
    pad = margin * (hi - lo)
    return lo - pad, hi + pad


def log_ticks(lo: float, hi: float) -> list[float]:
    """Log-axis ticks at 1-2-5 steps over short spans and at powers of ten (every few decades)
    over long ones, so that a small axis carries a handful of labels whatever its range."""
    lo, hi = sorted((max(float(lo), 1e-300), max(float(hi), 1e-300)))
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    span = math.log10(hi / lo)
    subs: tuple[float, ...] = (1.0, 2.0, 5.0) if span < 2.2 else (1.0,)
    if span < 0.6:
        subs = (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0)
    stride = max(1, math.ceil((last - first) / 5)) if len(subs) == 1 else 1
    ticks = [s * 10.0**d for d in range(first, last + 1, stride) for s in subs]
    return [t for t in ticks if lo <= t * (1 + 1e-9) and t <= hi * (1 + 1e-9)] or [lo, hi]


def log_label(v: float) -> str:
    """Plain numbers on a log axis: 0.05, 1, 10, 1,000."""
    return f"{v:,.0f}" if v >= 1 else f"{v:.3g}"


def linear_ticks(lo: float, hi: float, most: int = 6) -> tuple[list[float], Callable[[float], str]]:
    """At most ``most`` ticks at a round step (1, 2, 2.5 or 5 times a power of ten) within
    [lo, hi], and a label function with as many decimals as the step needs."""
    span = max(hi - lo, 1e-300)
    power = 10.0 ** math.floor(math.log10(span / most))
    step = next(m * power for m in (1.0, 2.0, 2.5, 5.0, 10.0) if span / (m * power) <= most)
    first = math.ceil(lo / step - 1e-9)
    ticks = [k * step for k in range(first, int(math.floor(hi / step + 1e-9)) + 1)]
    decimals = max(0, -math.floor(math.log10(step) + 1e-9) + (1 if step / power == 2.5 else 0))
    return ticks, lambda v: f"{v:,.{decimals}f}"


@dataclass(frozen=True)
class Panel:
    """A plot area on a canvas: its box in pixels (left, top, width, height) and its scales."""

    canvas: Canvas
    left: float
    top: float
    width: float
    height: float
    x: Scale
    y: Scale

    @classmethod
    def make(
        cls,
        canvas: Canvas,
        box: Box,
        xlim: tuple[float, float],
        ylim: tuple[float, float],
        *,
        xlog: bool = False,
        ylog: bool = False,
    ) -> Panel:
        left, top, width, height = box
        return cls(
            canvas,
            left,
            top,
            width,
            height,
            Scale(*xlim, left, left + width, xlog),
            Scale(*ylim, top + height, top, ylog),
        )

    @property
    def box(self) -> Box:
        return self.left, self.top, self.width, self.height

    @property
    def right(self) -> float:
        return self.left + self.width

    @property
    def bottom(self) -> float:
        return self.top + self.height

    def frame(self) -> None:
        """The panel's outline (class ``frame``)."""
        self.canvas.rect(self.box, fill="none", stroke=FRAME, kind="frame")

    def x_axis(
        self, ticks: Sequence[float], label: Callable[[float], str], *, grid: bool = False, size: float = 11
    ) -> None:
        """Ticks and their labels along the bottom edge; vertical grid lines where ``grid``."""
        self._axis(ticks, label, grid, size, along_x=True)

    def y_axis(
        self, ticks: Sequence[float], label: Callable[[float], str], *, grid: bool = False, size: float = 11
    ) -> None:
        """Ticks and their labels along the left edge; horizontal grid lines where ``grid``."""
        self._axis(ticks, label, grid, size, along_x=False)

    def _axis(
        self, ticks: Sequence[float], label: Callable[[float], str], grid: bool, size: float, *, along_x: bool
    ) -> None:
        scale, across, tick = (self.x, self.vline, self.x_tick) if along_x else (self.y, self.hline, self.y_tick)
        for t in filter(scale.contains, ticks):
            if grid:
                across(t, GRID)
            tick(t, label(t), size=size)

    def x_tick(self, x: float, text: str, *, size: float = 11) -> None:
        """A tick mark below the panel at ``x`` and its label under it."""
        px = self.x(x)
        self.canvas.line(px, self.bottom, px, self.bottom + TICK_PX, TICK)
        self.canvas.text(px, self.bottom + 5, text, size=size, anchor="middle", valign="top")

    def y_tick(self, y: float, text: str, *, size: float = 11) -> None:
        """A tick mark left of the panel at ``y`` and its label left of it."""
        py = self.y(y)
        self.canvas.line(self.left - TICK_PX, py, self.left, py, TICK)
        self.canvas.text(self.left - 5, py, text, size=size, anchor="end")

    def hline(self, y: float, stroke: Stroke, *, kind: str = "") -> None:
        py = self.y(y)
        self.canvas.line(self.left, py, self.right, py, stroke, kind=kind)

    def vline(self, x: float, stroke: Stroke, *, kind: str = "") -> None:
        px = self.x(x)
        self.canvas.line(px, self.top, px, self.bottom, stroke, kind=kind)

    def title(self, text: str, *, size: float = 12.5) -> None:
        self.canvas.text(self.left, self.top - 6, text, size=size, valign="bottom")
