"""Capacity planning: from a target load and SLOs to GPU type, GPUs per replica, split, formats,
replicas and cost (seed 1's "reverse question", seed 2's replica and headroom rules).

For every candidate replica (GPU x GPUs per replica x tp/pp/ep x weight/KV format) the planner
asks the estimator what one replica carries within the SLOs, then

    replicas = ceil(target x (1 + burst margin) / per-replica capacity) + failure spares + upgrade spares

(seed 2: ``ceil(D / R) x margin`` plus N+k headroom). Capacity is a request rate for rate and
output-token targets (output tokens/s = requests/s x mean output length, seed 2's QPS-to-tokens
conversion), found with the queueing model at the statistic the SLO names (mean, median, p90, p95, p99),
and a concurrency for concurrency targets (closed loop: requests in flight, means). Latency and
utilization "at target" are for the target spread over the replicas left when the spares are
down and no burst is on: the worst state the plan is sized for. A busy GPU is not proof that a
replica is not overloaded (seed 2): utilization here is arrivals over the service rate. With
``check=True`` the cheapest plans are simulated and one is recommended (``gpucap.planning.checks``).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd

from gpucap.catalog.gpus import GPU, get_gpu
from gpucap.catalog.lookup import load_model
from gpucap.catalog.models import ModelSpec
from gpucap.catalog.prices import Prices, read_prices
from gpucap.config import SLO, EngineConfig, Hardware, hardware
from gpucap.errors import DoesNotFit
from gpucap.options import option
from gpucap.parallel import Runner, as_runner
from gpucap.physics.batching import closed_loop
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.memory import batch_slots, memory_limit, short_of_one_request_bytes, weight_bytes_per_gpu
from gpucap.physics.requests import Requests
from gpucap.planning.capacity import Headroom, concurrency_load, rate_load, replica_curve, replicas_needed
from gpucap.planning.checks import SimulationJob, check_notes, check_plans, with_checks
from gpucap.planning.progress import Progress
from gpucap.planning.result import PLAN_COLUMNS, Plan, Target, number_plans, simulation_notes, too_big_notes
from gpucap.queueing.lengths import Lengths, as_lengths
from gpucap.units import COMPUTE_FORMAT, GiB

GPU_COUNTS = (1, 2, 4, 8)
WEIGHT_DTYPES = ("bf16", "fp8", "nvfp4")
KV_DTYPES = ("auto", "fp8")
COMM_BOUND_SHARE = 0.5  # seed 1: more than half the step on the link
# A cheapest plan whose replicas run below this share of their service rate is flagged: its GPUs
# are bought for an SLO near the physical floor, not for the load (a judgement, not a constant).
LOW_UTILIZATION = 0.25


DEFAULT_GPUS = ("H100-SXM-80GB", "H200-SXM-141GB", "L40S-48GB")


@dataclass(frozen=True)
class Search:
    """What the planner searches: GPU types (catalog keys or ``GPU``), GPUs per replica, weight and
    KV formats, the engine, the link share above which an option is communication-bound, and a
    CSV of extra GPUs."""

    gpus: tuple[str | GPU, ...] = option(DEFAULT_GPUS, kind="names", help="GPU types to try (catalog keys)")
    gpu_counts: tuple[int, ...] = option(GPU_COUNTS, kind="positive_ints", help="GPUs per replica to try (1,2,4,8)")
    weight_dtypes: tuple[str, ...] = option(WEIGHT_DTYPES, kind="names", help="weight formats to try")
    kv_dtypes: tuple[str, ...] = option(KV_DTYPES, kind="names", help="KV-cache formats to try")
    engine: str = "vllm"
    max_comm_share: float = COMM_BOUND_SHARE
    gpu_file: str | Path | None = None


@dataclass(frozen=True)
class Candidate:
    gpu: GPU
    tp: int
    pp: int
    ep: int
    weight_dtype: str
    kv_dtype: str

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp

    def describe(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu.key,
            "gpus_per_replica": self.gpus_per_replica,
            "tp": self.tp,
            "pp": self.pp,
            "ep": self.ep,
            "weight_dtype": self.weight_dtype,
            "kv_dtype": self.kv_dtype,
        }


def supports(gpu: GPU, weight_dtype: str) -> bool:
    """A weight format is searched on a GPU with tensor cores for it (fp8 on Hopper and later,
    fp4 on Blackwell); 16-bit and the weight-only formats (int4, MXFP4 as W4A16) everywhere."""
    fmt = COMPUTE_FORMAT.get(weight_dtype, "bf16")
    return fmt in ("bf16", "mxfp4") or bool(gpu.flops_per_s.get(fmt))


def candidates(
    spec: ModelSpec,
    gpus: Sequence[GPU],
    *,
    gpu_counts: Iterable[int] = GPU_COUNTS,
    weight_dtypes: Iterable[str] = WEIGHT_DTYPES,
    kv_dtypes: Iterable[str] = KV_DTYPES,
) -> tuple[list[Candidate], list[dict[str, Any]]]:
    """Every split of every GPU count (tp x pp = count, tp within one GPU's link domain; for
    mixture-of-experts models also ep = tp) in every format the GPU has tensor cores for; and the
    splits the model does not allow, with the reason."""
    out: list[Candidate] = []
    invalid: list[dict[str, Any]] = []
    for gpu in gpus:
        fmts = [w for w in weight_dtypes if supports(gpu, w)]
        for count in sorted(set(gpu_counts)):
            for tp in (t for t in (1, 2, 4, 8, 16) if count % t == 0 and t <= gpu.max_tp_on_link):
                pp = count // tp
                for ep in sorted({1, tp}) if spec.is_moe else (1,):
                    try:
                        hardware(spec, gpu, tp=tp, pp=pp, ep=ep)
                    except ValueError as err:
                        invalid.append(
                            {
                                "gpu": gpu.key,
                                "gpus_per_replica": count,
                                "tp": tp,
                                "pp": pp,
                                "ep": ep,
                                "reason": str(err),
                            }
                        )
                        continue
                    out += [Candidate(gpu, tp, pp, ep, w, kv) for w in fmts for kv in kv_dtypes]
    return out, invalid


def _simulation_job(row: pd.Series, ask: _Question) -> SimulationJob:
    """The simulation that checks a plan (a row of the plans table): one replica of it at the
    target spread over its serving replicas (the spares out), its KV cache and batch slots."""
    hw = ask.hardware(str(row["gpu"]), row)
    mem, slots = memory_limit(hw, ask.inp.mean + ask.out.mean)
    return SimulationJob(
        hw, ask.coef, ask.inp, ask.out, rate=ask.rate / (int(row["replicas"]) - ask.headroom.spares),
        max_running=batch_slots(hw, slots), kv_capacity_tokens=mem.kv_tokens_per_gpu * hw.layout.attn_dp,
        slo=ask.slo, burstiness=ask.burstiness,
    )  # fmt: skip


def _check_by_simulation(
    plans: pd.DataFrame, ask: _Question, *, minimum: int, run: Runner
) -> tuple[pd.DataFrame, list[str], float]:
    """The plans with the simulation check's columns (``gpucap.planning.checks``: cheapest first
    until one passes, then every plan within 25% of its cost, at least ``minimum``), numbered;
    the notes on what it found, and the seconds it took."""
    started = time.perf_counter()
    checks, processes = check_plans(
        plans["cost_per_hour"].to_numpy(dtype=float),
        lambda k: _simulation_job(plans.iloc[k], ask),
        minimum=minimum,
        run=run,
    )
    seconds = time.perf_counter() - started
    plans = number_plans(with_checks(plans, checks))
    return plans, check_notes(plans, seconds=seconds, processes=processes) + simulation_notes(plans), seconds


def low_utilization_notes(best: pd.Series, ask: _Question, gpus: dict[str, GPU]) -> list[str]:
    """A note when the cheapest plan runs its replicas below LOW_UTILIZATION of their service
    rate, saying why: an SLO within 2x of what one request alone gets on the plan's split
    (``closed_loop`` at concurrency 1: the floor no fleet of it goes below), or a target smaller
    than the replicas the plan needs anyway (spares, the smallest split that fits)."""
    if not best["utilization"] < LOW_UTILIZATION:
        return []
    hw = ask.hardware(gpus[str(best["gpu"])], best)
    alone = closed_loop(hw, ask.coef, Requests(ask.inp.mean, ask.out.mean), concurrency=1.0)
    slo = ask.slo
    ttft_s, tpot_s = float(alone.ttft_s), float(alone.tpot_s)
    where = f"{best['gpus_per_replica']} x {best['gpu']} (tp={best['tp']}, {best['weight_dtype']} weights)"
    busy = f"the cheapest plan runs each replica at {best['utilization']:.0%} of its service rate"
    if tpot_s >= 0.5 * slo.tpot_s or ttft_s >= 0.5 * slo.ttft_s:
        return [
            f"{busy}: the fleet is sized by an SLO near the physical floor, not by the load. One request alone on "
            f"{where} takes {tpot_s * 1e3:.3g} ms per output token and {ttft_s:.3g} s to its first, against SLOs of "
            f"{slo.tpot_s * 1e3:g} ms and {slo.ttft_s:g} s. A looser SLO costs far less"
        ]
    return [
        f"{busy}: the target is small for one replica of {where}, the cheapest that fits; the fleet is its "
        f"{best['replicas']} replica(s) with spares. A smaller GPU or split would be busier where one fits"
    ]


@dataclass(frozen=True)
class _Question:
    """What every option is asked: the model, coefficients and engine, the target (and its
    request rate), the lengths, the SLOs at their statistic, the headroom and the link limit."""

    spec: ModelSpec
    coef: Coefficients
    engine: str
    target: Target
    rate: float  # requests/s for rate and output-token targets
    inp: Lengths
    out: Lengths
    slo: SLO
    burstiness: float
    headroom: Headroom
    max_comm_share: float

    def hardware(self, gpu: GPU | str, row: Candidate | pd.Series) -> Hardware:
        """One replica of an option (a ``Candidate``, or a row of the plans table)."""
        get = (lambda k: getattr(row, k)) if isinstance(row, Candidate) else (lambda k: row[k])
        return hardware(
            self.spec, gpu, tp=int(get("tp")), pp=int(get("pp")), ep=int(get("ep")),
            weight_dtype=str(get("weight_dtype")), kv_dtype=str(get("kv_dtype")), engine=EngineConfig(engine=self.engine),
        )  # fmt: skip


class Rejected(NamedTuple):
    """Why an option is rejected (the kind of reason up to the first colon), and for memory the
    GiB per GPU it is short by (NaN for other reasons): the nearest miss is the smallest."""

    reason: str
    short_GiB: float = math.nan


def _assess(ask: _Question, cand: Candidate, prices: Prices) -> dict[str, Any] | Rejected:
    """One option: its row of the plans table, or why it is rejected ("does not fit: ...",
    "communication-bound: ...", "misses TTFT: ...", "no price ...")."""
    hw = ask.hardware(cand.gpu, cand)
    inp, out = ask.inp, ask.out
    longest = inp.longest + out.longest
    try:
        mem, slots_longest = memory_limit(hw, longest)
        _, slots = memory_limit(hw, inp.mean + out.mean)
    except DoesNotFit as err:
        return Rejected(f"does not fit: {err}", err.short_bytes / GiB)
    if slots_longest < 1:
        block, engine = int(hw.engine.block_size or 1), hw.engine.engine
        short = short_of_one_request_bytes(mem, hw.spec, hw.layout, longest, block, engine) / GiB
        return Rejected(
            f"does not fit: the KV cache holds less than one {longest:.0f}-token request (short by {short:.1f} GiB "
            "per GPU)",
            short,
        )
    cap = batch_slots(hw, slots)
    # communication-bound is a property of the option, judged with every slot busy (not at
    # the target's load, so that a looser SLO or a lower target cannot make it pass or fail)
    per_rate = ask.target.kind != "concurrency"
    curve = replica_curve(hw, ask.coef, inp=inp, out=out, cap=cap, kv_slots=slots) if per_rate else None
    if curve is not None:
        share = float(curve.comm_share[-1])  # the curve's last point is the full batch
    else:
        full = closed_loop(hw, ask.coef, Requests(inp.mean, out.mean, max_running=cap), concurrency=cap)
        share = float(full.decode_step.comm_share)
    if share > ask.max_comm_share:
        return Rejected(f"communication-bound: the link takes {share:.0%} of a decode step at full batch")
    if curve is None:
        load = concurrency_load(
            hw, ask.coef, inp=inp, out=out, cap=cap, concurrency=ask.target.value,
            slo=ask.slo, headroom=ask.headroom,
        )  # fmt: skip
    else:
        load = rate_load(
            hw, ask.coef, inp=inp, out=out, rate=ask.rate, slo=ask.slo, burstiness=ask.burstiness,
            headroom=ask.headroom, curve=curve,
        )  # fmt: skip
    if isinstance(load, str):
        return Rejected(load)
    price = prices.usd_per_gpu_hour(cand.gpu)
    if price is None:
        return Rejected(f"no price for {cand.gpu.key}: add it to the price list")
    _, total_replicas = replicas_needed(ask.rate if per_rate else ask.target.value, load.capacity, ask.headroom)
    total_gpus = total_replicas * cand.gpus_per_replica
    cost = total_gpus * price
    weights = weight_bytes_per_gpu(ask.spec, cand.weight_dtype, hw.layout, hw.gpu, hw.engine.moe_backend)
    return {
        **cand.describe(),
        "replicas": total_replicas,
        "spare_replicas": ask.headroom.spares,
        "total_gpus": total_gpus,
        "capacity_requests_per_s": load.capacity if per_rate else math.nan,
        "capacity_concurrency": math.nan if per_rate else load.capacity,
        "utilization": load.utilization,
        "ttft_s": load.ttft_s,
        "tpot_s": load.tpot_s,
        "comm_share": load.comm_share,
        "cost_per_hour": cost,
        "cost_per_million_output_tokens": cost / (load.output_tps * 3600) * 1e6,
        "weights_GiB_per_gpu": weights.total / GiB,
    }


def plan(
    model: str | Path | ModelSpec,
    *,
    input_len: float | Lengths,
    output_len: float | Lengths,
    target_request_rate: float | None = None,
    target_concurrency: float | None = None,
    target_output_tps: float | None = None,
    ttft_slo_s: float = 2.0,
    tpot_slo_s: float = 0.1,
    stat: str = "p99",
    **options: Any,
) -> Plan:
    """Search GPU type x GPUs per replica x split x formats for the cheapest fleet that carries
    the target within the SLOs; see the module docstring for the rules.

    Give exactly one target. ``stat`` applies to both SLOs for rate and output-token targets
    (Poisson arrivals, or gamma arrivals with ``burstiness`` < 1 for burstier traffic);
    concurrency targets are closed loops and use means. ``options``, by name: the search space,
    ``Search``'s fields (``gpus``, ``gpu_counts``, ``weight_dtypes``, ``kv_dtypes``, ``engine``,
    ``max_comm_share``, ``gpu_file``), and ``plan_for``'s keywords. Prices: a file or table with
    ``gpu`` and ``usd_per_gpu_hour`` (default ``data/prices.csv``); ``usd_per_kwh`` adds power at
    each GPU's TDP (owned hardware: give a price file of amortized cost, or none to count power
    only). ``progress``: a callback ``(done, total, started)``, or True for a bar on stderr once
    the search has run for a second.

    ``check=True`` checks the plans with the step-level simulation (about a second each, on
    ``n_jobs`` processes, default every core, or the Dask cluster ``dask``: ``gpucap.parallel``;
    rate and output-token targets) and
    recommends one (``Plan.recommended``: the cheapest that meets the SLOs in simulation). The
    rule (``gpucap.planning.checks``): cheapest first until one passes, then every plan costing up
    to 25% more than it (``RECOMMEND_WITHIN``; ``MAX_SIMULATED`` at most). Columns
    ``ttft_s_simulated``, ``tpot_s_simulated``, ``meets_slo_simulated`` (None: not checked),
    ``simulation_error`` and ``recommended``. ``simulate_top=N`` (from before the rule) simulates
    at least the N cheapest and turns the check on. Without a check (the default here: the
    search alone stays fast for sweeps such as ``frontier``) nothing is recommended; the CLI,
    the planner page and notebook 04 check.
    """
    target = Target.one_of(
        request_rate=target_request_rate, concurrency=target_concurrency, output_tps=target_output_tps
    )
    space = {f.name for f in dataclasses.fields(Search)}
    known = space | set(inspect.signature(plan_for).parameters) - {
        "model",
        "target",
        "slo",
        "search",
        "input_len",
        "output_len",
    }
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"plan() got unknown keywords {', '.join(unknown)}; the options are {', '.join(sorted(known))}")
    lists = ("gpus", "gpu_counts", "weight_dtypes", "kv_dtypes")
    given: dict[str, Any] = {k: tuple(v) if k in lists else v for k, v in options.items() if k in space}
    search = Search(**given)
    return plan_for(
        model,
        target,
        SLO(ttft_s=ttft_slo_s, tpot_s=tpot_slo_s, statistic=stat),
        input_len=input_len,
        output_len=output_len,
        search=search,
        **{k: v for k, v in options.items() if k not in space},
    )


def plan_for(
    model: str | Path | ModelSpec,
    target: Target,
    slo: SLO,
    *,
    input_len: float | Lengths,
    output_len: float | Lengths,
    search: Search | None = None,
    prices: Prices | str | Path | None = None,
    usd_per_kwh: float | None = None,
    coefficients: Coefficients | str | Path | None = None,
    headroom: Headroom | None = None,
    burstiness: float = 1.0,
    progress: Callable[[int, int, float], None] | bool | None = None,
    check: bool = False,
    simulate_top: int = 0,
    n_jobs: int | Runner | None = None,
    dask: Any = None,
) -> Plan:
    """``plan`` on objects: the ``target``, the ``slo`` (its statistic applies to both SLOs), the
    lengths (a number or a distribution, ``gpucap.queueing.lengths``) and the ``search`` space;
    ``check``, ``simulate_top``, ``n_jobs`` and ``dask`` as ``plan`` takes them."""
    if not (isinstance(simulate_top, int) and simulate_top >= 0):
        raise ValueError(f"simulate_top must be a whole number >= 0, got {simulate_top!r}")
    run = as_runner(n_jobs, dask)
    search = search or Search()
    gpus, gpu_counts, weight_dtypes, kv_dtypes = search.gpus, search.gpu_counts, search.weight_dtypes, search.kv_dtypes
    engine, max_comm_share, gpu_file = search.engine, search.max_comm_share, search.gpu_file
    headroom = headroom or Headroom()
    inp, out = as_lengths(input_len, "input_len"), as_lengths(output_len, "output_len")
    spec = load_model(model)
    spec.check_context(inp.longest, out.longest)
    gpu_list = [get_gpu(g, gpu_file) for g in gpus]
    if not gpu_list:
        raise ValueError("give at least one GPU to search")
    table = prices if isinstance(prices, Prices) else read_prices(prices, usd_per_kwh=usd_per_kwh)
    coef = Coefficients.resolve(coefficients, engine)
    rate = target.value / out.mean if target.kind == "output_tps" else target.value

    started = time.perf_counter()
    cands, invalid = candidates(spec, gpu_list, gpu_counts=gpu_counts, weight_dtypes=weight_dtypes, kv_dtypes=kv_dtypes)
    notes = [
        f"{w} not searched on {g.key}: no {COMPUTE_FORMAT.get(w, w)} tensor cores"
        for g in gpu_list
        for w in weight_dtypes
        if not supports(g, w)
    ]
    if target.kind == "concurrency" and slo.statistic != "mean":
        notes.append(f"concurrency targets are closed loops: TTFT and TPOT are means there, not {slo.statistic}")
    ask = _Question(spec, coef, engine, target, rate, inp, out, slo, burstiness, headroom, max_comm_share)
    rows: list[dict[str, Any]] = []
    rejected: list[dict[str, Any]] = [{**r, "weight_dtype": None, "kv_dtype": None} for r in invalid]
    too_big: dict[tuple[str, int, int, int, str], Rejected] = {}  # weights that do not fit: no KV format helps
    progress_bar = Progress(progress, len(cands), started)
    for k, cand in enumerate(cands):
        progress_bar.tick(k)
        key = (cand.gpu.key, cand.tp, cand.pp, cand.ep, cand.weight_dtype)
        outcome = too_big.get(key) or _assess(ask, cand, table)
        if isinstance(outcome, Rejected):
            if outcome.reason.startswith("does not fit:") and "holds less than one" not in outcome.reason:
                too_big[key] = outcome
            rejected.append({**cand.describe(), **outcome._asdict()})
        else:
            rows.append(outcome)
    progress_bar.done()
    plans = pd.DataFrame(rows, columns=[*PLAN_COLUMNS, "weights_GiB_per_gpu"])
    if not plans.empty:
        plans = plans.sort_values(["cost_per_hour", "total_gpus", "ttft_s"], kind="stable").reset_index(drop=True)
    plans["recommended"] = False
    plans, check_s = number_plans(plans), 0.0
    check = check or simulate_top > 0
    if check and target.kind != "concurrency" and not plans.empty:
        plans, found, check_s = _check_by_simulation(plans, ask, minimum=simulate_top, run=run)
        notes += found
    elif check and target.kind == "concurrency":
        notes.append("the simulation check runs for request-rate and output-token targets only: nothing is recommended")
    if not plans.empty:
        notes += low_utilization_notes(plans.iloc[0], ask, {g.key: g for g in gpu_list})
    rej = pd.DataFrame(rejected, columns=[*PLAN_COLUMNS[:7], "reason", "short_GiB"])
    notes += too_big_notes(rej, gpu_list, plans, max(gpu_counts, default=1))
    if plans.empty:
        notes.append(f"no option carries {target.describe()} within the SLOs; see rejected for why each failed")
    return Plan(
        model=spec.name,
        target=ask.target,  # the question, as it was asked
        slo=ask.slo,
        burstiness=ask.burstiness,
        input_len=ask.inp,
        output_len=ask.out,
        engine=ask.engine,
        plans=plans,
        rejected=rej,
        searched=len(cands) + len(invalid),
        search_s=time.perf_counter() - started - check_s,
        notes=notes,
        check_s=check_s,
        row_hardware=functools.partial(_row_hardware, ask, {g.key: g for g in gpu_list}),
    )


def _row_hardware(ask: _Question, gpus: dict[str, GPU], row: pd.Series) -> Hardware:
    """``Plan.row_hardware``: one replica of a plans row, as ``_assess`` built it."""
    if row["gpu"] not in gpus:
        raise ValueError(f"the row's GPU {row['gpu']!r} was not searched; searched: {', '.join(gpus)}")
    return ask.hardware(gpus[row["gpu"]], row)
