"""The engine of one replica: its requests' state and the engine loop, one step at a time.

``Engine`` holds what the engine knows between steps (which requests run, which wait, what each
holds in the KV cache) and runs the steps of the engine loop (DESIGN.md section 8; the scheduling
rules are listed in ``gpucap.queueing.simulate``'s docstring): preempt while the cache overflows,
give running prompts their chunks, admit waiting requests, then run a mixed step or a run of
decode-only steps timed by ``gpucap.queueing.stepclock.StepClock``. ``Requests`` is the per-request
state it updates; ``EngineTrace`` what it hands back. Requests reach it through the HTTP server
(``gpucap.queueing.frontend.SharedServer``); the loads that send them and the statistics of the
result are in ``gpucap.queueing.simulate`` and ``gpucap.queueing.benchmark``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpucap.config import Hardware
from gpucap.physics.coefficients import Coefficients, front_end
from gpucap.queueing.frontend import SharedServer
from gpucap.queueing.scheduler import Policy
from gpucap.queueing.stepclock import StepClock

Array = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]

RUN_STEPS = 512  # most decode-only steps evaluated in one vectorized call


def fcfs_chunks(need: Ints, budget: int) -> Ints:
    """Prompt tokens each request gets from a step's token budget, first come first served:
    ``min(need_j, max(0, budget - sum_{i<j} need_i))``."""
    return np.clip(budget - (np.cumsum(need) - need), 0, need)


def _leading(ok: Bools) -> int:
    """How many entries from the start are True."""
    return ok.size if ok.all() else int(np.argmin(ok))


@dataclass
class Requests:
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
        """State before any is sent: nothing prefilled past the cached prefix, nothing streamed."""
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
        """Append ``inp.size`` requests not yet sent (open-loop runs send more as they go)."""
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


class Engine:
    """The engine loop (``gpucap.queueing.simulate`` docstring, steps 1-4) over requests sent by a load."""

    def __init__(
        self,
        hw: Hardware,
        coef: Coefficients,
        policy: Policy,
        reqs: Requests,
        *,
        max_running: float,
        kv_capacity_tokens: float,
        budget_tokens: int,
        block_size: int,
    ) -> None:
        self.hw, self.coef, self.policy, self.r = hw, coef, policy, reqs
        fe = front_end(hw.engine, coef)
        self.server = SharedServer(fe.serial_s, fe.latency_s)
        self.clock = StepClock(hw, coef)
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
        self.finished: list[int] = []  # finished in the last step (or run of steps)

    # ---- requests in -----------------------------------------------------------------------
    def send(self, job: int, t: float) -> None:
        """Request ``job`` is sent at ``t``: it enters the HTTP server."""
        self.r.send[job] = t
        self.server.add(job, t)

    def _collect(self) -> None:
        """Move the requests the server has passed by now into the engine's queue."""
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
        stop = min(len(self.ready_ids), self.head + max(limit - len(self.resumed), 0))
        at = self.ready_at[self.head : stop]
        n = len(at) if not at or at[-1] <= self.t else next(i for i, a in enumerate(at) if a > self.t)
        return np.asarray((self.resumed + self.ready_ids[self.head : self.head + n])[:limit], dtype=np.int64)

    def _admitted(self, ids: Ints) -> None:
        """Take ``ids`` (from ``_waiting``: preempted first, then new) off the queue."""
        n_res = min(ids.size, len(self.resumed))
        del self.resumed[:n_res]
        self.head += ids.size - n_res

    # ---- KV cache ----------------------------------------------------------------------------
    def _blocks(self, tokens: Ints) -> Ints:
        """Tokens rounded up to whole KV-cache blocks."""
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
        self.finished = []
        self._collect()
        left, preempted = self._preempt_to_fit()
        run = self.running  # before this step's admissions
        dec = left == 0
        n_dec = int(dec.sum())
        budget = self.budget - (n_dec if pol.decodes_with_prompts else 0)
        pre_ids = run[~dec]
        chunk = fcfs_chunks(left[~dec], budget)
        budget -= int(chunk.sum())
        waiting = self._anyone_waiting()
        if waiting and not preempted and budget > 0 and run.size < self.slots:
            new_ids, new_chunk = self._admit(dec, chunk, budget)
            if new_ids.size:
                pre_ids = np.concatenate([pre_ids, new_ids])
                chunk = np.concatenate([chunk, new_chunk])
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

    def _preempt_to_fit(self) -> tuple[Ints, bool]:
        """Running requests grow by a token or a chunk; preempt the last admitted while the cache
        overflows (vLLM V1 and SGLang recompute it later; TensorRT-LLM never gets here). Returns the
        prompt tokens each request still running has left to prefill (0: it decodes), and whether
        any was preempted."""
        r = self.r
        run = self.running
        left = r.target[run] - r.done[run]
        dec = left == 0
        preempted = False
        while self.policy.preempts and run.size > 1:
            grow = np.where(dec, 1, np.minimum(left, self.budget))
            if self._blocks(r.kv[run] + grow).sum() <= self.cap:
                break
            self._preempt()
            preempted = True
            run, left, dec = self.running, left[:-1], dec[:-1]
        return left, preempted

    def _anyone_waiting(self) -> bool:
        """Whether a preempted request, or one ready by now, waits for admission."""
        return len(self.resumed) > 0 or (self.head < len(self.ready_ids) and self.ready_at[self.head] <= self.t)

    def _admit(self, dec: Bools, chunk: Ints, budget: int) -> tuple[Ints, Ints]:
        """Admit waiting requests, first come first served, while the step's ``budget`` tokens,
        batch slots and KV cache last (``dec``: which running requests decode; ``chunk``: the prompt
        tokens given to the others). Returns the admitted requests and their first chunks; they
        join ``running``."""
        r = self.r
        run = self.running
        # each admitted request takes at least one token of the budget and one free block
        held = float(self._blocks(r.kv[run]).sum()) if run.size else 0.0
        free_blocks = int(max(self.cap - held, 0.0) // self.block) if np.isfinite(self.cap) else self.slots
        cand = self._waiting(int(min(self.slots - run.size, budget, free_blocks)))
        given = fcfs_chunks(r.target[cand] - r.done[cand], budget)
        grow = dec.astype(np.int64)
        grow[~dec] = chunk[: int((~dec).sum())]
        fits = self._running_blocks(grow) + np.cumsum(self._admission_blocks(cand, given)) <= self.cap
        k = _leading(fits & (given > 0))
        if k:
            self._admitted(cand[:k])
            self.running = np.concatenate([run, cand[:k]])
        return cand[:k], given[:k]

    def _preempt(self) -> None:
        """Preempt the last admitted request: its KV freed, it waits first in line to prefill its
        prompt and the tokens it had streamed again (vLLM V1 and SGLang: recompute). What it gets
        back on resume: its cached prefix; and under vLLM's prefix caching
        (``EngineConfig.prefix_caching``, on by default) every full block it had computed, which
        stays hashed in the free pool (``vllm/v1/core/block_pool.py``): it then recomputes only
        its last partial block, and needs all those blocks free again to be admitted. (Blocks the
        pool hands to others before it resumes are taken as surviving: an optimistic bound.)"""
        r = self.r
        victim = int(self.running[-1])
        self.running = self.running[:-1]
        assert r.cached is not None and r.shared is not None  # its cached prefix hits again on resume
        total = r.inp[victim] + r.gen[victim]
        r.target[victim] = total
        keep = int(r.cached[victim])
        if self.policy.resumes_from_cache and self.hw.engine.prefix_caching:
            held = int(r.kv[victim] + r.shared[victim])
            keep = max(keep, min(held // self.block * self.block, int(total) - 1))
        r.done[victim], r.kv[victim] = keep, keep - r.shared[victim]
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
        """One step that decodes ``dec_ids`` (mean ``context``) and prefills ``chunk`` tokens of
        each of ``pre_ids``; a prompt it completes streams its first token at the step's end."""
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
        admissible = self.running.size < self.slots and self._head_fits()
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

    def _head_fits(self) -> bool:
        """Whether the first request in line (a preempted one, else the next ready) would fit in
        the KV cache after the next decode step. A decode-only run only fills the cache, so one
        that does not fit now waits for a finish, the end of the run's horizon."""
        r = self.r
        if self.resumed:
            j = self.resumed[0]
        elif self.head < len(self.ready_ids):
            j = self.ready_ids[self.head]
        else:
            return True  # the next arrival is judged when it comes
        run = self.running
        chunk = max(min(int(r.target[j] - r.done[j]), self.budget - run.size), 1)
        need = self._admission_blocks(np.array([j], dtype=np.int64), np.array([chunk], dtype=np.int64))
        return self._running_blocks(np.ones(run.size, dtype=np.int64)) + float(need[0]) <= self.cap

    def _running_blocks(self, grow: Ints) -> float:
        """KV tokens (whole blocks) the running requests hold once they grow by ``grow`` this step;
        what they reserved, where the policy reserves at admission."""
        run = self.running
        if not run.size:
            return 0.0
        if self.policy.admit_whole_prompt:
            return float(self._committed(run).sum())
        return float(self._blocks(self.r.kv[run] + grow).sum())

    def _admission_blocks(self, ids: Ints, given: Ints) -> Ints:
        """KV tokens (whole blocks) each of ``ids`` needs free to be admitted with a first chunk of
        ``given``: its reservation, where the policy reserves; else the chunk and the blocks it
        holds again (prefix-cache hits; a resumed request's kept blocks)."""
        if self.policy.admit_whole_prompt:
            return self._committed(ids)
        return self._blocks(self.r.kv[ids] + given)

    def _finish(self) -> None:
        """Requests that have streamed all their output leave ``running`` (into ``finished``)."""
        r = self.r
        run = self.running
        done = r.gen[run] >= r.out[run]
        if done.any():
            ids = run[done]
            r.finish[ids] = self.t
            self.running = run[~done]
            self.finished = ids.tolist()

    def idle_until(self, t: float) -> None:
        """Nothing to run: the clock moves on to ``t``."""
        self.t = max(self.t, t)

    def trace(self, keep: slice | Ints) -> EngineTrace:
        """What the run produced, for the requests ``keep``."""
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
