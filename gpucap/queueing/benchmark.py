"""The load-test layer of the step-level simulation: send a load's prompts to the engine, and turn
what the engine did into what ``vllm bench serve`` reports.

``run_load`` sends prompts as a ``gpucap.queueing.loads.Load`` does (all at once, closed loop, open
loop) and steps a ``gpucap.queueing.engine.Engine`` until all have finished; ``extend`` stretches a
shortened all-at-once run to all its prompts; ``summary`` makes the ``BenchmarkRun`` with the
statistics of ``gpucap.queueing.benchstats``. ``gpucap.queueing.simulate.run_benchmark`` puts them
together (DESIGN.md section 8, the step-level simulation).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpucap.queueing.benchstats import stats, weighted_stats
from gpucap.queueing.engine import Engine, EngineTrace
from gpucap.queueing.loads import Load, open_loop_sends

Array = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]


@dataclass(frozen=True)
class BenchmarkRun:
    """One simulated load-test run and its statistics as ``vllm bench serve`` reports them.

    ``stats[metric][stat]`` in seconds for metric in ``ttft``, ``tpot``, ``itl``, ``e2el`` and stat
    in ``gpucap.types.STATISTICS``; per-request arrays in send order."""

    load: Load
    ttft_s: Array
    tpot_s: Array
    e2e_s: Array
    input_len: Ints
    output_len: Ints
    stats: dict[str, dict[str, float]]
    duration_s: float
    output_tokens_per_s: float
    requests_per_s: float
    steps: int
    preemptions: int
    mean_running: float
    simulated_prompts: int  # fewer than load.num_prompts when an all-at-once run was extended


def run_load(engine: Engine, load: Load, rng: np.random.Generator, num: int) -> None:
    """Send ``num`` prompts as ``load`` does and run the engine until all have finished."""
    if load.mode == "all-at-once":
        for j in range(num):
            engine.send(j, 0.0)
        next_send = num
    elif load.mode == "open-loop":
        for j, t in enumerate(open_loop_sends(load, rng)[:num]):
            engine.send(j, float(t))
        next_send = num
    else:
        assert load.concurrency is not None
        next_send = min(load.concurrency, num)
        for j in range(next_send):
            engine.send(j, 0.0)
    finished = 0
    while finished < num:
        if not engine.step():
            t_next = engine.next_ready()
            if not np.isfinite(t_next):
                raise RuntimeError("the simulation stalled with requests unfinished")
            engine.idle_until(t_next)
            continue
        finished += len(engine.finished)
        if load.mode == "closed-loop":
            for _ in engine.finished:
                if next_send < num:
                    engine.send(next_send, engine.t)
                    next_send += 1


def slots_estimate(engine: Engine, inp: Ints, out: Ints) -> int:
    """Requests the engine runs at once when prompts queue: batch slots or the KV cache."""
    return int(max(1, min(engine.slots, engine.cap // max(float(np.mean(inp + out)), 1.0))))


def _tokens_per_s(trace: EngineTrace, start: float, end: float) -> float:
    """Output tokens streamed per second between ``start`` and ``end``, each request's tokens taken
    as spread evenly between its first token and its finish."""
    life = np.maximum(trace.finish - trace.first, 1e-12)
    overlap = np.clip(np.minimum(trace.finish, end) - np.maximum(trace.first, start), 0.0, None)
    inside = np.where(trace.out > 1, trace.out * overlap / life, 0.0)
    return float(inside.sum() / (end - start)) if end > start else float("nan")


def extend(trace: EngineTrace, inp: Ints, out: Ints, slots: int) -> EngineTrace:
    """An all-at-once run of all ``inp.size`` prompts from a simulated one of the first m
    (``gpucap.queueing.simulate`` docstring, Speed). Between the first and the last batch turnover (W = ``slots`` requests) the engine
    streams tokens at a steady rate r; the prompts not simulated (their own drawn lengths) enter
    before the last W, taking their first tokens one every ``mean O / r`` seconds, with the TPOT
    of the simulated middle (none ending after the simulated drain); the last W come later by as
    many of those intervals as there are prompts not simulated."""
    m, n = trace.send.size, inp.size
    w = min(max(slots, 1), m // 4)
    if n <= m or w < 1:
        return trace
    order = np.sort(trace.first)
    lo, hi = w, m - w
    rate = _tokens_per_s(trace, float(order[lo]), float(order[hi])) / float(np.mean(out))  # requests/s
    extra_out = out[m:]
    first_extra = float(order[hi]) + (np.arange(extra_out.size) + 1.0) / rate
    tpot_mid = ((trace.finish - trace.first) / np.maximum(trace.out - 1, 1))[lo:hi]
    tpot_extra = np.resize(tpot_mid[np.isfinite(tpot_mid)], extra_out.size)
    shift = extra_out.size / rate
    # none outlasts the simulated drain: near the end the batch empties and steps shorten
    end = float(trace.finish.max()) + shift
    finish_extra = np.minimum(first_extra + np.maximum(extra_out - 1, 0) * tpot_extra, end)
    late = trace.first >= order[hi]
    first = np.concatenate([np.where(late, trace.first + shift, trace.first), first_extra])
    finish = np.concatenate([np.where(late, trace.finish + shift, trace.finish), finish_extra])
    scale = n / m
    return EngineTrace(
        send=np.zeros(n),
        first=first,
        finish=finish,
        inp=np.concatenate([trace.inp, inp[m:]]),
        out=np.concatenate([trace.out, extra_out]),
        itl_values=trace.itl_values,
        itl_counts=trace.itl_counts * scale,
        steps=int(round(trace.steps * scale)),
        preemptions=int(round(trace.preemptions * scale)),
        busy_s=trace.busy_s * scale,
    )


def summary(load: Load, trace: EngineTrace, simulated: int, skip: int = 0) -> BenchmarkRun:
    """The statistics of a run as ``vllm bench serve`` reports them, leaving out the first ``skip``
    requests (throughput then counts from the first kept request's send); ``simulated``: prompts
    simulated."""
    if skip:
        trace = dataclasses.replace(
            trace,
            send=trace.send[skip:],
            first=trace.first[skip:],
            finish=trace.finish[skip:],
            inp=trace.inp[skip:],
            out=trace.out[skip:],
        )
    ttft = trace.first - trace.send
    e2e = trace.finish - trace.send
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(trace.out > 1, (trace.finish - trace.first) / (trace.out - 1), np.nan)
    duration = float(np.max(trace.finish) - (np.min(trace.send) if skip else 0.0))
    all_stats = {
        "ttft": stats(ttft),
        "tpot": stats(tpot),
        "itl": weighted_stats(trace.itl_values, trace.itl_counts),
        "e2el": stats(e2e),
    }
    return BenchmarkRun(
        load=load,
        ttft_s=ttft,
        tpot_s=tpot,
        e2e_s=e2e,
        input_len=trace.inp,
        output_len=trace.out,
        stats=all_stats,
        duration_s=duration,
        output_tokens_per_s=float(trace.out.sum()) / duration,
        requests_per_s=trace.out.size / duration,
        steps=trace.steps,
        preemptions=trace.preemptions,
        mean_running=trace.busy_s / duration if duration > 0 else 0.0,
        simulated_prompts=simulated,
    )
