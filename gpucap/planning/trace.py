"""Sizing from a recorded trace: how many replicas carry THIS traffic within the SLOs.

A trace is a list of requests with their arrival time and lengths, read from

- CSV or JSON lines with a time column (``arrival_s``, ``arrival_time``, ``timestamp`` or
  ``time``, seconds) and the two lengths (``input_tokens`` / ``input_len`` / ``prompt_tokens``
  and ``output_tokens`` / ``output_len`` / ``completion_tokens``);
- the JSON ``vllm bench serve --save-result --save-detailed`` writes (``start_times``,
  ``input_lens``, ``output_lens``).

``size_trace`` splits the arrivals over k replicas by a router policy (``round_robin``; or
``least_outstanding``: each request to the replica with the fewest requests still in flight,
counting a request in flight from its arrival until its arrival plus its expected time in the
system, TTFT + (output - 1) x TPOT of the analytic model at the trace's mean load per replica),
replays each replica's share through the step-level engine (``gpucap.queueing.simulate.replay``), and
finds the smallest k whose SLO statistic over all requests holds.

A long share is replayed in pieces of ``CHUNK_S`` seconds of arrivals, each as its own task
(``gpucap.parallel``: every core, or a Dask cluster), so that a month of traffic spreads over
cores and a worker holds one piece. Each piece starts from an empty engine ``WARMUP_S``
earlier and replays those requests too, keeping only its own: the engine's queue and batch at
the piece's start are rebuilt from the traffic before it, not assumed empty. The piece's replay
and the whole one agree from the first moment inside the warm-up when both engines are empty
(the same requests then arrive at the same engine). Measured on a one-hour trace
(``benchmarks/README.md``, "Every core"): P99 TTFT within 0.3% of the whole replay; without
the warm-up a piece starts too light (``tests/test_trace.py``: 3-4% low at 60-second pieces).
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from gpucap.config import SLO, Hardware, Workload
from gpucap.errors import DoesNotFit
from gpucap.parallel import Runner, as_runner
from gpucap.physics.batching import open_loop
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.concurrency import loop_point
from gpucap.physics.memory import batch_slots, memory_limit
from gpucap.physics.requests import Requests
from gpucap.queueing.simulate import kv_capacity_tokens, replay
from gpucap.textfiles import peek_text, read_text
from gpucap.types import QUANTILES

TIME_KEYS = ("arrival_s", "arrival_time", "timestamp", "time")
INPUT_KEYS = ("input_tokens", "input_len", "prompt_tokens")
OUTPUT_KEYS = ("output_tokens", "output_len", "completion_tokens")
ROUTERS = ("round_robin", "least_outstanding")
# the percentile of each statistic (gpucap.types.STATISTICS); None: the mean
PERCENT: dict[str, float | None] = {"mean": None, **{s: 100 * q for s, q in QUANTILES.items()}}
MAX_TRACE_BYTES = 1 << 30
CHUNK_S = 1800.0  # seconds of arrivals one piece of a replica's share replays (module docstring)
WARMUP_S = 300.0  # seconds of arrivals before a piece replayed to rebuild the engine's state
Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Trace:
    """Requests in arrival order: seconds from the first arrival, prompt and output tokens."""

    arrival_s: Array
    input_len: Array
    output_len: Array
    source: str = ""

    @property
    def duration_s(self) -> float:
        return float(self.arrival_s[-1] - self.arrival_s[0]) if self.arrival_s.size > 1 else 0.0

    @property
    def mean_rate(self) -> float:
        """Requests per second over the trace (its count over its span)."""
        return (self.arrival_s.size - 1) / self.duration_s if self.duration_s > 0 else math.inf


def _column(frame: pd.DataFrame, keys: tuple[str, ...], what: str, where: str) -> Array:
    for k in keys:
        if k in frame.columns:
            values = pd.to_numeric(frame[k], errors="coerce").to_numpy(dtype=float)
            bad = np.flatnonzero(~np.isfinite(values))
            if bad.size:
                raise ValueError(f"{where}: {k} on request {bad[0] + 1} is {frame[k].iloc[bad[0]]!r}, not a number")
            return values
    raise ValueError(f"{where}: no {what} column; name it one of {', '.join(keys)}")


def checked_trace(arrival: Array, inp: Array, out: Array, where: str) -> Trace:
    """A Trace from raw columns, with the checks every format shares: at least one request,
    times that are >= 0 and never go back, whole positive lengths."""
    if arrival.size == 0:
        raise ValueError(f"{where}: the trace has no requests")
    for name, v in (("arrival time", arrival), ("input tokens", inp), ("output tokens", out)):
        bad = np.flatnonzero(~np.isfinite(v))
        if bad.size:
            raise ValueError(f"{where}: request {bad[0] + 1} has {name} {float(v[bad[0]]):g}, not a finite number")
    if np.any(arrival < 0):
        raise ValueError(
            f"{where}: request {int(np.argmax(arrival < 0)) + 1} arrives at a negative time ({arrival.min():g} s)"
        )
    back = np.flatnonzero(np.diff(arrival) < 0)
    if back.size:
        k = int(back[0]) + 1
        raise ValueError(
            f"{where}: arrival times go back at request {k + 1} ({arrival[k]:g} s after {arrival[k - 1]:g} s); "
            "sort the trace by arrival time"
        )
    for name, v in (("input", inp), ("output", out)):
        bad = np.flatnonzero((v < 1) | (v != np.round(v)))
        if bad.size:
            raise ValueError(
                f"{where}: request {bad[0] + 1} has {v[bad[0]]:g} {name} tokens; every request needs a whole number >= 1"
            )
    return Trace(arrival - arrival[0], inp, out, where)


def _json(text: str, where: str, what: str) -> Any:
    """One JSON value, or an error naming the file and ``what`` (the file, a line)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: {what} is not complete JSON ({exc.msg}, column {exc.colno})") from None
    except RecursionError:
        raise ValueError(f"{where}: {what} is JSON nested too deeply to be a trace") from None


def _is_json(line: str) -> bool:
    """Whether ``line`` is one complete JSON value (then the file is JSON lines)."""
    try:
        json.loads(line)
    except (json.JSONDecodeError, RecursionError):
        return False
    return True


def read_trace(path: str | Path) -> Trace:
    """Read a trace file (module docstring); errors name the file, the request and the field."""
    path = Path(path)
    where = str(path)
    head = peek_text(path, "trace file", MAX_TRACE_BYTES).lstrip()
    if not head.startswith("{"):  # CSV: parsed from the file, never held as one string
        try:
            frame = pd.read_csv(path, encoding="utf-8-sig")
        except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
            raise ValueError(f"{where}: not a CSV trace ({exc})") from None
        except UnicodeDecodeError:
            raise ValueError(f"trace file {where} is not UTF-8 text (a binary file?)") from None
        return _trace_of(frame, where)
    text = read_text(path, "trace file", MAX_TRACE_BYTES)
    stripped = text.lstrip()
    lines = [ln for ln in head.splitlines() if ln.strip()][:2]
    if not (len(lines) > 1 and _is_json(lines[0])):
        data: Any = _json(stripped, where, "the file")
        if isinstance(data, dict) and "start_times" in data:  # vllm bench serve --save-detailed
            try:
                arrival, inp, out = (
                    np.asarray(data[k], dtype=float) for k in ("start_times", "input_lens", "output_lens")
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(
                    f"{where}: start_times, input_lens and output_lens must be lists of numbers ({exc})"
                ) from None
            if not (arrival.ndim == inp.ndim == out.ndim == 1):
                raise ValueError(f"{where}: start_times, input_lens and output_lens must be flat lists of numbers")
            if not (arrival.shape == inp.shape == out.shape):
                raise ValueError(f"{where}: start_times, input_lens and output_lens differ in length")
            order = np.argsort(arrival, kind="stable")  # sent concurrently: sorted by start
            return checked_trace(arrival[order], inp[order], out[order], where)
        frame = pd.DataFrame([data])
    else:
        rows = []
        for k, line in enumerate(text.splitlines(), 1):
            if line.strip():
                row = _json(line, where, f"line {k}")
                if not isinstance(row, dict):
                    raise ValueError(f"{where}: line {k} is a JSON {type(row).__name__}, not an object of one request")
                rows.append(row)
        frame = pd.DataFrame(rows)
    return _trace_of(frame, where)


def _trace_of(frame: pd.DataFrame, where: str) -> Trace:
    """The trace in a table of requests (one row each), its columns found by name."""
    arrival = _column(frame, TIME_KEYS, "arrival time", where)
    inp = _column(frame, INPUT_KEYS, "input token", where)
    out = _column(frame, OUTPUT_KEYS, "output token", where)
    return checked_trace(arrival, inp, out, where)


def route(trace: Trace, replicas: int, router: str, expected_s: Array | None = None) -> npt.NDArray[np.int64]:
    """Replica of each request. ``least_outstanding`` needs each request's expected time in the
    system (``expected_s``): a request counts as outstanding until arrival + that."""
    if router not in ROUTERS:
        raise ValueError(f"router must be one of {', '.join(ROUTERS)}, got {router!r}")
    n = trace.arrival_s.size
    if router == "round_robin" or replicas == 1:
        return np.arange(n, dtype=np.int64) % replicas
    assert expected_s is not None
    out = np.empty(n, dtype=np.int64)
    ends: list[list[float]] = [[] for _ in range(replicas)]  # min-heaps of finish times
    for j, (t, d) in enumerate(zip(trace.arrival_s, expected_s, strict=True)):
        for h in ends:
            while h and h[0] <= t:
                heapq.heappop(h)
        k = min(range(replicas), key=lambda i: len(ends[i]))
        heapq.heappush(ends[k], float(t + d))
        out[j] = k
    return out


def statistic(values: Array, stat: str) -> float:
    v = values[np.isfinite(values)]
    if v.size == 0:
        return math.nan
    q = PERCENT[stat]
    return float(np.mean(v) if q is None else np.percentile(v, q))


@dataclass(frozen=True)
class TraceSizing:
    """The smallest replica count found, what each count tried gave, and the search's cost."""

    replicas: int | None  # None: not within max_replicas
    tried: pd.DataFrame  # replicas, ttft_s, tpot_s (the statistic), meets
    stat: str
    router: str
    seconds: float


def size_trace(
    hw: Hardware,
    coef: Coefficients,
    trace: Trace,
    slo: SLO,
    *,
    router: str = "round_robin",
    start: int = 1,
    max_replicas: int = 256,
    replay_replicas: int | None = None,
    progress: Callable[[dict[str, Any], float], None] | None = None,
    n_jobs: int | Runner | None = None,
    dask: Any = None,
    chunk_s: float | None = CHUNK_S,
) -> TraceSizing:
    """Smallest replica count whose TTFT and TPOT at the SLO's statistic over every request of
    ``trace`` meet the SLOs, replaying each replica's share (module docstring). The search starts at ``start``
    (e.g. the analytic plan's count), walks down while it holds and up (doubling, then halving
    the gap) while it fails. ``replay_replicas``: replay only that many of the k replicas' shares
    (their requests stand for all: the router gives each replica traffic alike), to size a long
    trace faster; None replays every replica. ``progress``: called with each count's row of
    ``tried`` and the seconds so far, as the search goes (a long trace takes minutes a count).
    The replicas' replays of one count run on ``n_jobs`` processes (None: every core; 1:
    serially) or the Dask cluster ``dask`` (``gpucap.parallel``), each share in pieces of
    ``chunk_s`` seconds with ``WARMUP_S`` before each (module docstring; None: each share
    whole). The pieces are fixed by the trace, not by the cores, so the answer does not depend
    on where it ran."""
    if chunk_s is not None and not (math.isfinite(chunk_s) and chunk_s > 0):
        raise ValueError(f"chunk_s must be a positive number of seconds (or None: no pieces), got {chunk_s!r}")
    import time

    ttft_slo_s, tpot_slo_s, stat = slo.ttft_s, slo.tpot_s, slo.statistic
    t0 = time.perf_counter()
    wl = Workload(float(np.mean(trace.input_len)), float(np.mean(trace.output_len)))
    _, holds = memory_limit(hw, float(np.max(trace.input_len + trace.output_len)))
    if holds < 1:
        raise DoesNotFit(f"the longest request of the trace does not fit {hw.spec.name} on {hw.gpu.key}")
    cap = batch_slots(hw, context_tokens=wl.max_context)
    kv = kv_capacity_tokens(hw, wl.max_context)
    rows: dict[int, dict[str, Any]] = {}
    run = as_runner(n_jobs, dask)

    def check(k: int) -> bool:
        if k not in rows:
            expected = None
            if router == "least_outstanding":  # at the trace's mean load per replica (a full one if over)
                at = open_loop(
                    hw, coef, Requests(wl.input_len, wl.output_len, max_running=cap), request_rate=trace.mean_rate / k
                )
                ttft_k = float(at.ttft_s) if np.isfinite(at.ttft_s) else float(loop_point(hw, coef, wl, cap).ttft_s)
                expected = ttft_k + (trace.output_len - 1) * float(at.tpot_s)
            who = route(trace, k, router, expected)
            ttft = np.full(trace.arrival_s.size, np.nan)
            tpot = np.full(trace.arrival_s.size, np.nan)
            missed = False
            shown = k if replay_replicas is None else min(k, replay_replicas)
            q = PERCENT[stat]
            # a percentile SLO fails once more than (1 - q) of the requests replayed are late: stop there
            allowed = int((1 - q / 100) * np.count_nonzero(who < shown)) if q is not None else 0
            give_up = None if q is None else (ttft_slo_s, allowed)
            shares = [share for share in (np.flatnonzero(who == r) for r in range(shown)) if share.size]
            jobs = [job for m in shares for job in _pieces(trace, m, chunk_s, WARMUP_S)]
            task = partial(_replay_piece, hw, coef, max_running=cap, kv_capacity_tokens=kv, give_up=give_up)
            for job, (a, b) in zip(jobs, run.map(task, jobs, desc=f"replaying {k} replicas"), strict=True):
                ttft[job.own], tpot[job.own] = a, b
                missed = missed or bool(np.isnan(a).all())
            t, p = (math.inf, math.inf) if missed else (statistic(ttft, stat), statistic(tpot, stat))
            # one-token outputs have no TPOT: where no request has one, only the TTFT SLO applies
            meets = t <= ttft_slo_s and (math.isnan(p) or p <= tpot_slo_s)
            rows[k] = {"replicas": k, "ttft_s": t, "tpot_s": p, "meets": meets}
            if progress is not None:
                progress(rows[k], time.perf_counter() - t0)
        return bool(rows[k]["meets"])

    k = max(1, min(int(start), max_replicas))
    if check(k):
        while k > 1 and check(k - 1):
            k -= 1
        found: int | None = k
    else:
        lo, hi = k, k
        while not check(hi):
            lo = hi
            if hi >= max_replicas:
                break
            hi = min(2 * hi, max_replicas)
        found = None
        if rows[hi]["meets"]:
            while hi - lo > 1:  # lo fails, hi meets
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if check(mid) else (mid, hi)
            found = hi
    tried = pd.DataFrame(sorted(rows.values(), key=lambda r: r["replicas"]))
    return TraceSizing(found, tried, stat, router, time.perf_counter() - t0)


@dataclass(frozen=True)
class Piece:
    """Part of one replica's share to replay: ``requests`` (warm-up first), of which the last
    ``own.size`` are the piece's own, at positions ``own`` of the trace; ``context_tokens``: the
    share's mean prompt + output (what the engine's step model takes for all its pieces)."""

    requests: Trace
    own: npt.NDArray[np.int64]
    context_tokens: float


def _pieces(trace: Trace, share: npt.NDArray[np.int64], chunk_s: float | None, warmup_s: float) -> list[Piece]:
    """The share (positions in ``trace``, arrival order) in pieces of ``chunk_s`` seconds of
    arrivals from its first, each with the requests of the ``warmup_s`` before it; one piece, the
    whole share, when ``chunk_s`` is None or the share is shorter."""
    t = trace.arrival_s[share]
    context = float(np.mean(trace.input_len[share] + trace.output_len[share]))
    if chunk_s is None or t[-1] - t[0] <= chunk_s:
        starts = np.array([0])
    else:
        starts = np.searchsorted(t, t[0] + chunk_s * np.arange(int((t[-1] - t[0]) // chunk_s) + 1), side="left")
        starts = np.unique(starts[starts < t.size])
    ends = np.append(starts[1:], t.size)
    out = []
    for own_from, own_to in zip(starts, ends, strict=True):
        first = int(np.searchsorted(t, t[own_from] - warmup_s, side="left")) if own_from else 0
        m = share[first:own_to]
        requests = Trace(trace.arrival_s[m], trace.input_len[m], trace.output_len[m])
        out.append(Piece(requests, share[own_from:own_to], context))
    return out


def _replay_piece(
    hw: Hardware,
    coef: Coefficients,
    piece: Piece,
    *,
    max_running: float,
    kv_capacity_tokens: float,
    give_up: tuple[float, int] | None,
) -> tuple[Array, Array]:
    """TTFT and TPOT (s) of a piece's own requests, replayed on one replica after its warm-up
    (``gpucap.queueing.simulate.replay``); it gives up where its own late requests alone are
    already more than ``give_up`` allows."""
    r = piece.requests
    warm = r.arrival_s.size - piece.own.size
    ttft, tpot = replay(
        hw,
        coef,
        arrival_s=r.arrival_s,
        input_len=r.input_len,
        output_len=r.output_len,
        max_running=max_running,
        kv_capacity_tokens=kv_capacity_tokens,
        give_up=give_up,
        context_tokens=piece.context_tokens,
        judged_from=warm,
    )
    return ttft[warm:], tpot[warm:]


def burstiness(trace: Trace) -> float:
    """Gamma shape of the trace's gaps between arrivals, ``1 / CV^2`` (1 for Poisson, below 1
    burstier), clipped to [0.05, 20]: what the analytic planner takes for the same traffic."""
    gaps = np.diff(trace.arrival_s)
    if gaps.size < 2 or gaps.mean() <= 0:
        return 1.0
    cv2 = gaps.var() / gaps.mean() ** 2
    return float(np.clip(1.0 / cv2, 0.05, 20.0)) if cv2 > 0 else 20.0


def trace_lengths(values: Array, label: str) -> Any:
    """The trace's lengths as a ``gpucap.queueing.lengths.Lengths`` histogram (exact mean)."""
    from gpucap.queueing.lengths import Lengths

    lo, hi = float(values.min()), float(values.max())
    if hi == lo:
        return Lengths.fixed(lo, label)
    counts, edges = np.histogram(values, bins=min(50, max(2, int(np.sqrt(values.size)))))
    return Lengths.histogram(edges.tolist(), counts.tolist(), label)
