"""Runs NVIDIA aiconfigurator on cases prepared by ``benchmarks/peers.py``; runs in ``.venv-peers``.

    .venv-peers/bin/python benchmarks/peers_worker.py inventory OUT.json
    .venv-peers/bin/python benchmarks/peers_worker.py estimate CASES.json OUT.json

``inventory`` writes the installed version, the systems and backends that have a performance
database, and the model ids whose Hugging Face config ships in the wheel. ``estimate`` reads a list
of cases (fields below) and writes one result per case. Imports aiconfigurator and the standard
library only, never gpucap: the two tools live in separate virtual environments.

Case fields: case_id, model_path, system, backend, tp, pp, attn_dp, moe_tp, moe_ep,
gemm_quant_mode / moe_quant_mode / kvcache_quant_mode (names of aiconfigurator's quant enums, or
null for the checkpoint's own), isl, osl (tokens), mode ("closed", "saturation" or "rate"),
load (whole case: concurrency, number of prompts (null: unbounded) or requests/s), replicas
(copies of the tp x pp x attn_dp worker), max_batch (engine's running-request cap per rank),
ctx_budget (engine's batched-token budget per step).

Each estimate is one ``cli_estimate(mode="agg")`` call: aiconfigurator's aggregated
(in-flight batching) model at a fixed batch of running requests per attention rank. The batch is
chosen per mode:

- closed: the concurrency per rank (``load / (replicas x pp x attn_dp)``, rounded, at least 1);
- saturation: the prompts per rank, capped by ``max_batch`` and by the largest batch whose KV
  cache aiconfigurator's own memory model accepts (bisection on its KV-cache check);
- rate: the batch whose request rate (``seq/s``) meets the target rate per replica, by
  bisection, with TTFT/TPOT interpolated linearly between the two neighbouring integer batches;
  when even the largest batch that fits cannot reach the rate the case is "overloaded" and the
  result at that batch is reported.

Context tokens per step (aiconfigurator's ``ctx_tokens``, which also sets the prefill step that
TTFT is made of): in saturation the queue of prompts is never empty, so every step is filled to
the engine's token budget (``ctx_budget``), but no more than ``(batch - 1) x isl``, the guard
aiconfigurator's own sweep applies; at a concurrency or a rate prompts arrive one at a time, so
it is aiconfigurator's default, ``isl``, chunked at the engine's budget.
Output tokens/s is ``seq/s x osl x replicas``: aiconfigurator's ``tokens/s`` counts ``osl - 1``
tokens per request (the first comes with the prefill) while the measurements count all of them.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from typing import Any

logging.disable(logging.WARNING)

from aiconfigurator.cli.api import cli_estimate  # noqa: E402
from aiconfigurator.sdk.perf_database import (  # noqa: E402
    get_latest_database_version,
    get_supported_databases,
)

_VERSIONS: dict[tuple[str, str], str | None] = {}


class NoFit(RuntimeError):
    """Not even one request fits aiconfigurator's memory model."""


def backend_version(system: str, backend: str) -> str:
    """Latest database version for a system and backend (resolved once: it parses many files)."""
    key = (system, backend)
    if key not in _VERSIONS:
        _VERSIONS[key] = get_latest_database_version(system=system, backend=backend)
    version = _VERSIONS[key]
    if version is None:
        raise ValueError(f"no aiconfigurator database for system={system}, backend={backend}")
    return version


def ctx_tokens(batch: int, isl: int, budget: int, full: bool) -> int:
    """Context tokens per mixed step: ``isl`` chunked at the engine's budget, or when ``full``
    (saturation) the whole budget, at most (batch - 1) x isl."""
    if batch <= 1 or not full:
        return max(1, min(isl, budget))
    return max(1, min(budget, (batch - 1) * isl))


def run_one(case: dict[str, Any], batch: int) -> Any:
    """One aggregated estimate at ``batch`` running requests per rank (aiconfigurator's result)."""
    isl, osl = int(round(case["isl"])), int(round(case["osl"]))
    kwargs: dict[str, Any] = {
        "mode": "agg",
        "backend_name": case["backend"],
        "backend_version": backend_version(case["system"], case["backend"]),
        "isl": isl,
        "osl": osl,
        "batch_size": int(batch),
        "ctx_tokens": ctx_tokens(batch, isl, int(case["ctx_budget"]), case["mode"] == "saturation"),
        "tp_size": int(case["tp"]),
        "pp_size": int(case["pp"]),
        "attention_dp_size": int(case["attn_dp"]),
        "moe_tp_size": int(case["moe_tp"]),
        "moe_ep_size": int(case["moe_ep"]),
    }
    for key in ("gemm_quant_mode", "moe_quant_mode", "kvcache_quant_mode"):
        if case.get(key):
            kwargs[key] = case[key]
    return cli_estimate(case["model_path"], case["system"], **kwargs)


def fits(case: dict[str, Any], batch: int) -> tuple[bool, Any]:
    """Whether ``batch`` requests per rank fit (weights, activations and KV cache), and the result."""
    try:
        result = run_one(case, batch)
    except RuntimeError as exc:
        if "OOM" in str(exc):
            return False, None
        raise
    return not result.summary.check_kv_cache_oom(), result


def largest_fitting(case: dict[str, Any], upper: int) -> tuple[int, Any]:
    """Largest batch <= upper that fits, by bisection; raises NoFit when one request does not."""
    ok, result = fits(case, upper)
    if ok:
        return upper, result
    ok, low_result = fits(case, 1)
    if not ok:
        raise NoFit(f"one {case['isl']:.0f}+{case['osl']:.0f}-token request does not fit in memory")
    lo, hi = 1, upper  # lo fits, hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        ok, mid_result = fits(case, mid)
        if ok:
            lo, low_result = mid, mid_result
        else:
            hi = mid
    return lo, low_result


def metrics(result: Any, osl: float, replicas: int) -> dict[str, float]:
    """Whole-case output tokens/s (all output tokens), TTFT and TPOT (ms) of one estimate."""
    seq_per_s = float(result.raw["seq/s"])
    return {
        "output_tok_s": seq_per_s * round(osl) * replicas,
        "ttft_ms": float(result.ttft),
        "tpot_ms": float(result.tpot),
        "seq_per_s": seq_per_s,
    }


def estimate(case: dict[str, Any]) -> dict[str, Any]:
    """One case: the batch per rank, what limited it, and the whole-case metrics."""
    replicas = int(case["replicas"])
    ranks = replicas * int(case["pp"]) * int(case["attn_dp"])
    cap = int(case["max_batch"])
    mode = case["mode"]
    out: dict[str, Any] = {"backend_version": backend_version(case["system"], case["backend"])}
    if mode == "closed":
        wanted = max(1, round(float(case["load"]) / ranks))
        batch, result = largest_fitting(case, min(wanted, cap))
        out["limit"] = "load" if batch == wanted else ("engine cap" if batch == cap else "memory")
        out.update(metrics(result, case["osl"], replicas))
    elif mode == "saturation":
        prompts = case["load"]
        wanted = cap if prompts is None else max(1, round(float(prompts) / ranks))
        batch, result = largest_fitting(case, min(wanted, cap))
        out["limit"] = "prompts" if batch == wanted else ("engine cap" if batch == cap else "memory")
        out.update(metrics(result, case["osl"], replicas))
    elif mode == "rate":
        target = float(case["load"]) / replicas  # requests/s per replica
        top, top_result = largest_fitting(case, cap)
        top_m = metrics(top_result, case["osl"], replicas)
        if top_m["seq_per_s"] < target:
            batch, out["limit"] = top, "overloaded"
            out.update(top_m)
        else:
            lo, hi, hi_m = 0, top, top_m  # seq/s(lo) < target <= seq/s(hi); seq/s(0) = 0
            lo_m: dict[str, float] = {"seq_per_s": 0.0}
            while hi - lo > 1:
                mid = (lo + hi) // 2
                mid_m = metrics(run_one(case, mid), case["osl"], replicas)
                if mid_m["seq_per_s"] >= target:
                    hi, hi_m = mid, mid_m
                else:
                    lo, lo_m = mid, mid_m
            if lo == 0:  # below one request in flight: latencies of batch 1
                lo_m = hi_m
            span = hi_m["seq_per_s"] - lo_m["seq_per_s"]
            frac = (target - lo_m["seq_per_s"]) / span if span > 0 else 1.0
            batch = hi
            out["limit"] = "rate"
            out["output_tok_s"] = target * round(case["osl"]) * replicas
            for key in ("ttft_ms", "tpot_ms"):
                out[key] = lo_m[key] + frac * (hi_m[key] - lo_m[key])
            out["seq_per_s"] = target
    else:
        raise ValueError(f"mode {mode!r} is not closed, saturation or rate")
    out["batch_per_rank"] = batch
    out["ctx_tokens"] = ctx_tokens(batch, int(round(case["isl"])), int(case["ctx_budget"]), mode == "saturation")
    raw = (result if mode != "rate" else top_result).raw
    out.update({k: str(raw.get(k)) for k in ("gemm", "moe", "kvcache", "fmha")})
    return out


def inventory() -> dict[str, Any]:
    """Installed version, {system: [backends]} with a database, and the shipped model ids."""
    from importlib import metadata, resources

    configs = resources.files("aiconfigurator_core") / "model_configs"
    models = sorted(
        p.name[: -len("_config.json")].replace("--", "/", 1)
        for p in configs.iterdir()
        if p.name.endswith("_config.json") and not p.name.endswith("_hf_quant_config.json")
    )
    systems = {
        system: sorted(b for b, versions in backends.items() if versions)
        for system, backends in get_supported_databases().items()
    }
    return {"version": metadata.version("aiconfigurator"), "systems": systems, "models": models}


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "inventory":
        with open(argv[1], "w") as f:
            json.dump(inventory(), f)
        return 0
    if len(argv) != 3 or argv[0] != "estimate":
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        cases = json.load(f)
    results = []
    for case in cases:
        t0 = time.perf_counter()
        try:
            row = {"ok": True, "error": ""} | estimate(case)
        except Exception as exc:  # one case's failure is its result, not the run's
            row = {"ok": False, "error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"}
        row["case_id"] = case["case_id"]
        row["seconds"] = round(time.perf_counter() - t0, 3)
        results.append({k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()})
    with open(argv[2], "w") as f:
        json.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
