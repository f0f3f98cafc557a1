"""Step-level simulation of one replica serving a load test: the engine loop that latency under
load comes from (DESIGN.md section 8).

The benchmark (``gpucap.queueing.loads.Load``) sends requests: all at once, at a fixed concurrency
(closed loop) or at random times (open loop). Each passes the HTTP server
(``gpucap.queueing.frontend.SharedServer``: ``t_request_s`` of one shared core, then ``t_frontend_s`` of
latency; nothing for offline runs) and waits for the engine. The engine runs steps; what goes
into a step is the engine's scheduler policy (``gpucap.queueing.scheduler``):

1. running requests: each decoding request takes one token of the step's budget
   (``max_num_batched_tokens``), each unfinished prompt its next chunk (vLLM, TensorRT-LLM); under
   SGLang's prefill-first policy a step that carries prompt chunks runs no decodes;
2. waiting requests, first come first served, while budget, batch slots (``max_running``) and
   KV cache (``kv_capacity_tokens``, in blocks of ``block_size``) last: vLLM admits a request
   with room for its first chunk, SGLang with room for its prompt and 0.7 of its output,
   TensorRT-LLM with room for all of it;
3. when a running request cannot grow, the last admitted is preempted and later recomputed
   (vLLM, SGLang);
4. the step lasts ``step_time(step_work(...))`` of exactly that composition (decode tokens and
   their mean context, prompt tokens and their causal pairs ``P(p + c) - P(p)`` for a chunk of c
   after p, ``P = prefill_pairs_per_layer``), the host's per-step time added or overlapped.

A request's first token is streamed at the end of the step that completes its prompt, each later
token at the end of each step that decodes it. The run's statistics are those of
``vllm bench serve`` (``gpucap.queueing.benchstats``). Closed loop: a request that finishes is replaced at
once by the next prompt.

Lengths: each request draws its input and output length from ``gpucap.queueing.lengths.Lengths``
(``Lengths.draw``: stratified, so a run of N requests has the distribution's mean).

Speed: a Python loop over steps, numpy within a step; step times at contexts and attention pairs
rounded to 1/512 in log, 128 neighbouring contexts per vectorized call, cached
(``gpucap.queueing.stepclock``); runs of decode-only steps up to the next event advanced in one go. An
all-at-once run of N prompts with N larger than ``AT_ONCE_SIMULATED`` x the batch slots is simulated
with that many prompts and extended: in its middle, where the queue feeds one request per finished
one, the engine streams tokens at a steady rate, and the prompts not simulated take their turn at
that rate (``gpucap.queueing.benchmark.extend``).

Where the parts are: this module holds the entry points (``run_benchmark``, ``simulate``, ``replay``)
and the KV-cache capacity; ``gpucap.queueing.engine`` the engine and its steps (1-4 above);
``gpucap.queueing.benchmark`` the load modes and the run's statistics.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpucap.config import Hardware
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.memory import charged_tokens_per_layer
from gpucap.queueing.analytic import check_burstiness, summarize
from gpucap.queueing.benchmark import BenchmarkRun, extend, run_load, slots_estimate, summary
from gpucap.queueing.engine import Engine, Requests
from gpucap.queueing.lengths import Lengths
from gpucap.queueing.loads import Load, gamma_gaps
from gpucap.queueing.scheduler import Policy, policy_for

Array = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]

AT_ONCE_SIMULATED = 4  # all-at-once runs: prompts simulated, in batch-slot turnovers
AT_ONCE_MIN_PROMPTS = 512  # ... but never fewer than this


def kv_capacity_tokens(hw: Hardware, context_tokens: float) -> float:
    """Tokens of context the replica's KV cache holds for requests of ``context_tokens`` (a
    sliding-window layer holds only its window, so a request is charged ``context x held /
    context`` of the full-attention budget; a hybrid's state adds to what it holds:
    ``gpucap.physics.memory.charged_tokens_per_layer``)."""
    from gpucap.physics.memory import hardware_memory

    mem = hardware_memory(hw)
    if not mem.fits:
        raise ValueError(f"{hw.spec.name} leaves no KV cache on {hw.gpu.key} at this split")
    full = hw.layout.attn_dp * mem.kv_budget / mem.kv_bytes_per_token_per_gpu
    held = float(charged_tokens_per_layer(hw.spec, hw.layout, hw.kv_dtype, context_tokens, hw.engine.engine))
    return float(full * context_tokens / max(held, 1.0))


def engine_slots(hw: Hardware, kv_capacity: float) -> float:
    """The batch slots of the engine loop: ``max_num_seqs``, and never more requests than the
    cache has blocks (each running request holds at least one). The KV cache itself is the
    scheduler policy's to manage, as the engine does: vLLM admits a request while the blocks of
    its first chunk are free and preempts the last admitted when running requests outgrow the
    cache; SGLang and TensorRT-LLM reserve at admission (``gpucap.queueing.scheduler``). Capping
    the slots at what the cache holds at the mean request length, as the closed forms do, would
    hide the overfilled cache and its preemptions of an all-at-once run (measured on vLLM 0.32's
    CPU server: 64 prompts of 512-1536 tokens into a 160-block cache, 14 preemptions;
    benchmarks/README.md)."""
    block = float(hw.engine.block_size or 1)
    blocks = kv_capacity // block if np.isfinite(kv_capacity) else np.inf
    return float(max(1.0, min(float(hw.engine.max_num_seqs or np.inf), blocks)))


def _lengths(value: Lengths | float, name: str) -> Lengths:
    """``value`` as a ``Lengths`` distribution (a token count: that length for every request)."""
    if isinstance(value, Lengths):
        return value
    v = float(value)
    if not (np.isfinite(v) and v >= 1):
        raise ValueError(f"{name} must be a token count >= 1 or a Lengths distribution, got {value!r}")
    return Lengths.fixed(v, name)


def _engine(
    hw: Hardware,
    coef: Coefficients,
    reqs: Requests,
    *,
    policy: Policy | None,
    max_running: float | None,
    kv_capacity: float | None,
    context_tokens: float,
) -> Engine:
    """The engine for ``reqs``: its policy (default the engine's), batch slots (default
    ``engine_slots``) and KV cache (default ``kv_capacity_tokens`` at ``context_tokens`` a
    request), checked to hold the longest request."""
    cap = kv_capacity_tokens(hw, context_tokens) if kv_capacity is None else float(kv_capacity)
    if not cap > 0:
        raise ValueError(f"kv_capacity_tokens must be positive, got {kv_capacity!r}")
    assert reqs.shared is not None
    longest = int((reqs.inp + reqs.out - reqs.shared).max())
    if longest > cap:
        raise ValueError(f"the KV cache ({cap:.0f} tokens) holds less than one request of {longest} tokens")
    slots = engine_slots(hw, cap) if max_running is None else float(max_running)
    if not slots >= 1:
        raise ValueError(f"max_running must be >= 1, got {max_running!r}")
    return Engine(
        hw,
        coef,
        policy or policy_for(hw.engine.engine),
        reqs,
        max_running=slots,
        kv_capacity_tokens=cap,
        budget_tokens=int(hw.engine.max_num_batched_tokens or 8192),
        block_size=int(hw.engine.block_size or 1),
    )


def run_benchmark(
    hw: Hardware,
    coef: Coefficients,
    load: Load,
    *,
    input_len: Lengths | float,
    output_len: Lengths | float,
    max_running: float | None = None,
    kv_capacity_tokens: float | None = None,
    policy: Policy | None = None,
    seed: int | np.random.Generator = 0,
    skip_first: int = 0,
) -> BenchmarkRun:
    """Simulate one load-test run of ``load`` against one replica (module docstring).

    ``input_len`` / ``output_len``: a token count (fixed) or a ``Lengths`` distribution.
    ``max_running``: batch slots (default: ``max_num_seqs`` or what the KV cache holds at the mean
    request length); ``kv_capacity_tokens``: default from the replica's memory; ``policy``:
    default the engine's (``gpucap.queueing.scheduler.policy_for``). ``skip_first``: requests left out of
    the statistics, as a steady state without the run's start (the first requests of a closed
    loop all start at once); throughput then counts from the first kept request's send.
    """
    if not 0 <= skip_first < load.num_prompts:
        raise ValueError(f"skip_first must be in [0, num_prompts={load.num_prompts}), got {skip_first!r}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    li, lo = _lengths(input_len, "input_len"), _lengths(output_len, "output_len")
    n = load.num_prompts
    inp = li.draw(n, rng).astype(np.int64)
    out = lo.draw(n, rng).astype(np.int64)
    context = float(li.mean + lo.mean)
    reqs = Requests(inp, out)
    engine = _engine(
        hw, coef, reqs, policy=policy, max_running=max_running, kv_capacity=kv_capacity_tokens, context_tokens=context
    )
    num = n
    if load.mode == "all-at-once":
        slots = slots_estimate(engine, inp, out)
        num = min(n, max(AT_ONCE_MIN_PROMPTS, AT_ONCE_SIMULATED * slots))
        # all n pass the server's shared core together and leave at n x t_request: the prompts
        # simulated leave at the same time if each carries n / num of the work
        engine.server.work_s *= n / num
    run_load(engine, load, rng, num)
    trace = engine.trace(slice(0, num))
    if num < n:
        trace = extend(trace, inp, out, slots_estimate(engine, inp, out))
    return summary(load, trace, num, skip_first)


# ---- open-loop steady state (the planner's check of the queueing model) ---------------------


@dataclass(frozen=True)
class Simulation:
    """Per-request times of one simulated open-loop run (recorded requests after warm-up) and
    their summary. ``summary[name][stat]`` for name in ``ttft_s``, ``tpot_s``, ``e2e_s`` and stat in
    ``gpucap.types.STATISTICS``. TPOT is ``(finish - first token) / (output - 1)``; requests of one
    output token have none."""

    request_rate: float
    burstiness: float
    arrival_s: Array
    ttft_s: Array
    tpot_s: Array
    e2e_s: Array
    summary: dict[str, dict[str, float]]
    steps: int
    duration_s: float
    mean_running: float  # time average of requests holding a batch slot
    preemptions: int


def arrival_times(
    rng: np.random.Generator, *, count: int, request_rate: float, burstiness: float, start_s: float = 0.0
) -> Array:
    """``count`` arrival instants after ``start_s``: gamma gaps with shape k = burstiness and scale
    1 / (k lambda) (``gpucap.queueing.loads.gamma_gaps``)."""
    return start_s + np.cumsum(gamma_gaps(rng, count, request_rate, burstiness))


def _per_request(value: float | Array, count: int, name: str) -> Ints:
    """``value`` as ``count`` whole token counts >= 1 (one number: the same for all)."""
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 0:
        arr = np.full(count, float(arr))
    if arr.shape != (count,):
        raise ValueError(f"{name} must be a number or an array of num_requests={count} lengths, got shape {arr.shape}")
    if not np.all(np.isfinite(arr) & (arr >= 1)):
        raise ValueError(f"{name} must be whole token counts >= 1, got min {arr.min()!r}")
    return np.round(arr).astype(np.int64)


def _run_open_loop(
    engine: Engine,
    rng: np.random.Generator,
    base: tuple[Ints, Ints, Ints, Ints],
    *,
    request_rate: float,
    burstiness: float,
) -> Array:
    """Send the recorded requests (``base``: their input, output, cached and shared lengths) at
    gamma-gap arrivals, and more after them with the same lengths in turn, and run the engine until
    every recorded request has finished. Returns the arrival times of all requests sent."""
    reqs = engine.r
    inp, out, cached, shared = base
    n = inp.size
    arrival = arrival_times(rng, count=n, request_rate=request_rate, burstiness=burstiness)
    for j, t in enumerate(arrival):
        engine.send(j, float(t))
    while np.isnan(reqs.finish[:n]).any():
        if engine.t >= arrival[-1] - 1e-12 or engine.next_ready() == np.inf:
            start = reqs.inp.size
            more = arrival_times(rng, count=n, request_rate=request_rate, burstiness=burstiness, start_s=arrival[-1])
            reqs.grow(inp.copy(), out.copy(), cached.copy(), shared.copy())
            for j, t in enumerate(more):
                engine.send(start + j, float(t))
            arrival = np.concatenate([arrival, more])
        if not engine.step():
            engine.idle_until(engine.next_ready())
    return arrival


def simulate(
    hw: Hardware,
    coef: Coefficients,
    *,
    request_rate: float,
    num_requests: int,
    input_len: float | Array,
    output_len: float | Array,
    max_running: float,
    kv_capacity_tokens: float = np.inf,
    max_num_batched_tokens: int | None = None,
    burstiness: float = 1.0,
    seed: int | np.random.Generator = 0,
    warmup_fraction: float = 0.2,
    cached_tokens: float | Array = 0.0,
    shared_tokens: float = 0.0,
) -> Simulation:
    """Open-loop steady state: ``num_requests`` recorded requests arriving at ``request_rate``
    (gamma gaps of shape ``burstiness``; 1 is Poisson) through the same engine loop as
    ``run_benchmark``. Arrivals go on past the recorded requests until every recorded request has
    finished, so the last ones see the same load as the rest; the first ``warmup_fraction`` are left
    out of the statistics. ``input_len`` / ``output_len``: one length, or one per recorded request
    (later arrivals reuse them in turn). ``cached_tokens``: prompt tokens each request finds in the
    prefix cache (their prefill skipped); ``shared_tokens`` of them, a prefix every request shares,
    hold their KV once: the cache's room for requests is ``kv_capacity_tokens - shared_tokens``."""
    if not (np.isfinite(request_rate) and request_rate > 0):
        raise ValueError(f"request_rate must be a positive number of requests/s, got {request_rate!r}")
    if int(num_requests) < 1:
        raise ValueError(f"num_requests must be >= 1, got {num_requests!r}")
    if not 0 <= warmup_fraction < 1:
        raise ValueError(f"warmup_fraction must be in [0, 1), got {warmup_fraction!r}")
    if not max_running >= 1:
        raise ValueError(f"max_running must be >= 1, got {max_running!r}")
    if not kv_capacity_tokens > 0:
        raise ValueError(f"kv_capacity_tokens must be positive, got {kv_capacity_tokens!r}")
    check_burstiness(burstiness)
    n = int(num_requests)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    base_in, base_out = _per_request(input_len, n, "input_len"), _per_request(output_len, n, "output_len")
    base_cached = np.round(np.broadcast_to(np.asarray(cached_tokens, dtype=float), (n,))).astype(np.int64)
    shared = int(round(float(shared_tokens)))
    if np.any(base_cached < shared) or np.any(base_cached > base_in) or shared < 0:
        raise ValueError("cached_tokens must lie between shared_tokens and each prompt's input_len")
    base_shared = np.full(n, shared, np.int64)
    kv_capacity_tokens = kv_capacity_tokens - shared
    if (base_in + base_out - shared).max() > kv_capacity_tokens:
        raise ValueError(
            f"kv_capacity_tokens={kv_capacity_tokens:g} holds less than one request of {(base_in + base_out).max()} tokens"
        )
    if max_num_batched_tokens is not None:
        hw = dataclasses.replace(
            hw, engine=dataclasses.replace(hw.engine, max_num_batched_tokens=max_num_batched_tokens)
        )
    reqs = Requests(base_in.copy(), base_out.copy(), base_cached.copy(), base_shared.copy())
    engine = _engine(
        hw,
        coef,
        reqs,
        policy=None,
        max_running=max_running,
        kv_capacity=kv_capacity_tokens,
        context_tokens=float(np.mean(base_in + base_out)),
    )
    base = (base_in, base_out, base_cached, base_shared)
    arrival = _run_open_loop(engine, rng, base, request_rate=request_rate, burstiness=burstiness)
    keep = np.arange(int(np.floor(warmup_fraction * n)), n)
    ttft = reqs.first[keep] - arrival[keep]
    e2e = reqs.finish[keep] - arrival[keep]
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(reqs.out[keep] > 1, (reqs.finish[keep] - reqs.first[keep]) / (reqs.out[keep] - 1), np.nan)
    return Simulation(
        request_rate=float(request_rate),
        burstiness=float(burstiness),
        arrival_s=arrival[keep],
        ttft_s=ttft,
        tpot_s=tpot,
        e2e_s=e2e,
        summary={"ttft_s": summarize(ttft), "tpot_s": summarize(tpot), "e2e_s": summarize(e2e)},
        steps=engine.steps,
        duration_s=engine.t,
        mean_running=engine.busy / engine.t if engine.t > 0 else 0.0,
        preemptions=engine.preemptions,
    )


GIVE_UP_CHECK_STEPS = 500  # how often replay counts the requests already late


def replay(
    hw: Hardware,
    coef: Coefficients,
    *,
    arrival_s: Array,
    input_len: Array,
    output_len: Array,
    max_running: float,
    kv_capacity_tokens: float,
    give_up: tuple[float, int] | None = None,
    context_tokens: float | None = None,
    judged_from: int = 0,
) -> tuple[Array, Array]:
    """One replica serving a recorded trace: requests arrive at ``arrival_s`` (sorted, seconds)
    with their own lengths, through the engine loop of ``simulate``. Returns each request's TTFT
    and TPOT (NaN for one-token answers), in the trace's order. ``context_tokens``: the mean
    context the engine's step model takes (None: the mean prompt + output of these requests; a
    piece of a longer trace passes the whole trace's).

    ``give_up = (ttft_s, count)``: stop as soon as more than ``count`` requests are sure to wait
    longer than ``ttft_s`` for their first token (no first token by arrival + ttft_s), and return
    NaN TTFTs and TPOTs: a percentile SLO that allows ``count`` late requests is already missed.
    Only requests from position ``judged_from`` on count (those before warm the engine up)."""
    n = int(np.asarray(arrival_s).size)
    if n == 0:
        return np.zeros(0), np.zeros(0)
    inp, out = _per_request(input_len, n, "input_len"), _per_request(output_len, n, "output_len")
    reqs = Requests(inp.copy(), out.copy())
    context = float(np.mean(inp + out)) if context_tokens is None else float(context_tokens)
    engine = _engine(hw, coef, reqs, policy=None, max_running=max_running, kv_capacity=kv_capacity_tokens,
                     context_tokens=context)  # fmt: skip
    arrival = np.asarray(arrival_s, dtype=float)
    for j, t in enumerate(arrival):
        engine.send(j, float(t))
    steps = 0
    while np.isnan(reqs.finish).any():
        if not engine.step():
            nxt = engine.next_ready()
            if nxt == np.inf:
                raise ValueError("the replica cannot finish the trace (a request the KV cache cannot hold)")
            engine.idle_until(nxt)
        steps += 1
        if give_up is not None and steps % GIVE_UP_CHECK_STEPS == 0:
            slo, count = give_up
            due = arrival[judged_from:] + slo < engine.t
            first = reqs.first[judged_from:]
            late = due & (np.isnan(first) | (first - arrival[judged_from:] > slo))
            if int(np.count_nonzero(late)) > count:
                return np.full(n, np.nan), np.full(n, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(reqs.out > 1, (reqs.finish - reqs.first) / (reqs.out - 1), np.nan)
    return reqs.first - arrival, tpot


__all__ = [
    "BenchmarkRun",
    "Simulation",
    "arrival_times",
    "replay",
    "run_benchmark",
    "simulate",
]
