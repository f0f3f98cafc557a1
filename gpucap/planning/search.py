"""Capacity planning: from a target load and SLOs to GPU type, GPUs per replica, split, formats,
replicas and cost (seed 1's "reverse question", seed 2's replica and headroom rules).

For every candidate replica (GPU x GPUs per replica x tp/pp/ep x weight/KV format) the planner
asks the estimator what one replica carries within the SLOs, then

    replicas = ceil(target x (1 + burst margin) / per-replica capacity) + failure spares + upgrade spares

(seed 2: ``ceil(D / R) x margin`` plus N+k headroom). Capacity is a request rate for rate and
output-token targets (output tokens/s = requests/s x mean output length, seed 2's QPS-to-tokens
conversion), found with the queueing model at the statistic the SLO names (mean, p50, p95, p99),
and a concurrency for concurrency targets (closed loop: requests in flight, means). Latency and
utilization "at target" are for the target spread over the replicas left when the spares are
down and no burst is on: the worst state the plan is sized for. A busy GPU is not proof that a
replica is not overloaded (seed 2): utilization here is arrivals over the service rate.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpucap.catalog.gpus import GPU, get_gpu
from gpucap.catalog.lookup import load_model
from gpucap.catalog.models import ModelSpec
from gpucap.catalog.prices import Prices, read_prices
from gpucap.estimate import DoesNotFit, batch_slots, hardware, memory_limit
from gpucap.physics.batching import closed_loop
from gpucap.physics.coefficients import Coefficients, EngineConfig
from gpucap.physics.memory import weight_bytes_per_gpu
from gpucap.planning.capacity import Headroom, concurrency_load, rate_load, replicas_needed, simulated
from gpucap.queueing.analytic import STATS
from gpucap.queueing.lengths import Lengths, as_lengths
from gpucap.units import COMPUTE_FORMAT, GiB

TARGETS = ("request_rate", "concurrency", "output_tps")
GPU_COUNTS = (1, 2, 4, 8)
WEIGHT_DTYPES = ("bf16", "fp8", "nvfp4")
KV_DTYPES = ("auto", "fp8")
COMM_BOUND_SHARE = 0.5  # seed 1: more than half the step on the link
PROGRESS_AFTER_S = 1.0  # show progress once the search has run this long
PROGRESS_EVERY_S = 0.25
SIMULATE_MORE = 10  # plans simulated beyond the top ones while none has passed
# A cheapest plan whose replicas run below this share of their service rate is flagged: its GPUs
# are bought for an SLO near the physical floor, not for the load (a judgement, not a constant).
LOW_UTILIZATION = 0.25
PLAN_COLUMNS = [
    "gpu",
    "gpus_per_replica",
    "tp",
    "pp",
    "ep",
    "weight_dtype",
    "kv_dtype",
    "replicas",
    "spare_replicas",
    "total_gpus",
    "capacity_per_replica",
    "utilization",
    "ttft_s",
    "tpot_s",
    "comm_share",
    "cost_per_hour",
    "cost_per_million_output_tokens",
]


@dataclass(frozen=True)
class Target:
    """What the fleet must carry: requests/s, requests in flight, or output tokens/s."""

    kind: str
    value: float

    def __post_init__(self) -> None:
        if self.kind not in TARGETS:
            raise ValueError(f"target kind must be one of {', '.join(TARGETS)}, got {self.kind!r}")
        if not (math.isfinite(self.value) and self.value > 0):
            raise ValueError(f"target {self.kind} must be a positive number, got {self.value!r}")

    def describe(self) -> str:
        unit = {"request_rate": "requests/s", "concurrency": "concurrent requests", "output_tps": "output tokens/s"}
        return f"{self.value:g} {unit[self.kind]}"


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


@dataclass
class Plan:
    """Options ranked by cost (``plans``), the ones that failed and why (``rejected``)."""

    model: str
    target: Target
    slo: dict[str, Any]
    plans: pd.DataFrame
    rejected: pd.DataFrame
    searched: int
    search_s: float
    notes: list[str] = field(default_factory=list)

    @property
    def best(self) -> pd.Series | None:
        """The cheapest plan by the queueing model."""
        return None if self.plans.empty else self.plans.iloc[0]

    @property
    def best_checked(self) -> pd.Series | None:
        """The cheapest plan that also meets the SLOs in the step-level simulation, where plans
        were simulated (``simulate_top``); without a simulation, or when none simulated passes,
        the cheapest by the queueing model (``simulation_notes`` says which)."""
        if self.plans.empty or "meets_slo_simulated" not in self.plans:
            return self.best
        ok = self.plans[self.plans["meets_slo_simulated"].eq(True)]
        return ok.iloc[0] if not ok.empty else self.best

    def to_dict(self) -> dict[str, Any]:
        def records(df: pd.DataFrame) -> list[dict[str, Any]]:
            return [{k: _plain(v) for k, v in row.items()} for row in df.to_dict(orient="records")]

        return {
            "model": self.model,
            "target": {"kind": self.target.kind, "value": self.target.value},
            "slo": self.slo,
            "searched": self.searched,
            "search_s": round(self.search_s, 3),
            "notes": self.notes,
            "plans": records(self.plans),
            "rejected": records(self.rejected),
        }

    def __str__(self) -> str:
        from gpucap.report.text import format_plan

        return format_plan(self)

    def _repr_html_(self) -> str:
        head = f"<b>{self.model}</b>: {self.target.describe()}, {self.slo['stat']} TTFT &le; {self.slo['ttft_s']:g} s"
        head += f", {self.slo['stat']} TPOT &le; {self.slo['tpot_s']:g} s; {self.searched} options searched"
        body = self.plans.head(15).to_html(index=False, float_format=lambda v: f"{v:.4g}")
        return f"<p>{head}</p>{body}<p>{len(self.rejected)} rejected (see .rejected)</p>"


def _plain(v: Any) -> Any:
    if isinstance(v, (np.floating, float)):
        return None if not math.isfinite(float(v)) else float(v)
    if isinstance(v, np.integer):
        return int(v)
    return v


def _check_by_simulation(
    plans: pd.DataFrame,
    spec: ModelSpec,
    coef: Coefficients,
    *,
    engine: str,
    inp: Lengths,
    out: Lengths,
    rate: float,
    headroom: Headroom,
    top: int,
    ttft_slo_s: float,
    tpot_slo_s: float,
    stat: str,
    burstiness: float,
) -> pd.DataFrame:
    """The ``top`` cheapest plans simulated at the target spread over their serving replicas; when
    none of them passes, the next ones too (up to ``SIMULATE_MORE``) until one does."""
    plans = plans.copy()
    for col in ("ttft_s_simulated", "tpot_s_simulated"):
        plans[col] = np.nan
    plans["meets_slo_simulated"] = pd.Series([None] * len(plans), dtype=object)
    plans["simulation_error"] = pd.Series([None] * len(plans), dtype=object)
    passed = False
    for k in range(min(top + SIMULATE_MORE, len(plans))):
        if k >= top and passed:
            break  # the cheapest that passes is known
        row = plans.iloc[k]
        hw = hardware(
            spec,
            str(row["gpu"]),
            tp=int(row["tp"]),
            pp=int(row["pp"]),
            ep=int(row["ep"]),
            weight_dtype=str(row["weight_dtype"]),
            kv_dtype=str(row["kv_dtype"]),
            engine=EngineConfig(engine=engine),
        )
        mem, slots = memory_limit(hw, inp.mean + out.mean)
        try:
            ttft, tpot = simulated(
                hw,
                coef,
                inp=inp,
                out=out,
                rate=rate / (int(row["replicas"]) - headroom.spares),
                max_running=batch_slots(hw, slots),
                kv_capacity_tokens=mem.kv_tokens_per_gpu * hw.layout.attn_dp,
                stat=stat,
                burstiness=burstiness,
            )
        except ValueError as err:  # the simulation cannot run this plan: say why, keep the others
            plans.at[k, "simulation_error"] = str(err)
            continue
        plans.loc[k, ["ttft_s_simulated", "tpot_s_simulated"]] = [ttft, tpot]
        tpot_ok = tpot <= tpot_slo_s or (out.mean <= 1 and math.isnan(tpot))  # one token: no TPOT
        plans.at[k, "meets_slo_simulated"] = bool(ttft <= ttft_slo_s and tpot_ok)
        passed = passed or bool(plans.at[k, "meets_slo_simulated"])
    return plans


def low_utilization_notes(
    best: pd.Series,
    spec: ModelSpec,
    coef: Coefficients,
    engine: str,
    inp: Lengths,
    out: Lengths,
    slo: tuple[float, float],
    gpus: dict[str, GPU],
) -> list[str]:
    """A note when the cheapest plan runs its replicas below LOW_UTILIZATION of their service
    rate, saying why: an SLO within 2x of what one request alone gets on the plan's split
    (``closed_loop`` at concurrency 1: the floor no fleet of it goes below), or a target smaller
    than the replicas the plan needs anyway (spares, the smallest split that fits)."""
    if not best["utilization"] < LOW_UTILIZATION:
        return []
    hw = hardware(
        spec, gpus[str(best["gpu"])], tp=int(best["tp"]), pp=int(best["pp"]), ep=int(best["ep"]),
        weight_dtype=str(best["weight_dtype"]), kv_dtype=str(best["kv_dtype"]), engine=EngineConfig(engine=engine),
    )  # fmt: skip
    alone = closed_loop(hw, coef, concurrency=1.0, input_len=inp.mean, output_len=out.mean)
    ttft_s, tpot_s = float(alone.ttft_s), float(alone.tpot_s)
    where = f"{best['gpus_per_replica']} x {best['gpu']} (tp={best['tp']}, {best['weight_dtype']} weights)"
    busy = f"the cheapest plan runs each replica at {best['utilization']:.0%} of its service rate"
    if tpot_s >= 0.5 * slo[1] or ttft_s >= 0.5 * slo[0]:
        return [
            f"{busy}: the fleet is sized by an SLO near the physical floor, not by the load. One request alone on "
            f"{where} takes {tpot_s * 1e3:.3g} ms per output token and {ttft_s:.3g} s to its first, against SLOs of "
            f"{slo[1] * 1e3:g} ms and {slo[0]:g} s. A looser SLO costs far less"
        ]
    return [
        f"{busy}: the target is small for one replica of {where}, the cheapest that fits; the fleet is its "
        f"{best['replicas']} replica(s) with spares. A smaller GPU or split would be busier where one fits"
    ]


# The columns of a plan a summary table shows (notebook 04), in reading order.
SUMMARY_COLUMNS = [
    "gpu", "gpus_per_replica", "tp", "pp", "weight_dtype", "kv_dtype", "replicas", "total_gpus",
    "capacity_per_replica", "utilization", "ttft_s", "tpot_s", "cost_per_hour", "cost_per_million_output_tokens",
]  # fmt: skip


def describe_split(row: pd.Series | dict[str, Any]) -> str:
    """One replica of a plan or option in words: "2 x H100-SXM-80GB (tp=2, pp=1, fp8 weights, fp8 KV)"."""
    return (
        f"{row['gpus_per_replica']} x {row['gpu']} (tp={row['tp']}, pp={row['pp']}, {row['weight_dtype']} weights, "
        f"{row['kv_dtype']} KV)"
    )


def describe_plan(row: pd.Series) -> str:
    """A plan (a row of ``Plan.plans``) in words: replicas, split, GPUs and cost per hour."""
    return f"{row['replicas']} replica(s) of {describe_split(row)} = {row['total_gpus']} GPUs, ${row['cost_per_hour']:,.2f}/hour"


def rejected_counts(result: Plan) -> pd.DataFrame:
    """How many options were rejected for each kind of reason ("does not fit", "misses TPOT",
    "communication-bound", ...: the reason up to its first colon), most frequent first, with the
    first such option (which configuration it was) and its full reason as an example."""
    rej = result.rejected
    reasons = rej["reason"].astype(str)
    kinds = reasons.str.split(":", n=1).str[0]
    counts = kinds.value_counts(sort=False)
    first = [rej[kinds == k].iloc[0] for k in counts.index]
    out = pd.DataFrame(
        {
            "reason": counts.index,
            "options": counts.to_numpy(),
            "example option": [describe_split(r) for r in first],
            "example": [str(r["reason"]) for r in first],
        }
    )
    return out.sort_values("options", ascending=False, kind="stable").reset_index(drop=True)


def too_big_notes(rejected: pd.DataFrame, gpus: Sequence[GPU], plans: pd.DataFrame, most: int) -> list[str]:
    """One note per GPU type on which no option fits the weights at all: the planner searches at
    most ``most`` GPUs per replica (``gpu_counts``; one NVLink/NVSwitch domain), and replicas
    spanning nodes are not modelled, so such a model is out of reach on that GPU, not merely
    expensive."""
    notes = []
    for gpu in gpus:
        if not plans.empty and (plans["gpu"] == gpu.key).any():
            continue
        mine = rejected[rejected["gpu"] == gpu.key]
        if not mine.empty and mine["reason"].astype(str).str.startswith("does not fit").all():
            notes.append(
                f"{gpu.key}: the weights do not fit in any format even on {most} GPUs per replica, the most "
                "searched (gpu_counts); replicas across nodes are not modelled"
            )
    return notes


def simulation_notes(plans: pd.DataFrame) -> list[str]:
    """What the simulation check found, in words."""
    checked = plans[plans["meets_slo_simulated"].notna()]
    if checked.empty or bool(checked.iloc[0]["meets_slo_simulated"]):
        return []
    ok = checked[checked["meets_slo_simulated"].astype(bool)]
    where = f"plan {ok.index[0] + 1} is the cheapest that does" if not ok.empty else "none of them does"
    return [
        "the cheapest plan misses the SLOs in the step-level simulation (which runs each prompt chunk in its "
        f"own step; the queueing model spreads prompts over steps): of the {len(checked)} simulated, {where}"
    ]


def _progress_bar(done: int, total: int, started: float) -> None:
    import sys

    width = 30
    filled = int(width * done / max(total, 1))
    sys.stderr.write(
        f"\rsearching {'#' * filled}{'.' * (width - filled)} {done}/{total} ({time.perf_counter() - started:.1f} s)"
    )
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


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
    gpus: Sequence[str | GPU] = ("H100-SXM-80GB", "H200-SXM-141GB", "L40S-48GB"),
    prices: Prices | str | Path | None = None,
    usd_per_kwh: float | None = None,
    gpu_counts: Iterable[int] = GPU_COUNTS,
    weight_dtypes: Iterable[str] = WEIGHT_DTYPES,
    kv_dtypes: Iterable[str] = KV_DTYPES,
    engine: str = "vllm",
    coefficients: Coefficients | str | Path | None = None,
    headroom: Headroom | None = None,
    burstiness: float = 1.0,
    max_comm_share: float = COMM_BOUND_SHARE,
    gpu_file: str | Path | None = None,
    progress: Callable[[int, int, float], None] | bool | None = None,
    simulate_top: int = 0,
) -> Plan:
    """Search GPU type x GPUs per replica x split x formats for the cheapest fleet that carries
    the target within the SLOs; see the module docstring for the rules.

    Give exactly one target. ``stat`` applies to both SLOs for rate and output-token targets
    (Poisson arrivals, or gamma arrivals with ``burstiness`` < 1 for burstier traffic);
    concurrency targets are closed loops and use means. Prices: a file or table with ``gpu`` and
    ``usd_per_gpu_hour`` (default ``data/prices.csv``); ``usd_per_kwh`` adds power at each
    GPU's TDP (owned hardware: give a price file of amortized cost, or none to count power only).
    ``progress``: a callback ``(done, total, started)``, or True for a bar on stderr once the
    search has run for a second. ``simulate_top``: check the N cheapest plans with the step-level
    simulation (about a second each), and further ones while none passes: columns
    ``ttft_s_simulated``, ``tpot_s_simulated`` and ``meets_slo_simulated`` (rate and output-token
    targets).
    """
    given = {"request_rate": target_request_rate, "concurrency": target_concurrency, "output_tps": target_output_tps}
    chosen = [(k, v) for k, v in given.items() if v is not None]
    if len(chosen) != 1:
        raise ValueError("give exactly one target: target_request_rate, target_concurrency or target_output_tps")
    target = Target(chosen[0][0], float(chosen[0][1]))
    if stat not in STATS:
        raise ValueError(f"stat must be one of {', '.join(STATS)}, got {stat!r}")
    for name, v in (("ttft_slo_s", ttft_slo_s), ("tpot_slo_s", tpot_slo_s)):
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be a positive number of seconds, got {v!r}")
    headroom = headroom or Headroom()
    inp, out = as_lengths(input_len, "input_len"), as_lengths(output_len, "output_len")
    spec = load_model(model)
    spec.check_context(inp.longest, out.longest)
    gpu_list = [get_gpu(g, gpu_file) for g in gpus]
    if not gpu_list:
        raise ValueError("give at least one GPU to search")
    table = prices if isinstance(prices, Prices) else read_prices(prices, usd_per_kwh=usd_per_kwh)
    if isinstance(coefficients, (str, Path)):
        coef = Coefficients.from_file(coefficients, engine)
    else:
        coef = coefficients or Coefficients.for_engine(engine)
    rate = target.value / out.mean if target.kind == "output_tps" else target.value

    started = time.perf_counter()
    cands, invalid = candidates(spec, gpu_list, gpu_counts=gpu_counts, weight_dtypes=weight_dtypes, kv_dtypes=kv_dtypes)
    notes = [
        f"{w} not searched on {g.key}: no {COMPUTE_FORMAT.get(w, w)} tensor cores"
        for g in gpu_list
        for w in weight_dtypes
        if not supports(g, w)
    ]
    if target.kind == "concurrency" and stat != "mean":
        notes.append(f"concurrency targets are closed loops: TTFT and TPOT are means there, not {stat}")
    rows: list[dict[str, Any]] = []
    rejected: list[dict[str, Any]] = [{**r, "weight_dtype": None, "kv_dtype": None} for r in invalid]
    fits_cache: dict[tuple[str, int, int, int, str], str | None] = {}
    show = progress if callable(progress) else (_progress_bar if progress else None)
    shown = 0.0
    for k, cand in enumerate(cands):
        now = time.perf_counter()
        if show and now - started > PROGRESS_AFTER_S and now - shown > PROGRESS_EVERY_S:
            show(k, len(cands), started)
            shown = now
        info = cand.describe()
        hw = hardware(
            spec,
            cand.gpu,
            tp=cand.tp,
            pp=cand.pp,
            ep=cand.ep,
            weight_dtype=cand.weight_dtype,
            kv_dtype=cand.kv_dtype,
            engine=EngineConfig(engine=engine),
        )
        key = (cand.gpu.key, cand.tp, cand.pp, cand.ep, cand.weight_dtype)
        if fits_cache.get(key):  # the weights alone do not fit: no KV format helps
            rejected.append({**info, "reason": fits_cache[key]})
            continue
        try:
            _, slots_longest = memory_limit(hw, inp.longest + out.longest)
            _, slots = memory_limit(hw, inp.mean + out.mean)
        except DoesNotFit as err:
            fits_cache[key] = f"does not fit: {err}"
            rejected.append({**info, "reason": fits_cache[key]})
            continue
        if slots_longest < 1:
            rejected.append(
                {
                    **info,
                    "reason": f"does not fit: the KV cache holds less than one {inp.longest + out.longest:.0f}-token request",
                }
            )
            continue
        cap = batch_slots(hw, slots)
        # communication-bound is a property of the option, judged with every slot busy (not at
        # the target's load, so that a looser SLO or a lower target cannot make it pass or fail)
        full = closed_loop(hw, coef, concurrency=cap, input_len=inp.mean, output_len=out.mean, max_running=cap)
        share = float(full.decode_step.comm_share)
        if share > max_comm_share:
            rejected.append(
                {**info, "reason": f"communication-bound: the link takes {share:.0%} of a decode step at full batch"}
            )
            continue
        if target.kind == "concurrency":
            load = concurrency_load(
                hw,
                coef,
                inp=inp,
                out=out,
                cap=cap,
                concurrency=target.value,
                ttft_slo_s=ttft_slo_s,
                tpot_slo_s=tpot_slo_s,
                headroom=headroom,
            )
        else:
            load = rate_load(
                hw,
                coef,
                inp=inp,
                out=out,
                cap=cap,
                rate=rate,
                ttft_slo_s=ttft_slo_s,
                tpot_slo_s=tpot_slo_s,
                stat=stat,
                burstiness=burstiness,
                headroom=headroom,
            )
        if isinstance(load, str):
            rejected.append({**info, "reason": load})
            continue
        price = table.usd_per_gpu_hour(cand.gpu)
        if price is None:
            rejected.append({**info, "reason": f"no price for {cand.gpu.key}: add it to a --price file"})
            continue
        _, total_replicas = replicas_needed(
            target.value if target.kind == "concurrency" else rate, load.capacity, headroom
        )
        total_gpus = total_replicas * cand.gpus_per_replica
        cost = total_gpus * price
        rows.append(
            {
                **info,
                "replicas": total_replicas,
                "spare_replicas": headroom.spares,
                "total_gpus": total_gpus,
                "capacity_per_replica": load.capacity,
                "utilization": load.utilization,
                "ttft_s": load.ttft_s,
                "tpot_s": load.tpot_s,
                "comm_share": load.comm_share,
                "cost_per_hour": cost,
                "cost_per_million_output_tokens": cost / (load.output_tps * 3600) * 1e6,
                "weights_GiB_per_gpu": weight_bytes_per_gpu(spec, cand.weight_dtype, hw.layout, hw.gpu).total / GiB,
            }
        )
    if show and shown:
        show(len(cands), len(cands), started)
    plans = pd.DataFrame(rows, columns=[*PLAN_COLUMNS, "weights_GiB_per_gpu"])
    if not plans.empty:
        plans = plans.sort_values(["cost_per_hour", "total_gpus", "ttft_s"], kind="stable").reset_index(drop=True)
    if simulate_top and target.kind != "concurrency" and not plans.empty:
        plans = _check_by_simulation(
            plans,
            spec,
            coef,
            engine=engine,
            inp=inp,
            out=out,
            rate=rate,
            headroom=headroom,
            top=simulate_top,
            ttft_slo_s=ttft_slo_s,
            tpot_slo_s=tpot_slo_s,
            stat=stat,
            burstiness=burstiness,
        )
        notes += simulation_notes(plans)
    elif simulate_top and target.kind == "concurrency":
        notes.append("the simulation check runs for request-rate and output-token targets only")
    if not plans.empty:
        notes += low_utilization_notes(
            plans.iloc[0], spec, coef, engine, inp, out, (ttft_slo_s, tpot_slo_s), {g.key: g for g in gpu_list}
        )
    rej = pd.DataFrame(rejected, columns=[*PLAN_COLUMNS[:7], "reason"])
    notes += too_big_notes(rej, gpu_list, plans, max(gpu_counts, default=1))
    if plans.empty:
        notes.append(f"no option carries {target.describe()} within the SLOs; see rejected for why each failed")
    return Plan(
        model=spec.name,
        target=target,
        slo={"ttft_s": ttft_slo_s, "tpot_s": tpot_slo_s, "stat": stat, "burstiness": burstiness},
        plans=plans,
        rejected=rej,
        searched=len(cands) + len(invalid),
        search_s=time.perf_counter() - started,
        notes=notes,
    )
