"""Disaggregated serving: separate prefill and decode pools (xPyD) against one aggregated pool.

Prefill pool (x replicas of ``tp_p`` GPUs): each request's prompt is computed in full steps of
M = ``max_num_batched_tokens`` prompt tokens, so a busy replica serves ``mu = M / (I x t_M)``
requests/s (``t_M``: the step time of M prompt tokens with their share ``M / I`` of the prompt's
attention pairs). A lone prompt takes ``s x t(I / s)`` in ``s = ceil(I / M)`` steps; queueing for
the replica adds the M/D/1 mean wait ``rho / (2 mu (1 - rho))`` at ``rho = lambda / (x mu)``.

KV transfer: the prompt's KV moves from the prefill to the decode GPUs before the first token,
each decode GPU receiving its shard, ``I x kv bytes per token per GPU`` (plus one copy of a hybrid
model's state), over the link between the pools (``data/links.csv``: the GPUs' own NVLink inside
a node, a 200 or 400 Gb/s NIC per GPU between nodes) at its per-direction rate; protocol and
set-up time are not counted. TTFT = front end + wait + prefill + transfer.

Decode pool (y replicas of ``tp_d`` GPUs): decode-only steps of B sequences at context
``I + O / 2``; the largest B whose step meets the TPOT SLO, within what memory holds and
``max_num_seqs``, serves ``B / (O x t_B)`` requests/s per replica.

Aggregated: the smallest count of replicas whose open-loop mean TTFT and TPOT
(``gpucap.physics.batching.open_loop``) meet both SLOs at ``lambda / n`` each. All statistics here are
means; ``gpucap.queueing.simulate`` checks each pool (``check_by_simulation``).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpucap.catalog.gpus import DATA_DIR
from gpucap.catalog.prices import Prices, read_prices
from gpucap.config import Hardware, hardware
from gpucap.errors import DoesNotFit
from gpucap.physics.batching import open_loop
from gpucap.physics.coefficients import Coefficients, front_end
from gpucap.physics.memory import batch_slots, kv_bytes_per_token_per_gpu, memory_limit, state_bytes_per_request_per_gpu
from gpucap.physics.requests import Requests
from gpucap.physics.step import prefill_pairs_per_layer, step_work
from gpucap.physics.steptime import step_time
from gpucap.textfiles import read_text
from gpucap.units import GB

LINKS_FILE = DATA_DIR / "links.csv"
MAX_REPLICAS = 4096


@dataclass(frozen=True)
class Link:
    """How the KV cache moves between the pools: ``bytes_per_s`` per GPU and direction (None:
    the GPUs' own link, from the GPU catalog)."""

    key: str
    name: str
    bytes_per_s: float | None
    source: str


def read_links(path: str | Path | None = None) -> dict[str, Link]:
    """The link kinds of ``data/links.csv``."""
    path = Path(path or LINKS_FILE)
    rows = list(csv.DictReader(io.StringIO(read_text(path, "link file"))))
    out = {}
    for k, row in enumerate(rows, 2):
        rate = (row.get("GB_per_s_per_direction_per_gpu") or "").strip()
        try:
            value = float(rate) * GB if rate else None
        except ValueError:
            raise ValueError(f"{path} line {k}: GB_per_s_per_direction_per_gpu {rate!r} is not a number") from None
        out[row["key"]] = Link(row["key"], row["name"], value, row["source"])
    return out


def transfer_s(hw_decode: Hardware, prompt_tokens: float, link: Link) -> float:
    """Seconds to move one prompt's KV (and a hybrid's state) to a decode GPU over ``link``."""
    lay = hw_decode.layout
    per_gpu = prompt_tokens * kv_bytes_per_token_per_gpu(hw_decode.spec, hw_decode.kv_dtype, lay)
    per_gpu += state_bytes_per_request_per_gpu(hw_decode.spec, lay, copies=1)
    rate = link.bytes_per_s if link.bytes_per_s is not None else hw_decode.gpu.link_bytes_per_s
    return per_gpu / rate


def _prefill_step_s(hw: Hardware, coef: Coefficients, tokens: float, pairs: float) -> float:
    work = step_work(hw, decode_tokens=0.0, decode_context=0.0, prefill_tokens=tokens, prefill_pairs=pairs)
    return float(step_time(hw, work, coef).total_s)


@dataclass(frozen=True)
class Pool:
    """One pool of a plan: its replicas and GPUs, and the mean latencies it gives."""

    role: str  # "aggregated", "prefill", "decode"
    hw: Hardware
    replicas: int
    ttft_s: float
    tpot_s: float
    per_replica_rate: float  # requests/s each replica carries at the plan

    @property
    def tp(self) -> int:
        return self.hw.layout.tp

    @property
    def gpus(self) -> int:
        return self.tp * self.replicas


def prefill_pool(
    hw: Hardware, coef: Coefficients, *, rate: float, input_len: float, ttft_budget_s: float
) -> Pool | None:
    """Fewest prefill replicas whose mean TTFT before the transfer stays within ``ttft_budget_s``
    (module docstring); None when a lone prompt alone exceeds it."""
    m = float(hw.engine.max_num_batched_tokens or 8192)
    pairs = float(prefill_pairs_per_layer(hw.spec, input_len))
    t_full = _prefill_step_s(hw, coef, m, pairs * m / input_len)
    mu = m / (input_len * t_full)
    s = math.ceil(input_len / m)
    alone = s * _prefill_step_s(hw, coef, input_len / s, pairs / s) + front_end(hw.engine, coef).latency_s
    if alone > ttft_budget_s:
        return None
    n = max(1, math.ceil(rate / mu))
    while n <= MAX_REPLICAS:
        rho = rate / (n * mu)
        wait = rho / (2 * mu * (1 - rho)) if rho < 1 else math.inf
        if alone + wait <= ttft_budget_s:
            return Pool("prefill", hw, n, alone + wait, math.nan, rate / n)
        n += 1
    return None


def decode_pool(
    hw: Hardware, coef: Coefficients, *, rate: float, input_len: float, output_len: float, tpot_slo_s: float
) -> Pool | None:
    """Fewest decode replicas at the largest batch whose step meets the TPOT SLO (module
    docstring); None when one sequence alone misses it or memory holds none."""
    try:
        _, holds = memory_limit(hw, input_len + output_len)
    except DoesNotFit:
        return None
    cap = int(batch_slots(hw, holds))
    if cap < 1:
        return None
    batch = np.unique(np.round(np.geomspace(1, cap, 200)))
    work = step_work(hw, decode_tokens=batch, decode_context=input_len + output_len / 2)
    t = np.asarray(step_time(hw, work, coef).total_s, dtype=float)
    ok = np.flatnonzero(t <= tpot_slo_s)
    if ok.size == 0:
        return None
    b, t_b = float(batch[ok[-1]]), float(t[ok[-1]])
    per_replica = b / (output_len * t_b)
    n = max(1, math.ceil(rate / per_replica))
    return Pool("decode", hw, n, math.nan, t_b, rate / n)


def aggregated_pool(
    hw: Hardware,
    coef: Coefficients,
    *,
    rate: float,
    input_len: float,
    output_len: float,
    ttft_slo_s: float,
    tpot_slo_s: float,
) -> Pool | None:
    """Fewest aggregated replicas whose open-loop mean TTFT and TPOT meet both SLOs."""
    try:
        _, holds = memory_limit(hw, input_len + output_len)
    except DoesNotFit:
        return None
    cap = batch_slots(hw, holds)
    counts = np.unique(np.round(np.geomspace(1, MAX_REPLICAS, 400))).astype(int)
    with np.errstate(invalid="ignore", divide="ignore"):  # the lightest loads of the grid
        pt = open_loop(hw, coef, Requests(input_len, output_len, max_running=cap), request_rate=rate / counts)
    ok = np.flatnonzero((np.asarray(pt.ttft_s) <= ttft_slo_s) & (np.asarray(pt.tpot_s) <= tpot_slo_s))
    if ok.size == 0:
        return None
    k = int(ok[0])  # the grid step before it failed: search the counts in between one by one
    lo = int(counts[k - 1]) + 1 if k > 0 else 1
    for n in range(lo, int(counts[k]) + 1):
        one = open_loop(hw, coef, Requests(input_len, output_len, max_running=cap), request_rate=rate / n)
        if float(one.ttft_s) <= ttft_slo_s and float(one.tpot_s) <= tpot_slo_s:
            return Pool("aggregated", hw, n, float(one.ttft_s), float(one.tpot_s), rate / n)
    return None


def compare_disaggregated(
    model: str,
    gpu: str,
    *,
    rate: float,
    input_len: float,
    output_len: float,
    ttft_slo_s: float,
    tpot_slo_s: float,
    tp: Sequence[int] = (1, 2, 4, 8),
    weight_dtype: str | None = None,
    link: str = "nic-400g",
    engine: str = "vllm",
    coefficients: Coefficients | None = None,
    prices: Prices | str | Path | None = None,
) -> tuple[pd.DataFrame, list[str]]:
    """Aggregated serving against separate prefill and decode pools for the same target and SLOs:
    the cheapest aggregated plan and the cheapest split (each pool at its own best tp), with
    GPUs, $/hour, mean TTFT (the split's with the KV transfer) and TPOT; and why options were
    left out (a KV transfer alone above the TTFT SLO is said so)."""
    links = read_links()
    if link not in links:
        raise ValueError(f"unknown link {link!r}; use one of {', '.join(links)} (data/links.csv)")
    price = (prices if isinstance(prices, Prices) else read_prices(prices)).usd_per_gpu_hour(hardware(model, gpu).gpu)
    notes: list[str] = []
    options: dict[int, Hardware] = {}
    aggregated: Pool | None = None
    for t in tp:
        try:
            hw = hardware(model, gpu, tp=t, weight_dtype=weight_dtype, engine=engine)
        except ValueError as exc:
            notes.append(f"tp={t}: {exc}")
            continue
        options[t] = hw
        coef = coefficients or Coefficients.for_engine(hw.engine.engine)
        agg = aggregated_pool(
            hw,
            coef,
            rate=rate,
            input_len=input_len,
            output_len=output_len,
            ttft_slo_s=ttft_slo_s,
            tpot_slo_s=tpot_slo_s,
        )
        if agg and (aggregated is None or agg.gpus < aggregated.gpus):
            aggregated = agg
    split: tuple[Pool, Pool, float] | None = None
    for t_d, hw_d in options.items():
        coef = coefficients or Coefficients.for_engine(hw_d.engine.engine)
        move = transfer_s(hw_d, input_len, links[link])
        if move >= ttft_slo_s:
            notes.append(
                f"decode tp={t_d}: moving a {input_len:,.0f}-token prompt's KV over {link} takes {move:.3g} s, at or "
                f"above the TTFT SLO of {ttft_slo_s:g} s: no split with it is offered"
            )
            continue
        dec = decode_pool(hw_d, coef, rate=rate, input_len=input_len, output_len=output_len, tpot_slo_s=tpot_slo_s)
        if dec is None:
            notes.append(f"decode tp={t_d}: one sequence alone misses the TPOT SLO, or memory holds none")
            continue
        for hw_p in options.values():
            pre = prefill_pool(hw_p, coef, rate=rate, input_len=input_len, ttft_budget_s=ttft_slo_s - move)
            if pre is not None and (split is None or pre.gpus + dec.gpus < split[0].gpus + split[1].gpus):
                split = (pre, dec, move)
    rows = []
    if aggregated is not None:
        rows.append(_row("aggregated", f"{aggregated.replicas} x tp{aggregated.tp}", [aggregated], 0.0, price))
    if split is not None:
        pre, dec, move = split
        label = f"{pre.replicas}P x tp{pre.tp} + {dec.replicas}D x tp{dec.tp}"
        rows.append(_row("disaggregated", label, [pre, dec], move, price))
    return pd.DataFrame(rows), notes


def _row(kind: str, label: str, pools: list[Pool], move: float, price: float | None) -> dict[str, Any]:
    gpus = sum(p.gpus for p in pools)
    ttft = pools[0].ttft_s + move
    tpot = pools[-1].tpot_s
    return {
        "serving": kind,
        "pools": label,
        "gpus": gpus,
        "usd_per_hour": gpus * price if price is not None else math.nan,
        "ttft_s": ttft,
        "tpot_s": tpot,
        "kv_transfer_s": move,
        "plan": pools,
    }


def check_by_simulation(
    row: pd.Series | dict[str, Any], *, rate: float, input_len: float, output_len: float, requests: int = 600
) -> dict[str, float]:
    """Mean TTFT and TPOT of a ``compare_disaggregated`` row by the step-level simulation: an aggregated
    replica at its share of the rate; for a split, a prefill replica serving one-token answers
    (its TTFT, plus the transfer) and a decode replica whose requests arrive with their prompt's
    KV (all but the last prompt token cached)."""
    from gpucap.queueing.simulate import kv_capacity_tokens, simulate

    def run(pool: Pool, out: float, cached: float) -> Any:
        hw = pool.hw
        coef = Coefficients.for_engine(hw.engine.engine)
        return simulate(
            hw,
            coef,
            request_rate=pool.per_replica_rate,
            num_requests=requests,
            input_len=input_len,
            output_len=out,
            max_running=batch_slots(hw, context_tokens=input_len + output_len),
            kv_capacity_tokens=kv_capacity_tokens(hw, input_len + output_len),
            cached_tokens=cached,
        )

    pools: list[Pool] = row["plan"]
    if len(pools) == 1:
        sim = run(pools[0], output_len, 0.0)
        return {"ttft_s": float(np.nanmean(sim.ttft_s)), "tpot_s": float(np.nanmean(sim.tpot_s))}
    pre, dec = pools
    first = run(pre, 1.0, 0.0)
    decode = run(dec, output_len, input_len - 1)
    return {
        "ttft_s": float(np.nanmean(first.ttft_s)) + float(row["kv_transfer_s"]),
        "tpot_s": float(np.nanmean(decode.tpot_s)),
    }
