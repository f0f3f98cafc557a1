"""Figures and small tables for the theory walkthrough (``notebooks/01-theory-walkthrough``).

Each function takes gpucap results (memory breakdowns, step times, load points, limits) and
returns a matplotlib ``Figure`` or a pandas ``DataFrame``; none computes physics of its own. The
notebook stays thin: it calls gpucap, passes the results here, and shows what comes back.
"""

from __future__ import annotations

import dataclasses
import math
import textwrap
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from gpucap.config import Hardware
from gpucap.physics.batching import LoadPoint
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.memory import MemoryBreakdown
from gpucap.physics.step import StepTime, StepWork
from gpucap.physics.steptime import step_time
from gpucap.units import MS, GiB

FloatArray = npt.NDArray[np.float64]
Limits = Mapping[str, float | None]

MEMORY_PARTS = ("weights", "activations", "CUDA graphs", "runtime", "KV budget", "not usable")
MEMORY_COLORS = {
    "weights": "tab:blue",
    "activations": "tab:orange",
    "CUDA graphs": "tab:purple",
    "runtime": "tab:gray",
    "KV budget": "tab:green",
    "not usable": "whitesmoke",
}


def _arr(values: object) -> FloatArray:
    return np.atleast_1d(np.asarray(values, dtype=float))


# ---- memory -----------------------------------------------------------------------------------
def memory_parts_gib(mem: MemoryBreakdown) -> dict[str, float]:
    """One GPU's bytes split for a stacked bar, in GiB: weights, activations, CUDA graphs, runtime,
    the KV budget (0 when the model does not fit) and the share the engine leaves out
    (``1 - gpu_memory_utilization`` of memory: the same whether or not the model fits)."""
    kv = max(mem.kv_budget, 0.0)
    return {
        "weights": mem.weights.total / GiB,
        "activations": mem.activations / GiB,
        "CUDA graphs": mem.cuda_graphs / GiB,
        "runtime": mem.runtime_overhead / GiB,
        "KV budget": kv / GiB,
        "not usable": (mem.total - mem.usable) / GiB,
    }


def memory_table(breakdowns: Mapping[str, MemoryBreakdown]) -> pd.DataFrame:
    """The stacked-bar numbers as a table (GiB per GPU), how far a split that does not fit is short
    of memory, and the KV tokens each GPU holds."""
    rows = {}
    for label, mem in breakdowns.items():
        row = memory_parts_gib(mem)
        row["total"] = mem.total / GiB
        row["short by"] = max(-mem.kv_budget, 0.0) / GiB  # what the weights and reservations overrun
        row["KV tokens per GPU"] = mem.kv_tokens_per_gpu
        rows[label] = row
    return pd.DataFrame.from_dict(rows, orient="index")


def memory_comparison_figure(breakdowns: Mapping[str, MemoryBreakdown], title: str = "") -> Figure:
    """Stacked bars of one GPU's memory per configuration, with its capacity as a tick line.
    A configuration whose weights and reservations exceed what is usable is marked "does not fit"
    with the shortfall."""
    fig = Figure(figsize=(max(6.0, 1.6 * len(breakdowns) + 2.5), 4.2))
    ax = fig.subplots()
    labels = list(breakdowns)
    x = np.arange(len(labels))
    bottom = np.zeros(len(labels))
    parts = [memory_parts_gib(breakdowns[k]) for k in labels]
    for part in MEMORY_PARTS:
        h = np.array([p[part] for p in parts])
        edge = "lightgray" if part == "not usable" else None
        ax.bar(x, h, bottom=bottom, width=0.6, label=part, color=MEMORY_COLORS[part], edgecolor=edge)
        bottom += h
    for i, k in enumerate(labels):
        mem = breakdowns[k]
        ax.hlines(mem.total / GiB, i - 0.38, i + 0.38, colors="black", lw=1.2)
        if not mem.fits:
            ax.text(
                i,
                bottom[i],
                f"does not fit\nshort {-mem.kv_budget / GiB:.1f} GiB",
                ha="center",
                va="bottom",
                fontsize=8,
            )
    ax.set_xticks(x, [textwrap.fill(k, 12) for k in labels], fontsize=8)
    ax.set(ylabel="GiB per GPU", title=title or "memory of one GPU (black tick: its capacity)")
    ax.set_ylim(0, float(bottom.max()) * 1.18)
    ax.legend(fontsize=8, loc="upper right", ncol=2)
    fig.tight_layout()
    return _plain_ticks(fig)


def _plain_ticks(fig: Figure) -> Figure:
    """Log axes labelled in plain numbers (1,024 and 0.5, not 2^10 and 5x10^-1)."""
    plain = FuncFormatter(lambda v, _pos: f"{v:,.0f}" if v >= 1 else f"{v:g}")
    for ax in fig.axes:
        for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
            if scale == "log":
                axis.set_major_formatter(plain)
    return fig


def _shade_beyond(ax: Axes, start: float | None, end: float, label: str) -> None:
    """Grey out x beyond ``start`` (e.g. more requests than memory holds): not reachable."""
    if start is not None and start < end:
        ax.axvspan(start, end, color="0.5", alpha=0.15, lw=0, label=label)


# ---- lines against context length ---------------------------------------------------------------
def _lines_figure(x: FloatArray, curves: Mapping[str, object], *, xlabel: str, ylabel: str, title: str) -> Figure:
    """One line per curve against ``x`` on log-log axes (x in powers of two)."""
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    for label, y in curves.items():
        ax.plot(x, _arr(y), "o-", ms=3, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _plain_ticks(fig)


def kv_per_request_figure(contexts: Sequence[float] | FloatArray, kv_gib: Mapping[str, object]) -> Figure:
    """KV cache one request holds (GiB, whole model) against its context length, one line per
    model: straight for full attention, bent where sliding-window layers stop growing."""
    return _lines_figure(
        _arr(contexts),
        kv_gib,
        xlabel="context length (tokens)",
        ylabel="KV cache per request (GiB)",
        title="KV cache of one request",
    )


def concurrency_vs_context_figure(
    contexts: Sequence[float] | FloatArray, concurrency: Mapping[str, object], title: str = ""
) -> Figure:
    """Requests the KV budget holds against the length each request is charged, one line per
    configuration."""
    return _lines_figure(
        _arr(contexts),
        concurrency,
        xlabel="tokens per request (input + output)",
        ylabel="concurrent requests memory holds",
        title=title or "concurrency memory allows",
    )


# ---- per-constraint bars -----------------------------------------------------------------------
def limits_figure(panels: Mapping[str, Limits], recommended: Mapping[str, float] | None = None) -> Figure:
    """One panel per estimate: a horizontal bar for the concurrency each constraint allows (log
    scale; "not binding" where a constraint never binds), the smallest in red, and the
    recommended concurrency as a dashed line."""
    recommended = recommended or {}
    fig = Figure(figsize=(4.2 * len(panels), 0.5 * max(len(v) for v in panels.values()) + 1.8))
    axes = np.atleast_1d(fig.subplots(1, len(panels), squeeze=False)[0])
    finite = [v for lim in panels.values() for v in lim.values() if v is not None and v > 0]
    finite += [v for v in recommended.values() if v > 0]
    top = max(finite) * 4 if finite else 10.0
    for ax, (title, lim) in zip(axes, panels.items(), strict=True):
        names = list(lim)
        values = [lim[n] for n in names]
        shown = [v for v in values if v is not None]
        smallest = min(shown) if shown else None
        y = np.arange(len(names))[::-1]
        for yi, v in zip(y, values, strict=True):
            if v is None:
                ax.text(1.2, yi, "not binding", va="center", fontsize=8, color="gray")
                continue
            color = "tab:red" if v == smallest else "tab:blue"
            ax.barh(yi, max(v, 1.0), color=color, height=0.6)
            ax.text(max(v, 1.0) * 1.15, yi, f"{v:,.0f}", va="center", fontsize=8)
        if title in recommended:
            r = recommended[title]
            ax.axvline(max(r, 1.0), color="black", ls="--", lw=1)
            ax.text(max(r, 1.0), len(names) - 0.45, f" recommended {r:,.0f}", fontsize=8)
        ax.set_yticks(y, names, fontsize=8)
        ax.set_xscale("log")
        ax.set_xlim(1, top)
        ax.set_ylim(-0.7, len(names) - 0.1)
        ax.set(xlabel="concurrent requests", title=title)
    fig.tight_layout()
    return _plain_ticks(fig)


# ---- step time ---------------------------------------------------------------------------------
def split_step(hw: Hardware, work: StepWork, coef: Coefficients) -> dict[str, StepTime]:
    """The step's two kernels timed apart by ``gpucap.physics.steptime.step_time`` itself: "matmuls" (linear
    FLOP against the weight bytes) and "attention" (attention FLOP against the KV bytes). Each
    part's ``compute_s`` and ``memory_s`` are its own roofline terms (the kernels' floors,
    ``t_layer_s`` and ``t_seq_s``, counted with the matmuls); its ``total_s`` includes the step's
    communication and overhead, so only compare the compute and memory terms."""
    zero = np.zeros_like(np.asarray(work.linear_flop, dtype=float))
    matmuls = dataclasses.replace(work, attention_flop=zero, softmax_excess_flop=zero, kv_bytes=zero)
    attention = dataclasses.replace(
        work, linear_flop=zero, mixed_input_flop=zero, bf16_weight_flop=zero, weight_bytes=zero
    )
    no_floor = dataclasses.replace(coef, t_layer_s=0.0, t_seq_s=0.0)
    graphs = dataclasses.replace(hw, engine=dataclasses.replace(hw.engine, cuda_graphs=True))
    return {"matmuls": step_time(hw, matmuls, coef), "attention": step_time(graphs, attention, no_floor)}


def crossover(x: Sequence[float] | FloatArray, step: StepTime) -> float | None:
    """The first ``x`` at which a step's (or one kernel's, see ``split_step``) compute time reaches
    its memory time; None if it never does on ``x``."""
    xs = _arr(x)
    ok = np.flatnonzero(_arr(step.compute_s) * np.ones_like(xs) >= _arr(step.memory_s) * np.ones_like(xs))
    return float(xs[ok[0]]) if ok.size else None


def step_time_figure(
    tokens: Sequence[float] | FloatArray,
    step: StepTime,
    *,
    parts: Mapping[str, StepTime] | None = None,
    xlabel: str = "decode batch (sequences)",
    rate_label: str = "output tokens/s",
    title: str = "",
    marks: Mapping[str, float] | None = None,
    memory_holds: float | None = None,
) -> Figure:
    """Left: one step's time and its terms against the tokens in the step: compute (FLOP / peak)
    and HBM (bytes / bandwidth), per kernel when ``parts`` (``split_step``) is given, plus
    communication and overhead. Right: tokens per second, ``tokens / step time``. ``marks`` draws
    labelled vertical lines (e.g. a compute/HBM crossover); beyond ``memory_holds`` (the batch the
    KV cache holds) the figure is greyed out: no engine runs that batch."""
    x = _arr(tokens)
    fig = Figure(figsize=(11, 4.8))
    ax, ax_rate = fig.subplots(1, 2)
    lines: list[tuple[str, object, str, str | None]] = [("step total", step.total_s, "-", "black")]
    if parts:
        for i, (name, st) in enumerate(parts.items()):
            lines += [
                (f"{name}: compute", st.compute_s, "--", f"C{2 * i}"),
                (f"{name}: HBM", st.memory_s, "-.", f"C{2 * i}"),
            ]
    else:
        lines += [
            ("compute (FLOP / peak)", step.compute_s, "--", "C0"),
            ("HBM (bytes / bandwidth)", step.memory_s, "-.", "C0"),
        ]
    lines += [("communication", step.comm_s, ":", "C3"), ("overhead", step.overhead_s, ":", "C7")]
    for label, values, style, color in lines:
        v = _arr(values) * np.ones_like(x)
        if np.any(v > 0):
            ax.plot(x, v / MS, ls=style, color=color, label=label)
    ax_rate.plot(x, x / _arr(step.total_s), "k-")
    for a in (ax, ax_rate):
        for i, (label, xv) in enumerate((marks or {}).items()):
            a.axvline(xv, color=f"C{i + 4}", lw=1.2, ls=(0, (1, 1)), label=label)
        _shade_beyond(a, memory_holds, float(x.max()), "beyond what memory holds")
        a.set_xscale("log", base=2)
        a.set_yscale("log")
        a.set_xlabel(xlabel)
        a.grid(True, which="both", alpha=0.3)
    ax.set(ylabel="ms per step", title=title or "one engine step")
    ax.set_ylim(bottom=float(np.min(_arr(step.total_s))) / MS / 300)
    ax_rate.set(ylabel=rate_label, title="tokens per second")
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=5, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.13, 1, 1))
    return _plain_ticks(fig)


def work_table(rows: Mapping[str, tuple[float, StepWork, StepTime]]) -> pd.DataFrame:
    """One row per step: tokens, FLOP, HBM bytes, FLOP per byte, the time each resource needs and
    which is larger. ``rows`` maps a label to ``(tokens in the step, work, time)``."""
    out = {}
    for label, (tokens, work, t) in rows.items():
        flop = float(np.sum(work.linear_flop + work.attention_flop))
        hbm = float(np.sum(work.weight_bytes + work.kv_bytes))
        compute, memory = float(np.sum(t.compute_s)), float(np.sum(t.memory_s))
        total = float(np.sum(t.total_s))
        out[label] = {
            "tokens": tokens,
            "GFLOP per GPU": flop / 1e9,
            "GB read per GPU": hbm / 1e9,
            "FLOP per byte": flop / hbm,
            "compute ms": compute / MS,
            "HBM ms": memory / MS,
            "communication ms": float(np.sum(t.comm_s)) / MS,
            "step ms": total / MS,
            "ms per token": total / MS / tokens,
            "bound by": "compute" if compute >= memory else "HBM bandwidth",
        }
    return pd.DataFrame.from_dict(out, orient="index")


def step_split_figure(steps: Mapping[str, StepTime], title: str = "") -> Figure:
    """Horizontal stacked bars of one step per configuration: GPU work (the roofline terms),
    communication and fixed overhead, with communication's share of the step."""
    fig = Figure(figsize=(10, 0.55 * len(steps) + 1.6))
    ax = fig.subplots()
    labels = list(steps)
    y = np.arange(len(labels))[::-1]
    total = np.array([float(np.sum(steps[k].total_s)) for k in labels])
    comm = np.array([float(np.sum(steps[k].comm_s)) for k in labels])
    over = np.array([float(np.sum(steps[k].overhead_s)) for k in labels])
    work = total - comm - over
    left = np.zeros(len(labels))
    for part, width, color in (
        ("GPU work", work, "tab:blue"),
        ("communication", comm, "tab:red"),
        ("overhead", over, "tab:gray"),
    ):
        ax.barh(y, width / MS, left=left / MS, color=color, label=part, height=0.6)
        left += width
    for yi, t, c in zip(y, total, comm, strict=True):
        ax.text(t / MS * 1.01, yi, f" comm {c / t:.0%}", va="center", fontsize=8)
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlim(0, float(total.max()) / MS * 1.25)
    ax.set(xlabel="ms per step", title=title or "one decode step")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return _plain_ticks(fig)


def comm_share_figure(batch: Sequence[float] | FloatArray, steps: Mapping[str, StepTime]) -> Figure:
    """Communication's share of a decode step against the batch, one line per GPU, with seed 1's
    50% rule of thumb; and the step time itself."""
    x = _arr(batch)
    fig = Figure(figsize=(11, 4))
    ax_share, ax_time = fig.subplots(1, 2)
    for label, st in steps.items():
        ax_share.plot(x, _arr(st.comm_share) * np.ones_like(x), "o-", ms=3, label=label)
        ax_time.plot(x, _arr(st.total_s) * np.ones_like(x) / MS, "o-", ms=3, label=label)
    ax_share.axhline(0.5, color="tab:red", ls="--", lw=1, label="50% (seed 1's rule of thumb)")
    ax_share.set(ylabel="communication / step time", title="communication share", ylim=(0, 1))
    ax_time.set(ylabel="ms per step", title="decode step time", yscale="log")
    for a in (ax_share, ax_time):
        a.set_xscale("log", base=2)
        a.set_xlabel("decode batch (sequences)")
        a.grid(True, which="both", alpha=0.3)
        a.legend(fontsize=8)
    fig.tight_layout()
    return _plain_ticks(fig)


# ---- continuous batching -----------------------------------------------------------------------
def little_law_table(point: LoadPoint, output_len: float) -> pd.DataFrame:
    """Little's law check of a closed-loop solution: ``X x (TTFT + (O - 1) x TPOT)`` next to the
    concurrency C it should equal (X requests/s, O output tokens)."""
    c = _arr(point.concurrency)
    x = _arr(point.requests_per_s) * np.ones_like(c)
    ttft = _arr(point.ttft_s) * np.ones_like(c)
    tpot = _arr(point.tpot_s) * np.ones_like(c)
    return pd.DataFrame(
        {
            "C (requests in the system)": c,
            "running": _arr(point.running) * np.ones_like(c),
            "X (requests/s)": x,
            "TTFT (s)": ttft,
            "TPOT (ms)": tpot / MS,
            "X x (TTFT + (O-1) TPOT)": x * (ttft + (output_len - 1.0) * tpot),
            "output tokens/s": _arr(point.output_tokens_per_s) * np.ones_like(c),
        }
    )


def latency_figure(
    point: LoadPoint,
    *,
    ttft_slo_s: float | None = None,
    tpot_slo_s: float | None = None,
    marks: Mapping[str, float] | None = None,
    title: str = "",
    memory_holds: float | None = None,
) -> Figure:
    """TTFT, TPOT and output tokens/s against concurrency (closed loop), with the SLOs as dashed
    lines and ``marks`` (e.g. the recommended concurrency, what memory holds) as vertical lines;
    beyond ``memory_holds`` the requests wait for a free slot (greyed out)."""
    c = _arr(point.concurrency)
    fig = Figure(figsize=(13, 3.8))
    axes = fig.subplots(1, 3)
    series = (
        ("TTFT (s)", _arr(point.ttft_s), ttft_slo_s),
        ("TPOT (ms)", _arr(point.tpot_s) / MS, None if tpot_slo_s is None else tpot_slo_s / MS),
        ("output tokens/s", _arr(point.output_tokens_per_s), None),
    )
    for ax, (label, y, slo) in zip(axes, series, strict=True):
        ax.plot(c, y * np.ones_like(c), "k.-")
        if slo is not None:
            ax.axhline(slo, color="tab:red", ls="--", lw=1, label=f"SLO {slo:g}")
        for i, (name, xv) in enumerate((marks or {}).items()):
            ax.axvline(xv, color=f"C{i}", ls="-.", lw=1, label=name)
        _shade_beyond(ax, memory_holds, float(c.max()), "beyond what memory holds: requests queue")
        ax.set(xscale="log", yscale="log", xlabel="concurrency C", ylabel=label, title=f"{title} {label}".strip())
        ax.grid(True, which="both", alpha=0.3)
        if slo is not None or marks:
            ax.legend(fontsize=8)
    fig.tight_layout()
    return _plain_ticks(fig)


def open_loop_figure(
    rate: Sequence[float] | FloatArray, point: LoadPoint, service_rate: float, title: str = ""
) -> Figure:
    """Open loop against the arrival rate: requests served per second (it follows the arrivals,
    then stays at the service rate however many more arrive), the mean number of requests in the
    system, and mean TTFT and TPOT. At and above the service rate (the shaded region) the queue,
    and so TTFT, grows without bound while the GPUs are exactly as busy as just below it."""
    lam = _arr(rate)
    fig = Figure(figsize=(14, 4))
    ax_x, ax_c, ax_t = fig.subplots(1, 3)
    ax_x.plot(lam, lam, color="gray", ls=":", label="arrivals")
    ax_x.plot(lam, _arr(point.requests_per_s) * np.ones_like(lam), "k.-", label="served")
    conc = _arr(point.concurrency) * np.ones_like(lam)
    ttft = _arr(point.ttft_s) * np.ones_like(lam)
    tpot = _arr(point.tpot_s) * np.ones_like(lam)
    finite = np.isfinite(conc) & np.isfinite(ttft)
    ax_c.plot(lam[finite], conc[finite], "k.-", label="mean requests in the system")
    ax_t.plot(lam[finite], ttft[finite], "k.-", label="mean TTFT (s)")
    ax_t.plot(lam[finite], tpot[finite], "b.-", label="mean TPOT (s)")
    for a in (ax_x, ax_c, ax_t):
        a.axvspan(service_rate, float(lam.max()) * 1.02, color="tab:red", alpha=0.12, label="unbounded queue")
        a.axvline(service_rate, color="tab:red", lw=1)
        a.set_xlabel("arrival rate (requests/s)")
        a.grid(True, which="both", alpha=0.3)
        a.legend(fontsize=8, loc="lower right" if a is ax_t else "upper left")
    ax_x.set(ylabel="requests/s", title=f"{title} served".strip())
    ax_c.set(ylabel="requests", yscale="log", title=f"{title} requests in the system".strip())
    ax_t.set(ylabel="seconds", yscale="log", title=f"{title} latency".strip())
    for a in (ax_c, ax_t):
        if (~finite).any():
            a.text(service_rate, 0.5, "  infinite", color="tab:red", fontsize=9, transform=a.get_xaxis_transform())
    fig.tight_layout()
    return _plain_ticks(fig)


def number_format(value: float) -> str:
    """Display format for the walkthrough's tables: thousands separators for large numbers,
    three significant digits for small ones."""
    if not math.isfinite(value):
        return str(value)
    if abs(value) >= 100 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:.3g}"


def flop_table(tokens: Sequence[float] | FloatArray, work: StepWork, seed_flop: object) -> pd.DataFrame:
    """FLOP of prefill passes: gpucap's matmul and attention FLOP next to a simpler count
    (``seed_flop``, e.g. seed 1's ``2 x params x tokens``), per prompt length."""
    t = _arr(tokens)
    linear, attention = _arr(work.linear_flop), _arr(work.attention_flop)
    seed = _arr(seed_flop)
    return pd.DataFrame(
        {
            "prompt tokens": t,
            "seed 1: 2 x params (TFLOP)": seed / 1e12,
            "gpucap matmuls (TFLOP)": linear / 1e12,
            "gpucap attention (TFLOP)": attention / 1e12,
            "attention share": attention / (linear + attention),
            "gpucap / seed 1": (linear + attention) / seed,
        }
    )
