"""The concurrency one replica carries: what each resource alone allows, and what the SLOs allow
together (DESIGN.md sections 4-5). Both search a grid of concurrencies through the closed loop
(``loop_point``); ``gpucap.estimate`` calls them once per answer.
"""

from __future__ import annotations

import numpy as np

from gpucap.config import SLO, Hardware, Workload
from gpucap.physics.batching import LoadPoint, closed_loop
from gpucap.physics.coefficients import Coefficients, front_end
from gpucap.physics.extras import NO_EXTRAS, Extras
from gpucap.physics.memory import ArrayLike
from gpucap.physics.requests import Requests
from gpucap.physics.step import StepTime
from gpucap.physics.waves import wave_loop

FRONT_END_SATURATED = 0.95  # share of the HTTP server's core at which it is taken as full
REFINE_POINTS = 32  # concurrencies tried at once between two grid points (``slo_limits``)


def concurrency_grid(top: float) -> np.ndarray:
    return np.unique(np.round(np.geomspace(1, max(top, 1), 600)))


def _largest_ok(grid: np.ndarray, ok: np.ndarray) -> float | None:
    """Largest grid value before the first failure (quantities rise with concurrency)."""
    if not ok[0]:
        return 0.0
    bad = np.flatnonzero(~ok)
    return None if bad.size == 0 else float(grid[bad[0] - 1])


def workload_requests(wl: Workload, *, max_running: ArrayLike, extras: Extras = NO_EXTRAS) -> Requests:
    """The steady state's ``Requests`` of a workload: each prompt with the earlier turns it
    carries (``Workload.prompt_len``), the part of it in the prefix cache, its output, and the
    ``extras`` it brings."""
    return Requests(
        wl.prompt_len, wl.output_len, max_running=max_running, cached_tokens=wl.cached_tokens, extras=extras
    )


def loop_point(
    hw: Hardware,
    coef: Coefficients,
    wl: Workload,
    concurrency: np.ndarray | float,
    *,
    max_running: ArrayLike = np.inf,
    extras: Extras = NO_EXTRAS,
) -> LoadPoint:
    """One replica at ``concurrency`` requests kept in flight: the waves of a fixed-length load
    test (``gpucap.physics.waves.wave_loop``) or the steady state of varied traffic
    (``gpucap.physics.batching.closed_loop``). Images and speculative decoding are modelled in the
    steady state only."""
    if wl.lengths == "fixed" and extras.images is None and extras.speculative is None:
        return wave_loop(
            hw, coef, Requests(wl.input_len, wl.output_len, max_running=max_running), concurrency=concurrency
        )
    return closed_loop(hw, coef, workload_requests(wl, max_running=max_running, extras=extras), concurrency=concurrency)


def front_end_share(hw: Hardware, coef: Coefficients, point: LoadPoint) -> np.ndarray:
    """Share of the HTTP server's core the load takes: requests/s x ``t_request_s``."""
    return np.asarray(point.requests_per_s * front_end(hw.engine, coef).serial_s, dtype=float)


def resource_limits(
    hw: Hardware,
    coef: Coefficients,
    wl: Workload,
    slo: SLO,
    top: float,
    *,
    extras: Extras = NO_EXTRAS,
    point: LoadPoint | None = None,
) -> dict[str, float | None]:
    """Per replica: the concurrency at which each resource's own term alone uses up an SLO.

    For resource r (compute, HBM, link) the steady-state step is split into its terms; the limit is
    the largest C with ``term_r(decode step) <= TPOT_SLO`` and ``TTFT x term_r(prefill step) /
    prefill step <= TTFT_SLO``: TTFT, queueing for prompt-token budget included, is charged to each
    resource by its share of the step that carries the prefill. The combined recommendation can sit
    below every bar, since the terms add. With speculation a decode step yields tau tokens, so
    its terms are compared per token (``/ tau``).

    ``point``: the loop already computed on ``concurrency_grid(top)`` (``estimate`` computes this and the
    SLO search's in one call).

    The host is the fifth resource: its HTTP server must pass the requests, and its limit is
    where the server's core is full (``requests/s x t_request_s`` reaches
    ``FRONT_END_SATURATED``). ``step_overhead``: the step's time outside the GPU (scheduling,
    sampling, launches) alone within the TPOT SLO.
    """
    grid = concurrency_grid(top)
    pt = point or loop_point(hw, coef, wl, grid, extras=extras)
    tau = extras.tokens_per_step
    out: dict[str, float | None] = {}
    for name, attr in (("compute", "compute_s"), ("hbm_bandwidth", "memory_s"), ("interconnect", "comm_s")):
        dec = getattr(pt.decode_step, attr) / tau
        pre = pt.ttft_s * getattr(pt.prefill_step, attr) / pt.prefill_step.total_s
        out[name] = _largest_ok(grid, (dec <= slo.tpot_s) & (pre <= slo.ttft_s))
    out["host"] = _largest_ok(grid, front_end_share(hw, coef, pt) < FRONT_END_SATURATED)
    out["step_overhead"] = _largest_ok(grid, pt.decode_step.overhead_s / tau <= slo.tpot_s)
    return out


def slo_limits(
    hw: Hardware,
    coef: Coefficients,
    wl: Workload,
    slos: list[SLO],
    top: float,
    *,
    extras: Extras = NO_EXTRAS,
    point: LoadPoint | None = None,
) -> list[float]:
    """Largest concurrency per replica with TTFT <= SLO and TPOT <= SLO, at most ``top``, for
    each of ``slos``, searched together (``point``: the loop already computed on
    ``concurrency_grid(top)`` with ``max_num_seqs`` slots).

    The grid's points lie up to ~2% apart and where they fall depends on its top (memory's
    limit, which a longer prompt lowers), so the answer between the last grid point that meets
    an SLO and the first that does not is taken to the request: ``REFINE_POINTS`` whole
    concurrencies in each open bracket, all brackets in one call of the loop, until each
    bracket is one request wide. The answer then moves only with the physics."""
    grid = concurrency_grid(top)
    cap = float(hw.engine.max_num_seqs or np.inf)
    pt = point or loop_point(hw, coef, wl, grid, max_running=cap, extras=extras)
    lo, hi = np.zeros(len(slos)), np.zeros(len(slos))
    for k, slo in enumerate(slos):
        best = _largest_ok(grid, (pt.ttft_s <= slo.ttft_s) & (pt.tpot_s <= slo.tpot_s))
        lo[k] = top if best is None else best
        hi[k] = lo[k] if best is None or best < 1 else grid[np.flatnonzero(grid > best)[0]]
    while np.any(hi - lo > 1):
        open_ = np.flatnonzero(hi - lo > 1)
        tries = [_inside(lo[j], hi[j]) for j in open_]
        p = loop_point(hw, coef, wl, np.concatenate(tries), max_running=cap, extras=extras)
        start = 0
        for j, c in zip(open_.tolist(), tries, strict=True):
            ttft, tpot = p.ttft_s[start : start + c.size], p.tpot_s[start : start + c.size]
            start += c.size
            bad = np.flatnonzero(~((ttft <= slos[j].ttft_s) & (tpot <= slos[j].tpot_s)))
            first_bad = int(bad[0]) if bad.size else c.size
            lo[j] = c[first_bad - 1] if first_bad > 0 else lo[j]
            hi[j] = c[first_bad] if first_bad < c.size else hi[j]
    return [float(v) for v in lo]


def _inside(lo: float, hi: float) -> np.ndarray:
    """Up to ``REFINE_POINTS`` whole concurrencies strictly between ``lo`` and ``hi``, evenly spread."""
    c = np.unique(np.round(np.linspace(lo, hi, REFINE_POINTS + 2)[1:-1]))
    return c[(c > lo) & (c < hi)]


def step_parts(step: StepTime) -> str:
    """A step's terms in words, each alone and at least 5% of the step (the roofline takes the
    larger of compute and HBM): "compute 76.2 ms, HBM 21.2 ms, link 16 ms"."""
    terms = {"compute": step.compute_s, "HBM": step.memory_s, "link": step.comm_s, "host": step.overhead_s}
    total = float(step.total_s)
    return ", ".join(f"{k} {float(v) * 1e3:.3g} ms" for k, v in terms.items() if float(v) >= 0.05 * total)


def one_request_fails(wl: Workload, slo: SLO, one: LoadPoint) -> tuple[str, str]:
    """Which SLO one request alone (``one``: the loop at concurrency 1) misses, and a sentence
    saying by how much, what its step is made of and what would meet it."""

    ttft, tpot = float(one.ttft_s), float(one.tpot_s)
    if ttft > slo.ttft_s:
        return "ttft_slo", (
            f"no concurrency meets the SLOs: one request alone takes {ttft:.3g} s to its first token "
            f"({wl.input_len:,.0f}-token prompt; each prefill step: {step_parts(one.prefill_step)}) > TTFT SLO "
            f"{slo.ttft_s:g} s; a TTFT of {slo.ttft_s:g} s needs more GPUs per replica (tp), a faster "
            "GPU, fp8 weights, shorter prompts or a looser TTFT SLO"
        )
    return "tpot_slo", (
        f"no concurrency meets the SLOs: one request alone decodes at {tpot * 1e3:.3g} ms per token "
        f"(its decode step: {step_parts(one.decode_step)}) > TPOT SLO {slo.tpot_s * 1e3:g} ms; that needs more GPUs "
        "per replica (tp), a faster GPU, smaller weights (fp8, fp4), speculative decoding or a looser TPOT SLO"
    )
