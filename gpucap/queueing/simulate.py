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
rounded to 1/512 in log, 128 neighbouring contexts per vectorized call, cached; runs of
decode-only steps up to the next event advanced in one go. An all-at-once run of N prompts with
N larger than ``AT_ONCE_SIMULATED`` x the batch slots is simulated with that many prompts and
extended: in its middle, where the queue feeds one request per finished one, the engine streams
tokens at a steady rate, and the prompts not simulated take their turn at that rate (``_extend``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpucap.config import Hardware
from gpucap.physics.coefficients import Coefficients, front_end
from gpucap.physics.memory import charged_tokens_per_layer
from gpucap.physics.step import prefill_pairs_per_layer, step_time, step_work
from gpucap.queueing.analytic import check_burstiness, summarize
from gpucap.queueing.benchstats import BENCH_STATS, stats, weighted_stats
from gpucap.queueing.frontend import SharedServer
from gpucap.queueing.lengths import Lengths
from gpucap.queueing.loads import Load, gamma_gaps, open_loop_sends
from gpucap.queueing.scheduler import Policy, policy_for
from gpucap.types import STATISTICS

Array = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]

LOG_QUANTUM = 512.0  # context and pair counts rounded to exp(k / 512): relative step < 0.2%
NO_KEY = -(1 << 40)  # rounded log of zero
CONTEXT_BLOCK = 128  # neighbouring contexts evaluated together
RUN_STEPS = 512  # most decode-only steps evaluated in one vectorized call
EXACT_COUNT = 64  # decode sequences and prompt tokens up to this are never rounded
AT_ONCE_SIMULATED = 4  # all-at-once runs: prompts simulated, in batch-slot turnovers
AT_ONCE_MIN_PROMPTS = 512  # ... but never fewer than this


class _StepClock:
    """Seconds of a step of a given composition, at its counts rounded in log.

    Decode sequences and prompt tokens above ``EXACT_COUNT``, contexts and attention pairs are
    rounded to ``exp(k / LOG_QUANTUM)`` (a relative error below 0.1% on each; a step's time is
    close to linear in them), so that the many steps of a long run share cached values. Runs of
    decode-only steps are evaluated in blocks of ``CONTEXT_BLOCK`` neighbouring contexts (one
    vectorized call)."""

    def __init__(self, hw: Hardware, coef: Coefficients) -> None:
        self.hw, self.coef = hw, coef
        self.blocks: dict[tuple[int, int], Array] = {}
        self.single: dict[tuple[int, int, int, int], float] = {}
        self.pairs_cache: dict[int, float] = {}

    @staticmethod
    def _key(x: float) -> int:
        return int(round(math.log(x) * LOG_QUANTUM)) if x > 0 else NO_KEY

    @staticmethod
    def _count_key(n: int) -> int:
        """Whole counts up to EXACT_COUNT as they are (negative keys), larger ones in log."""
        return -n - 1 if n <= EXACT_COUNT else int(round(math.log(n) * LOG_QUANTUM))

    @staticmethod
    def _count(key: int) -> float:
        return float(-key - 1) if key < 0 else math.exp(key / LOG_QUANTUM)

    @staticmethod
    def _value(k: Array) -> Array:
        return np.where(k > NO_KEY, np.exp(k / LOG_QUANTUM), 0.0)

    def _seconds(self, decode: float, context: Array | float, prefill: float, pairs: float) -> Array:
        work = step_work(
            self.hw, decode_tokens=decode, decode_context=context, prefill_tokens=prefill, prefill_pairs=pairs
        )
        return np.asarray(step_time(self.hw, work, self.coef).total_s, dtype=float)

    def _block(self, decode_key: int, block: int) -> Array:
        key = (decode_key, block)
        if key not in self.blocks:
            ks = block * CONTEXT_BLOCK + np.arange(CONTEXT_BLOCK, dtype=float)
            self.blocks[key] = self._seconds(self._count(decode_key), self._value(ks), 0.0, 0.0)
        return self.blocks[key]

    def one(self, decode: int, context: float, prefill: int, pairs: float) -> float:
        kd = self._count_key(decode)
        kc = self._key(context) if decode else NO_KEY
        if not prefill:
            block, offset = divmod(kc, CONTEXT_BLOCK)
            return float(self._block(kd, block)[offset])
        key = (kd, kc, self._count_key(prefill), self._key(pairs))
        if key not in self.single:
            ctx = math.exp(kc / LOG_QUANTUM) if decode else 0.0
            self.single[key] = float(
                self._seconds(
                    self._count(kd), ctx, self._count(key[2]), math.exp(key[3] / LOG_QUANTUM) if pairs > 0 else 0.0
                )
            )
        return self.single[key]

    def decode_run(self, decode: int, context: float, steps: int) -> Array:
        """Durations of ``steps`` decode-only steps; every context grows by one token a step."""
        keys = np.round(np.log(context + np.arange(steps)) * LOG_QUANTUM).astype(np.int64)
        blocks, offsets = np.divmod(keys, CONTEXT_BLOCK)
        kd = self._count_key(decode)
        out = np.empty(steps)
        for b in range(int(blocks[0]), int(blocks[-1]) + 1):
            sel = blocks == b
            out[sel] = self._block(kd, b)[offsets[sel]]
        return out

    def pairs(self, prompt_tokens: Ints) -> Array:
        """``prefill_pairs_per_layer`` of whole-token prompt prefixes, memoized."""
        out = np.empty(prompt_tokens.size)
        for j, p in enumerate(prompt_tokens.tolist()):
            if p not in self.pairs_cache:
                self.pairs_cache[p] = float(prefill_pairs_per_layer(self.hw.spec, float(p)))
            out[j] = self.pairs_cache[p]
        return out


def fcfs_chunks(need: Ints, budget: int) -> Ints:
    """Prompt tokens each request gets from a step's token budget, first come first served:
    ``min(need_j, max(0, budget - sum_{i<j} need_i))``."""
    return np.clip(budget - (np.cumsum(need) - need), 0, need)


def _leading(ok: Bools) -> int:
    """How many entries from the start are True."""
    return ok.size if ok.all() else int(np.argmin(ok))


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
    held = float(charged_tokens_per_layer(hw.spec, hw.layout, hw.kv_dtype, context_tokens))
    return float(full * context_tokens / max(held, 1.0))


@dataclass
class _Requests:
    """Per-request state, grown as more requests are sent (index = send order)."""

    inp: Ints
    out: Ints
    cached: Ints | None = None  # prompt tokens in the prefix cache: their prefill is skipped
    shared: Ints | None = None  # of those, tokens whose KV blocks one copy serves every request
    send: Array = field(init=False)
    target: Ints = field(init=False)  # tokens to prefill: the prompt, or all tokens after preemption
    done: Ints = field(init=False)  # of those, prefilled
    gen: Ints = field(init=False)  # output tokens streamed
    kv: Ints = field(init=False)  # tokens with KV in the cache
    first: Array = field(init=False)
    finish: Array = field(init=False)
    last: Array = field(init=False)  # time of the last streamed token

    def __post_init__(self) -> None:
        n = self.inp.size
        self.cached = np.zeros(n, np.int64) if self.cached is None else self.cached
        self.shared = np.zeros(n, np.int64) if self.shared is None else self.shared
        self.send = np.full(n, np.inf)
        self.target = self.inp.copy()
        self.done = self.cached.copy()  # a prefix-cache hit starts past its cached tokens
        self.gen = np.zeros(n, np.int64)
        self.kv = self.cached - self.shared  # its own KV; the shared prefix is counted once
        self.first = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.last = np.full(n, np.nan)

    def grow(self, inp: Ints, out: Ints, cached: Ints | None = None, shared: Ints | None = None) -> None:
        k = inp.size
        cached = np.zeros(k, np.int64) if cached is None else cached
        shared = np.zeros(k, np.int64) if shared is None else shared
        assert self.cached is not None and self.shared is not None
        self.inp, self.out = np.concatenate([self.inp, inp]), np.concatenate([self.out, out])
        self.cached, self.shared = np.concatenate([self.cached, cached]), np.concatenate([self.shared, shared])
        self.send = np.concatenate([self.send, np.full(k, np.inf)])
        self.target = np.concatenate([self.target, inp])
        self.done = np.concatenate([self.done, cached])
        self.gen = np.concatenate([self.gen, np.zeros(k, np.int64)])
        self.kv = np.concatenate([self.kv, cached - shared])
        for name in ("first", "finish", "last"):
            setattr(self, name, np.concatenate([getattr(self, name), np.full(k, np.nan)]))


@dataclass
class EngineTrace:
    """What the engine loop produced: per-request times, the pooled inter-token gaps as
    (value, count) pairs, and counters."""

    send: Array
    first: Array
    finish: Array
    inp: Ints
    out: Ints
    itl_values: Array
    itl_counts: Array
    steps: int
    preemptions: int
    busy_s: float  # integral of the running count over time


class _Engine:
    """The engine loop (module docstring) over requests sent by a load."""

    def __init__(
        self,
        hw: Hardware,
        coef: Coefficients,
        policy: Policy,
        reqs: _Requests,
        *,
        max_running: float,
        kv_capacity_tokens: float,
        budget_tokens: int,
        block_size: int,
    ) -> None:
        self.hw, self.coef, self.policy, self.r = hw, coef, policy, reqs
        fe = front_end(hw.engine, coef)
        self.server = SharedServer(fe.serial_s, fe.latency_s)
        self.clock = _StepClock(hw, coef)
        self.budget = int(budget_tokens)
        self.slots = min(int(np.floor(max_running)) if np.isfinite(max_running) else 1 << 30, self.budget)
        self.cap = float(kv_capacity_tokens)
        self.block = max(int(block_size), 1)
        self.t = 0.0
        self.running = np.zeros(0, np.int64)
        self.ready_ids: list[int] = []  # left the server, in order, not yet admitted (FCFS)
        self.ready_at: list[float] = []
        self.head = 0  # first entry of ready_ids not yet admitted
        self.resumed: list[int] = []  # preempted requests, served before new ones
        self.itl_values: list[float] = []
        self.itl_counts: list[float] = []
        self.steps = self.preemptions = 0
        self.busy = 0.0

    # ---- requests in -----------------------------------------------------------------------
    def send(self, job: int, t: float) -> None:
        self.r.send[job] = t
        self.server.add(job, t)

    def _collect(self) -> None:
        self.server.advance(self.t)
        for job, at in self.server.take():
            self.ready_ids.append(job)
            self.ready_at.append(at)

    def next_ready(self) -> float:
        """When the next request not yet admitted is (or will be) ready for the engine."""
        if self.head < len(self.ready_ids):
            return self.ready_at[self.head]
        return self.server.next_ready()

    def _waiting(self, limit: int) -> Ints:
        """Up to ``limit`` requests ready by now, preempted ones first."""
        new: list[int] = []
        k = self.head
        while k < len(self.ready_ids) and len(new) + len(self.resumed) < limit and self.ready_at[k] <= self.t:
            new.append(self.ready_ids[k])
            k += 1
        return np.asarray((self.resumed + new)[:limit], dtype=np.int64)

    def _admitted(self, ids: Ints) -> None:
        n_res = min(ids.size, len(self.resumed))
        del self.resumed[:n_res]
        self.head += ids.size - n_res

    # ---- KV cache ----------------------------------------------------------------------------
    def _blocks(self, tokens: Ints) -> Ints:
        b = self.block
        return -(-tokens // b) * b

    def _committed(self, ids: Ints) -> Ints:
        """KV tokens a request counts against admission: what it holds, or, where the policy
        reserves at admission, its prompt and its reserved share of output if more."""
        r, p = self.r, self.policy
        if not p.admit_whole_prompt:
            return self._blocks(r.kv[ids])
        assert r.shared is not None
        reserve = r.inp[ids] - r.shared[ids] + np.ceil(p.reserve_output * r.out[ids]).astype(np.int64)
        return self._blocks(np.maximum(r.kv[ids], np.maximum(reserve, r.target[ids] - r.shared[ids])))

    # ---- one step ----------------------------------------------------------------------------
    def step(self) -> bool:
        """Schedule and run one step (or a run of decode-only steps); False when there is nothing
        to run now (the caller waits for the next request)."""
        r, pol = self.r, self.policy
        self.finished: list[int] = []
        self._collect()
        run = self.running
        left = r.target[run] - r.done[run]
        dec = left == 0
        preempted = False
        # running requests grow by a token or a chunk; preempt the last admitted while the cache
        # overflows (vLLM V1 and SGLang recompute it later; TensorRT-LLM never gets here)
        while pol.preempts and run.size > 1:
            grow = np.where(dec, 1, np.minimum(left, self.budget))
            if self._blocks(r.kv[run] + grow).sum() <= self.cap:
                break
            self._preempt()
            preempted = True
            run, left, dec = self.running, left[:-1], dec[:-1]
        n_dec = int(dec.sum())
        budget = self.budget - (n_dec if pol.decodes_with_prompts else 0)
        pre_ids = run[~dec]
        chunk = fcfs_chunks(left[~dec], budget)
        budget -= int(chunk.sum())
        waiting = len(self.resumed) > 0 or (self.head < len(self.ready_ids) and self.ready_at[self.head] <= self.t)
        if waiting and not preempted and budget > 0 and run.size < self.slots:
            cand = self._waiting(self.slots - run.size)
            given = fcfs_chunks(r.target[cand] - r.done[cand], budget)
            if pol.admit_whole_prompt:
                used = int(self._committed(run).sum()) if run.size else 0
                fits = used + np.cumsum(self._committed(cand)) <= self.cap
            else:
                grow = dec.astype(np.int64)
                grow[~dec] = chunk[: int((~dec).sum())]
                used = int(self._blocks(r.kv[run] + grow).sum()) if run.size else 0
                fits = used + np.cumsum(self._blocks(given)) <= self.cap
            k = _leading(fits & (given > 0))
            if k:
                self._admitted(cand[:k])
                pre_ids = np.concatenate([pre_ids, cand[:k]])
                chunk = np.concatenate([chunk, given[:k]])
                self.running = np.concatenate([run, cand[:k]])
        prefill = int(chunk.sum())
        if prefill and not pol.decodes_with_prompts:  # prefill first: decodes wait
            n_dec = 0
        dec_ids = run[dec] if n_dec else np.zeros(0, np.int64)
        if prefill == 0 and n_dec == 0:
            if self.running.size and not waiting:
                raise ValueError(f"the KV cache ({self.cap:g} tokens) cannot hold the running requests' next tokens")
            return False
        assert r.shared is not None  # a decoding token attends to the shared prefix too
        context = float((r.kv[dec_ids] + r.shared[dec_ids]).mean()) + 1.0 if n_dec else 0.0
        if prefill == 0:
            self._decode_run(dec_ids, context)
        else:
            self._mixed_step(dec_ids, context, pre_ids, chunk)
        self._finish()
        return True

    def _preempt(self) -> None:
        r = self.r
        victim = int(self.running[-1])
        self.running = self.running[:-1]
        assert r.cached is not None and r.shared is not None  # its cached prefix hits again on resume
        r.target[victim] = r.inp[victim] + r.gen[victim]
        r.done[victim], r.kv[victim] = r.cached[victim], r.cached[victim] - r.shared[victim]
        self.resumed.insert(0, victim)
        self.preemptions += 1

    def _record_gaps(self, ids: Ints, t: float, dt: float) -> None:
        """Inter-token gaps of the tokens streamed at ``t`` to ``ids`` (who had streamed before)."""
        gaps = t - self.r.last[ids]
        normal = np.abs(gaps - dt) <= 1e-12 * max(t, 1.0)
        n_normal = int(normal.sum())
        if n_normal:
            self.itl_values.append(dt)
            self.itl_counts.append(n_normal)
        if n_normal < ids.size:
            odd = gaps[~normal]
            self.itl_values.extend(odd.tolist())
            self.itl_counts.extend([1.0] * odd.size)

    def _mixed_step(self, dec_ids: Ints, context: float, pre_ids: Ints, chunk: Ints) -> None:
        r, hw = self.r, self.hw
        start = r.done[pre_ids]
        pairs = float((self.clock.pairs(start + chunk) - self.clock.pairs(start)).sum())
        # each request's chunk rides in one pipeline micro-batch (as in gpucap.physics.batching): the step
        # code spreads a step's tokens over pp micro-batches, so charge pp / (chunks in the step)
        # times the tokens, up to one micro-batch per chunk
        pp = hw.layout.pp
        spread = pp / min(pp, max(pre_ids.size, 1))
        prefill = int(chunk.sum())
        dt = self.clock.one(dec_ids.size, context, int(round(prefill * spread)), pairs * spread)
        t0 = self.t
        self.t = t = t0 + dt
        self.busy += self.running.size * dt
        self.steps += 1
        if dec_ids.size:
            self._record_gaps(dec_ids, t, dt)
            r.gen[dec_ids] += 1
            r.kv[dec_ids] += 1
            r.last[dec_ids] = t
        r.done[pre_ids] += chunk
        r.kv[pre_ids] += chunk
        completed = pre_ids[r.done[pre_ids] == r.target[pre_ids]]
        if completed.size:
            again = completed[~np.isnan(r.first[completed])]  # recomputed after preemption
            if again.size:
                self._record_gaps(again, t, dt)
            fresh = completed[np.isnan(r.first[completed])]
            r.first[fresh] = t
            r.gen[completed] += 1
            r.last[completed] = t

    def _decode_run(self, dec_ids: Ints, context: float) -> None:
        """Decode-only steps until the next finish, admissible arrival or full cache."""
        r = self.r
        n_dec = dec_ids.size
        dt = self.clock.one(n_dec, context, 0, 0.0)
        horizon = int((r.out[dec_ids] - r.gen[dec_ids]).min())
        if np.isfinite(self.cap) and self.policy.preempts:
            used = int(self._blocks(r.kv[self.running]).sum())
            horizon = min(horizon, self.block * max(int((self.cap - used) // (n_dec * self.block)), 0))
        admissible = self.running.size < self.slots
        t_next = self.next_ready() if admissible else np.inf
        all_fresh = bool(np.all(r.last[dec_ids] == self.t))
        k = 1
        if horizon > 1 and all_fresh and self.t + dt < t_next:
            cum = np.cumsum(self.clock.decode_run(n_dec, context, min(horizon, RUN_STEPS)))
            k = min(cum.size, 1 + int(np.searchsorted(cum[:-1], t_next - self.t, side="left")))
            durations = np.diff(np.concatenate([[0.0], cum[:k]]))
            dt = float(cum[k - 1])
            self.itl_values.extend(durations.tolist())
            self.itl_counts.extend([float(n_dec)] * k)
        else:
            self._record_gaps(dec_ids, self.t + dt, dt)
        self.t += dt
        self.busy += self.running.size * dt
        r.gen[dec_ids] += k
        r.kv[dec_ids] += k
        r.last[dec_ids] = self.t
        self.steps += k

    def _finish(self) -> None:
        r = self.r
        run = self.running
        done = r.gen[run] >= r.out[run]
        if done.any():
            ids = run[done]
            r.finish[ids] = self.t
            self.running = run[~done]
            self.finished = ids.tolist()

    def idle_until(self, t: float) -> None:
        self.t = max(self.t, t)

    def trace(self, keep: slice | Ints) -> EngineTrace:
        r = self.r
        return EngineTrace(
            send=r.send[keep],
            first=r.first[keep],
            finish=r.finish[keep],
            inp=r.inp[keep],
            out=r.out[keep],
            itl_values=np.asarray(self.itl_values, dtype=float),
            itl_counts=np.asarray(self.itl_counts, dtype=float),
            steps=self.steps,
            preemptions=self.preemptions,
            busy_s=self.busy,
        )


@dataclass(frozen=True)
class BenchmarkRun:
    """One simulated load-test run and its statistics as ``vllm bench serve`` reports them.

    ``stats[metric][stat]`` in seconds for metric in ``ttft``, ``tpot``, ``itl``, ``e2el`` and stat
    in ``gpucap.queueing.benchstats.BENCH_STATS``; per-request arrays in send order."""

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


def _lengths(value: Lengths | float, name: str) -> Lengths:
    if isinstance(value, Lengths):
        return value
    v = float(value)
    if not (np.isfinite(v) and v >= 1):
        raise ValueError(f"{name} must be a token count >= 1 or a Lengths distribution, got {value!r}")
    return Lengths.fixed(v, name)


def _engine(
    hw: Hardware,
    coef: Coefficients,
    reqs: _Requests,
    *,
    policy: Policy | None,
    max_running: float | None,
    kv_capacity: float | None,
    context_tokens: float,
) -> _Engine:
    from gpucap.physics.memory import batch_slots

    cap = kv_capacity_tokens(hw, context_tokens) if kv_capacity is None else float(kv_capacity)
    if not cap > 0:
        raise ValueError(f"kv_capacity_tokens must be positive, got {kv_capacity!r}")
    assert reqs.shared is not None
    longest = int((reqs.inp + reqs.out - reqs.shared).max())
    if longest > cap:
        raise ValueError(f"the KV cache ({cap:.0f} tokens) holds less than one request of {longest} tokens")
    slots = batch_slots(hw, kv_slots=cap / context_tokens) if max_running is None else float(max_running)
    if not slots >= 1:
        raise ValueError(f"max_running must be >= 1, got {max_running!r}")
    return _Engine(
        hw,
        coef,
        policy or policy_for(hw.engine.engine),
        reqs,
        max_running=slots,
        kv_capacity_tokens=cap,
        budget_tokens=int(hw.engine.max_num_batched_tokens or 8192),
        block_size=int(hw.engine.block_size or 1),
    )


def _run_load(engine: _Engine, load: Load, rng: np.random.Generator, num: int) -> None:
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


def _slots_estimate(engine: _Engine, inp: Ints, out: Ints) -> int:
    """Requests the engine runs at once when prompts queue: batch slots or the KV cache."""
    return int(max(1, min(engine.slots, engine.cap // max(float(np.mean(inp + out)), 1.0))))


def _tokens_per_s(trace: EngineTrace, start: float, end: float) -> float:
    """Output tokens streamed per second between ``start`` and ``end``, each request's tokens taken
    as spread evenly between its first token and its finish."""
    life = np.maximum(trace.finish - trace.first, 1e-12)
    overlap = np.clip(np.minimum(trace.finish, end) - np.maximum(trace.first, start), 0.0, None)
    inside = np.where(trace.out > 1, trace.out * overlap / life, 0.0)
    return float(inside.sum() / (end - start)) if end > start else float("nan")


def _extend(trace: EngineTrace, inp: Ints, out: Ints, slots: int) -> EngineTrace:
    """An all-at-once run of all ``inp.size`` prompts from a simulated one of the first m (module
    docstring). Between the first and the last batch turnover (W = ``slots`` requests) the engine
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


def _summary(load: Load, trace: EngineTrace, simulated: int, skip: int = 0) -> BenchmarkRun:
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
    reqs = _Requests(inp, out)
    engine = _engine(
        hw, coef, reqs, policy=policy, max_running=max_running, kv_capacity=kv_capacity_tokens, context_tokens=context
    )
    num = n
    if load.mode == "all-at-once":
        slots = _slots_estimate(engine, inp, out)
        num = min(n, max(AT_ONCE_MIN_PROMPTS, AT_ONCE_SIMULATED * slots))
        # all n pass the server's shared core together and leave at n x t_request: the prompts
        # simulated leave at the same time if each carries n / num of the work
        engine.server.work_s *= n / num
    _run_load(engine, load, rng, num)
    trace = engine.trace(slice(0, num))
    if num < n:
        trace = _extend(trace, inp, out, _slots_estimate(engine, inp, out))
    return _summary(load, trace, num, skip_first)


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
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 0:
        arr = np.full(count, float(arr))
    if arr.shape != (count,):
        raise ValueError(f"{name} must be a number or an array of num_requests={count} lengths, got shape {arr.shape}")
    if not np.all(np.isfinite(arr) & (arr >= 1)):
        raise ValueError(f"{name} must be whole token counts >= 1, got min {arr.min()!r}")
    return np.round(arr).astype(np.int64)


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
    cached_len: float | Array = 0.0,
    shared_len: float = 0.0,
) -> Simulation:
    """Open-loop steady state: ``num_requests`` recorded requests arriving at ``request_rate``
    (gamma gaps of shape ``burstiness``; 1 is Poisson) through the same engine loop as
    ``run_benchmark``. Arrivals go on past the recorded requests until every recorded request has
    finished, so the last ones see the same load as the rest; the first ``warmup_fraction`` are left
    out of the statistics. ``input_len`` / ``output_len``: one length, or one per recorded request
    (later arrivals reuse them in turn). ``cached_len``: prompt tokens each request finds in the
    prefix cache (their prefill skipped); ``shared_len`` of them, a prefix every request shares,
    hold their KV once: the cache's room for requests is ``kv_capacity_tokens - shared_len``."""
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
    base_cached = np.round(np.broadcast_to(np.asarray(cached_len, dtype=float), (n,))).astype(np.int64)
    shared = int(round(float(shared_len)))
    if np.any(base_cached < shared) or np.any(base_cached > base_in) or shared < 0:
        raise ValueError("cached_len must lie between shared_len and each prompt's input_len")
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
    reqs = _Requests(base_in.copy(), base_out.copy(), base_cached.copy(), base_shared.copy())
    engine = _engine(
        hw,
        coef,
        reqs,
        policy=None,
        max_running=max_running,
        kv_capacity=kv_capacity_tokens,
        context_tokens=float(np.mean(base_in + base_out)),
    )
    arrival = arrival_times(rng, count=n, request_rate=request_rate, burstiness=burstiness)
    for j, t in enumerate(arrival):
        engine.send(j, float(t))
    while np.isnan(reqs.finish[:n]).any():
        if engine.t >= arrival[-1] - 1e-12 or engine.next_ready() == np.inf:
            start = reqs.inp.size
            more = arrival_times(rng, count=n, request_rate=request_rate, burstiness=burstiness, start_s=arrival[-1])
            reqs.grow(base_in.copy(), base_out.copy(), base_cached.copy(), base_shared.copy())
            for j, t in enumerate(more):
                engine.send(start + j, float(t))
            arrival = np.concatenate([arrival, more])
        if not engine.step():
            engine.idle_until(engine.next_ready())
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
) -> tuple[Array, Array]:
    """One replica serving a recorded trace: requests arrive at ``arrival_s`` (sorted, seconds)
    with their own lengths, through the engine loop of ``simulate``. Returns each request's TTFT
    and TPOT (NaN for one-token answers), in the trace's order.

    ``give_up = (ttft_s, count)``: stop as soon as more than ``count`` requests are sure to wait
    longer than ``ttft_s`` for their first token (no first token by arrival + ttft_s), and return
    NaN TTFTs and TPOTs: a percentile SLO that allows ``count`` late requests is already missed."""
    n = int(np.asarray(arrival_s).size)
    if n == 0:
        return np.zeros(0), np.zeros(0)
    inp, out = _per_request(input_len, n, "input_len"), _per_request(output_len, n, "output_len")
    reqs = _Requests(inp.copy(), out.copy())
    engine = _engine(hw, coef, reqs, policy=None, max_running=max_running, kv_capacity=kv_capacity_tokens,
                     context_tokens=float(np.mean(inp + out)))  # fmt: skip
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
            due = arrival + slo < engine.t
            late = due & (np.isnan(reqs.first) | (reqs.first - arrival > slo))
            if int(np.count_nonzero(late)) > count:
                return np.full(n, np.nan), np.full(n, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(reqs.out > 1, (reqs.finish - reqs.first) / (reqs.out - 1), np.nan)
    return reqs.first - arrival, tpot


__all__ = [
    "BENCH_STATS",
    "STATISTICS",
    "BenchmarkRun",
    "Simulation",
    "arrival_times",
    "replay",
    "run_benchmark",
    "simulate",
]
