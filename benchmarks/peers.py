"""gpucap next to NVIDIA aiconfigurator on the same published measurements.

    python benchmarks/peers.py --setup        # once: .venv-peers with aiconfigurator from PyPI
    .venv/bin/python benchmarks/peers.py [CASES.csv] [--out-dir benchmarks/out] [--show-skipped]

Picks the rows of ``measured-public.csv`` that aiconfigurator can represent, runs it on each in
its own virtual environment (``.venv-peers``, never a dependency of gpucap: a subprocess runs
``benchmarks/peers_worker.py`` once for all cases, so its import and database loading are paid
once), runs gpucap on the same rows (``gpucap.calibration.validate.validate``, the predictions of
``benchmarks/accuracy.py``), and prints both tools' absolute errors ``|predicted / measured - 1|``
per case and as median / p90 per metric over the rows both tools predicted. Writes the per-case
table to ``benchmarks/out/peers-<time>.csv`` (a new name each run).

Rows taken, and why others are skipped:

- GPU: one aiconfigurator has a database for (A100 SXM, H100 SXM, H200 SXM, B200, GB200,
  RTX PRO 6000 Blackwell as ``rtx_pro_6000_server``, L40S). MI300X has none.
- Engine: vLLM, SGLang, TensorRT-LLM map to its backends of the same name; NIM runs TensorRT-LLM
  underneath and maps to ``trtllm``. The version is always the newest database aiconfigurator
  ships for that GPU (in 0.12.0: vLLM 0.24.0, SGLang 0.5.14, TensorRT-LLM 1.3.0rc20 on Hopper and
  Blackwell; vLLM 0.14.0, SGLang 0.5.10, TensorRT-LLM 1.0.0 on A100), not the version measured:
  approximate for every row.
- Model: its Hugging Face config must ship in the wheel (there is no network for the hub).
  Same-architecture stand-ins: Llama 3.1 8B / 3.3 70B / 3.1 405B Instruct -> Meta-Llama-3.1-8B /
  70B / 405B; DeepSeek-R1-0528 -> DeepSeek-R1. Not shipped, so skipped: Qwen3-14B, GLM-4.5-Air,
  GLM-4.6, Llama 2, Falcon-180B.
- Load: saturation, fixed concurrency, Poisson request rate and single requests. Static-batch
  rows and rows without input/output lengths are skipped, and so are runs with speculative
  decoding (neither tool is set up to model it).
- Weights: bf16/fp16 -> ``bfloat16``; fp8 -> ``fp8_static`` GEMMs and ``fp8`` MoE for
  TensorRT-LLM / NIM (NVIDIA's per-tensor ModelOpt checkpoints), ``fp8_block`` for vLLM / SGLang
  (the block-scaled Qwen FP8 checkpoints those runs serve); nvfp4 -> ``nvfp4`` (Blackwell only:
  skipped elsewhere). gpt-oss always uses its checkpoint's own MXFP4 experts, whatever precision
  label the source table carries. fp8 on A100 (no FP8 tensor cores: vLLM runs it weight-only) is
  skipped. KV cache: ``auto`` -> bf16, ``fp8`` -> fp8, ``fp8-on-blackwell``
  -> fp8 on Blackwell, bf16 elsewhere (as gpucap reads the same column).
- Parallelism: tp, pp and attention-DP as in the row; expert parallel ``moe_ep = ep`` and
  ``moe_tp = tp x attn_dp / ep``; ``num_gpus / (tp x pp x attn_dp)`` independent replicas.
- Lengths: the row's isl/osl (for ShareGPT runs the means, rounded); for sglang's uniform random
  lengths the means are half the stated maxima, as gpucap takes them.

How each load becomes aiconfigurator's one input, a fixed batch of running requests per rank
(details in ``peers_worker.py``): concurrency -> that batch; saturation -> all prompts, capped by
the engine's running-request limit (gpucap's engine defaults: vLLM 1024 on >= 70 GiB GPUs except
A100, else 256; SGLang 1024; TensorRT-LLM 2048) and by what aiconfigurator's own memory model
fits; request rate -> the batch whose throughput meets the rate (Little's law, no queueing).
Context tokens per step (``ctx_tokens``): in saturation the engine's per-step token budget (8192 on
these GPUs, vLLM on A100 2048), since the prompt queue keeps it full; at a concurrency or a rate
aiconfigurator's default, one prompt (``isl``) per step, chunked at that budget. aiconfigurator
reports a steady state, so its TTFT in saturation runs has no queueing, unlike the measurements
(where TTFT is mostly time in the queue); gpucap simulates the queue. The summary is printed by
load mode as well for that reason.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpucap.calibration.corrections import read_public
from gpucap.calibration.validate import METRICS, validate
from gpucap.catalog.gpus import get_gpu
from gpucap.config import EngineConfig

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CASES = REPO.parent / "shared" / "data" / "measured-public.csv"
DEFAULT_VENV = REPO / ".venv-peers"
WORKER = Path(__file__).resolve().parent / "peers_worker.py"
AICONFIGURATOR = "aiconfigurator==0.12.0"  # the version the mapping above was read from

SYSTEMS = {
    "A100-SXM-80GB": "a100_sxm",
    "H100-SXM-80GB": "h100_sxm",
    "H200-SXM-141GB": "h200_sxm",
    "B200-180GB": "b200_sxm",
    "GB200-192GB": "gb200",
    "RTX-PRO-6000-96GB": "rtx_pro_6000_server",
    "L40S-48GB": "l40s",
}
BLACKWELL = {"b200_sxm", "gb200", "b300_sxm", "gb300", "rtx_pro_6000_server"}
NO_FP8 = {"a100_sxm"}  # no FP8 tensor cores
BACKENDS = {"vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm", "nim": "trtllm"}
MODEL_STAND_INS = {
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B-Instruct": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.3-70B-Instruct": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.1-405B-Instruct": "meta-llama/Meta-Llama-3.1-405B",
    "deepseek-ai/DeepSeek-R1-0528": "deepseek-ai/DeepSeek-R1",
}
CHECKPOINT_QUANT = ("openai/gpt-oss-",)  # models whose shipped config carries their quantization
LOADS = {"fixed-concurrency": "closed", "single-request": "closed", "saturation": "saturation", "poisson": "rate"}


class Skip(ValueError):
    """The row cannot be given to aiconfigurator faithfully; the message says why."""


def _num(row: pd.Series, col: str) -> float | None:
    v = row.get(col)
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def quant_modes(weight_dtype: str, backend: str, model: str) -> tuple[str | None, str | None]:
    """aiconfigurator GEMM and MoE quant modes for a weight dtype (None: the checkpoint's own)."""
    if model.startswith(CHECKPOINT_QUANT):
        return None, None
    if weight_dtype in ("", "bf16", "fp16"):
        return "bfloat16", "bfloat16"
    if weight_dtype == "fp8":
        return ("fp8_static", "fp8") if backend == "trtllm" else ("fp8_block", "fp8_block")
    if weight_dtype == "nvfp4":
        return "nvfp4", "nvfp4"
    raise Skip(f"weight dtype {weight_dtype!r} has no mapping for {model}")


def map_case(row: pd.Series, inventory: dict[str, Any]) -> dict[str, Any]:
    """One measured row as an aiconfigurator case (see the module docstring), or Skip."""
    gpu, engine, model = str(row["gpu"]), str(row["engine"]).lower(), str(row["model"])
    system = SYSTEMS.get(gpu)
    if system is None:
        raise Skip(f"GPU {gpu}: no aiconfigurator system")
    backend = BACKENDS.get(engine)
    if backend is None:
        raise Skip(f"engine {engine}: no aiconfigurator backend")
    if backend not in inventory["systems"].get(system, []):
        raise Skip(f"no aiconfigurator {backend} database for {system}")
    model_path = MODEL_STAND_INS.get(model, model)
    if model_path not in inventory["models"]:
        raise Skip(f"model {model}: config not shipped with aiconfigurator")
    if "speculative" in str(row.get("notes", "")).lower():
        raise Skip("speculative decoding in the measured run")
    mode = LOADS.get(str(row["load_mode"]))
    if mode is None:
        raise Skip(f"load mode {row['load_mode']} not mapped")
    isl, osl = _num(row, "isl"), _num(row, "osl")
    if not isl or not osl:
        raise Skip("input or output length not stated")
    notes = []
    if "nominal maxima" in str(row.get("length_dist", "")):
        isl, osl = isl / 2.0, osl / 2.0
        notes.append("uniform lengths: means = half the maxima")
    wd = row.get("weight_dtype")
    wd = str(wd).lower() if isinstance(wd, str) else ""
    if wd == "nvfp4" and system not in BLACKWELL and not model.startswith(CHECKPOINT_QUANT):
        raise Skip(f"nvfp4 weights on {gpu}")
    if wd == "fp8" and system in NO_FP8 and not model.startswith(CHECKPOINT_QUANT):
        raise Skip(f"fp8 weights on {gpu}: run weight-only there, which aiconfigurator does not model")
    gemm, moe = quant_modes(wd, backend, model)
    kv = str(row.get("kv_cache_dtype") or "auto")
    kv_mode = "fp8" if kv == "fp8" or (kv == "fp8-on-blackwell" and system in BLACKWELL) else "bfloat16"

    num_gpus, pp = int(_num(row, "num_gpus") or 1), int(_num(row, "pp") or 1)
    attn_dp, ep = int(_num(row, "attn_dp") or 1), int(_num(row, "ep") or 1)
    tp = int(_num(row, "tp") or 0) or max(num_gpus // (pp * attn_dp), 1)
    per_replica = tp * pp * attn_dp
    if num_gpus % per_replica or (tp * attn_dp) % ep:
        raise Skip(f"parallelism num_gpus={num_gpus} tp={tp} pp={pp} ep={ep} attn_dp={attn_dp} is not a layout")

    if mode == "rate":
        rate = _num(row, "request_rate")
        if rate is None:
            raise Skip("poisson row without request_rate")
        load: float | None = rate
        if math.isinf(rate):
            mode, load = "saturation", _num(row, "num_prompts")
    elif mode == "saturation":
        load = _num(row, "num_prompts")
        load = None if load is None or math.isinf(load) else load
    elif row["load_mode"] == "single-request":
        load = 1.0
    else:
        load = _num(row, "concurrency")
        if load is None:
            raise Skip("fixed-concurrency row without concurrency")
    knobs = EngineConfig(engine="trtllm" if engine == "nim" else engine).resolve(get_gpu(gpu))
    return {
        "case_id": str(row["case_id"]),
        "model_path": model_path,
        "system": system,
        "backend": backend,
        "tp": tp,
        "pp": pp,
        "attn_dp": attn_dp,
        "moe_tp": tp * attn_dp // ep,
        "moe_ep": ep,
        "gemm_quant_mode": gemm,
        "moe_quant_mode": moe,
        "kvcache_quant_mode": kv_mode,
        "isl": isl,
        "osl": osl,
        "mode": mode,
        "load": load,
        "replicas": num_gpus // per_replica,
        "max_batch": int(knobs.max_num_seqs or 1),
        "ctx_budget": int(knobs.max_num_batched_tokens or 8192),
        "mapping_notes": "; ".join(notes),
    }


def setup(venv: Path) -> int:
    """Create ``venv`` and install aiconfigurator from PyPI into it (~850 MB, about a minute)."""
    if not (venv / "bin" / "python").exists():
        print(f"creating {venv}")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    for args in (["--upgrade", "pip"], [AICONFIGURATOR]):
        print("pip install", " ".join(args))
        done = subprocess.run(pip + args, capture_output=True, text=True)
        if done.returncode:
            print(f"pip install {' '.join(args)} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
            return 1
    print(f"{AICONFIGURATOR} installed in {venv}")
    return 0


def run_worker(venv: Path, args: list[str]) -> None:
    """Run peers_worker.py in the peer venv; a failure raises with the worker's own error text."""
    python = venv / "bin" / "python"
    if not python.exists():
        raise RuntimeError(
            f"{python} does not exist: aiconfigurator lives in its own virtual environment. "
            "Create it with `python benchmarks/peers.py --setup` (or `make peers`)."
        )
    done = subprocess.run([str(python), str(WORKER), *args], capture_output=True, text=True)
    if done.returncode:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        hint = " (is aiconfigurator installed? run --setup)" if "ModuleNotFoundError" in done.stderr else ""
        raise RuntimeError(f"aiconfigurator worker failed (exit {done.returncode}){hint}:\n{tail}")


def compare(cases: pd.DataFrame, mapped: list[dict[str, Any]], peer: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per case: measured, gpucap and aiconfigurator values and absolute errors."""
    ours = validate(cases).set_index("case_id")
    theirs = pd.DataFrame(peer).set_index("case_id")
    inputs = pd.DataFrame(mapped).set_index("case_id")
    keep = ["source_id", "model", "gpu", "engine", "num_gpus", "tp", "pp", "ep", "attn_dp", "isl", "osl", "load_mode"]
    out = cases.set_index("case_id")[[k for k in keep if k in cases.columns]].copy()
    out["load"] = inputs["load"]
    for k in ("model_path", "system", "backend", "gemm_quant_mode", "moe_quant_mode", "kvcache_quant_mode"):
        out[f"aic_{k}"] = inputs[k]
    for k in ("backend_version", "batch_per_rank", "ctx_tokens", "limit", "gemm", "moe", "kvcache", "fmha", "error"):
        out[f"aic_{k}"] = theirs[k] if k in theirs else None  # gemm..fmha: the quant modes it resolved
    out["gpucap_error"] = ours["error"]
    out["mapping_notes"] = inputs["mapping_notes"]
    for m in METRICS:
        measured = ours[f"{m}_measured"]
        out[f"{m}_measured"] = measured
        out[f"{m}_gpucap"] = ours[f"{m}_predicted"]
        out[f"{m}_aic"] = pd.to_numeric(theirs[m], errors="coerce") if m in theirs else np.nan
        for tool in ("gpucap", "aic"):
            out[f"{m}_{tool}_abs_err"] = (out[f"{m}_{tool}"] / measured - 1.0).abs()
    return out.reset_index()


def summary(table: pd.DataFrame, by: str | None = None) -> pd.DataFrame:
    """Median / p90 absolute error and median ratio of both tools per metric, on rows both predicted."""
    rows = []
    for key, g in [("all", table)] if by is None else table.groupby(by):
        for m in METRICS:
            both = g[g[f"{m}_gpucap_abs_err"].notna() & g[f"{m}_aic_abs_err"].notna()]
            if both.empty:
                continue
            row: dict[str, Any] = ({by: key} if by else {}) | {"metric": m, "n": len(both)}
            for tool in ("gpucap", "aic"):
                err = both[f"{m}_{tool}_abs_err"]
                row[f"{tool}_median"] = err.median()
                row[f"{tool}_p90"] = err.quantile(0.9)
                row[f"{tool}_ratio"] = (both[f"{m}_{tool}"] / both[f"{m}_measured"]).median()
            rows.append(row)
    return pd.DataFrame(rows)


def new_path(out_dir: Path, stem: str) -> Path:
    """A file name under out_dir that does not exist yet."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path, k = out_dir / f"{stem}.csv", 1
    while path.exists():
        path, k = out_dir / f"{stem}-{k}.csv", k + 1
    return path


def print_tables(table: pd.DataFrame) -> None:
    pct = "{:.0%}".format
    short = table[["case_id", "model", "gpu", "engine", "load_mode"]].copy()
    short["model"] = short["model"].str.split("/").str[-1].str.replace("-Instruct", "")
    short["gpu"] = short["gpu"].str.split("-").str[0]
    short["load_mode"] = short["load_mode"].str.replace("fixed-concurrency", "concurrency")
    names = {"output_tok_s": "tok/s", "ttft_ms": "TTFT", "tpot_ms": "TPOT"}
    for m, name in names.items():
        for tool, col in (("gpucap", "gpucap"), ("aic", "aic")):
            short[f"{name} {col}"] = table[f"{m}_{tool}_abs_err"]
    fmt = {c: pct for c in short.columns if " " in c}
    print("\nabsolute error |predicted / measured - 1| per case (empty: not measured or not predicted)")
    print(short.to_string(index=False, formatters=fmt, na_rep=""))
    nums = {c: "{:.1%}".format for c in ("gpucap_median", "gpucap_p90", "aic_median", "aic_p90")}
    nums |= {c: "{:.2f}".format for c in ("gpucap_ratio", "aic_ratio")}
    print("\nboth tools on the rows both predicted (ratio: median predicted / measured, > 1 overestimates)")
    print(summary(table).to_string(index=False, formatters=nums))
    for by in ("engine", "load_mode"):
        print(f"\nby {by}:")
        print(summary(table, by).to_string(index=False, formatters=nums))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="?", default=str(DEFAULT_CASES))
    ap.add_argument("--out-dir", default=str(Path(__file__).resolve().parent / "out"))
    ap.add_argument("--venv", default=str(DEFAULT_VENV), help="virtual environment with aiconfigurator")
    ap.add_argument("--setup", action="store_true", help=f"create --venv and pip install {AICONFIGURATOR}, then stop")
    ap.add_argument("--show-skipped", action="store_true", help="list every skipped row with its reason")
    args = ap.parse_args()
    venv = Path(args.venv)
    if args.setup:
        return setup(venv)

    cases = read_public(args.cases, DEFAULT_CASES)  # with the project's sourced corrections
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            run_worker(venv, ["inventory", f"{tmp}/inventory.json"])
            inventory = json.loads(Path(f"{tmp}/inventory.json").read_text())
            mapped, skipped = [], []
            for _, row in cases.iterrows():
                try:
                    mapped.append(map_case(row, inventory))
                except Skip as why:
                    skipped.append((str(row["case_id"]), str(why)))
            if not mapped:
                print(f"{args.cases}: none of its {len(cases)} rows can be given to aiconfigurator", file=sys.stderr)
                for cid, why in skipped:
                    print(f"  {cid}: {why}", file=sys.stderr)
                return 1
            Path(f"{tmp}/cases.json").write_text(json.dumps(mapped))
            run_worker(venv, ["estimate", f"{tmp}/cases.json", f"{tmp}/results.json"])
            peer = json.loads(Path(f"{tmp}/results.json").read_text())
        except RuntimeError as exc:
            print(f"aiconfigurator could not be run: {exc}", file=sys.stderr)
            return 1
    seconds = time.perf_counter() - t0
    print(
        f"{args.cases}: {len(mapped)} of {len(cases)} rows mapped to aiconfigurator {inventory['version']}; "
        f"estimated {sum(r['ok'] for r in peer)} in {seconds:.0f} s"
    )
    reasons = pd.Series([why for _, why in skipped]).value_counts()
    print("skipped rows by reason:\n" + "\n".join(f"  {n:4d}  {why}" for why, n in reasons.items()))
    if args.show_skipped:
        print("\n".join(f"  {cid}: {why}" for cid, why in skipped))
    for r in peer:
        if not r["ok"]:
            print(f"  aiconfigurator failed on {r['case_id']}: {r['error']}")

    selected = cases[cases["case_id"].astype(str).isin({c["case_id"] for c in mapped})].reset_index(drop=True)
    table = compare(selected, mapped, peer)
    print_tables(table)
    path = new_path(Path(args.out_dir), f"peers-{time.strftime('%Y%m%d-%H%M%S')}")
    table.to_csv(path, index=False)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
