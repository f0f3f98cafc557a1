"""Command line: ``gpucap estimate | plan | frontier | simulate | validate | calibrate | errors | gpus | models``.

Errors in the input print one line naming the bad value and exit non-zero (2 for bad input,
3 when the model does not fit); they never print a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from gpucap.calibration.analysis import GROUPS
from gpucap.calibration.calibrate import DEFAULT_FREE
from gpucap.calibration.limits import LIMIT_STATS, Slo
from gpucap.catalog.gpus import load_gpus
from gpucap.catalog.lookup import load_model, model_cards
from gpucap.cli import frontier as cli_frontier
from gpucap.cli import plan as cli_plan
from gpucap.cli import simulate as cli_simulate
from gpucap.cli.args import output_file, positive_float, positive_int
from gpucap.config import EngineConfig
from gpucap.errors import DoesNotFit
from gpucap.estimate import estimate
from gpucap.physics.speculative import Speculative, acceptance_length
from gpucap.types import ENGINES, LENGTHS
from gpucap.units import GB, KV_BYTES_PER_ELEMENT, TB, TERA, WEIGHT_BYTES_PER_PARAM, GiB
from gpucap.version import __version__


def _image_size(text: str) -> int | tuple[int, int]:
    """``1344`` (a square side) or ``1080x1920`` (height x width), pixels."""
    try:
        parts = [int(p) for p in text.lower().split("x")]
    except ValueError:
        parts = []
    if len(parts) not in (1, 2) or min(parts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not an image size; give a side like 1344 or HxW like 1080x1920")
    return parts[0] if len(parts) == 1 else (parts[0], parts[1])


def _speculative(a: argparse.Namespace) -> Speculative | None:
    """The speculative-decoding options as one ``Speculative``, or None when not asked for."""
    given = a.speculative_acceptance_length is not None or a.speculative_acceptance_rate is not None
    if a.speculative_draft_tokens is None:
        if given or a.speculative_draft_model:
            raise ValueError("--speculative-draft-tokens K is needed with the other --speculative options")
        return None
    k = a.speculative_draft_tokens
    if a.speculative_acceptance_rate is not None:
        tau = acceptance_length(acceptance_rate=a.speculative_acceptance_rate, draft_tokens=k)
    elif a.speculative_acceptance_length is not None:
        tau = a.speculative_acceptance_length
    else:
        raise ValueError("give --speculative-acceptance-length TAU or --speculative-acceptance-rate ALPHA")
    return Speculative(
        draft_tokens=k,
        acceptance_length=tau,
        draft_layers=a.speculative_draft_layers,
        draft_vocab_size=a.speculative_draft_vocab,
        draft_model=a.speculative_draft_model,
    )


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line (no usage block) and exits 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gpucap", description="LLM serving capacity from first principles.")
    p.add_argument("--version", action="version", version=f"gpucap {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    e = sub.add_parser("estimate", help="memory, per-resource concurrency, recommendation, speed")
    e.add_argument("--model", required=True, help="catalog id (see `gpucap models`) or path to a config.json")
    e.add_argument("--gpu", required=True, help="catalog key (see `gpucap gpus`)")
    e.add_argument("--num-gpus", type=positive_int, default=None, help="GPUs in all (default: one replica)")
    e.add_argument("--tp", type=positive_int, default=1)
    e.add_argument("--pp", type=positive_int, default=1)
    e.add_argument("--ep", type=positive_int, default=1)
    e.add_argument(
        "--attn-dp",
        type=positive_int,
        default=1,
        help="attention data-parallel copies: TensorRT-LLM's DEP8 is --tp 1 --ep 8 --attn-dp 8; SGLang's "
        "--tp 8 --dp 8 --enable-dp-attention is --tp 8 --attn-dp 8 --num-gpus 8 (read as its convention)",
    )
    e.add_argument(
        "--weight-dtype",
        default=None,
        choices=list(WEIGHT_BYTES_PER_PARAM),
        help="weight format (default: the checkpoint's own, from its quantization_config; bf16 for most)",
    )
    e.add_argument("--kv-dtype", default="auto", choices=list(KV_BYTES_PER_ELEMENT))
    e.add_argument("--input-len", type=positive_float, required=True, help="input tokens per request")
    e.add_argument("--output-len", type=positive_float, required=True, help="output tokens per request")
    e.add_argument(
        "--lengths",
        default="varied",
        choices=list(LENGTHS),
        help="varied: traffic whose lengths differ (default); fixed: a fixed-length load test, whose closed loop "
        "runs in waves (TTFT grows with the concurrency)",
    )
    load = e.add_mutually_exclusive_group()
    load.add_argument("--concurrency", type=positive_float, default=None, help="requests in flight, all replicas")
    load.add_argument(
        "--request-rate", type=positive_float, default=None, help="arrivals per second, all replicas (open loop)"
    )
    e.add_argument("--ttft-slo", type=positive_float, default=2.0, help="seconds (default 2)")
    e.add_argument("--tpot-slo", type=positive_float, default=0.1, help="seconds (default 0.1)")
    e.add_argument("--engine", default="vllm", choices=list(ENGINES))
    e.add_argument("--max-num-seqs", type=positive_int, default=None)
    e.add_argument("--max-num-batched-tokens", type=positive_int, default=None)
    e.add_argument("--gpu-memory-utilization", type=positive_float, default=None)
    e.add_argument("--block-size", type=positive_int, default=None)
    e.add_argument("--no-cuda-graphs", action="store_true", help="as vLLM --enforce-eager")
    e.add_argument(
        "--enable-eplb", action="store_true", help="an expert-parallel load balancer evens the GPUs' expert loads"
    )
    e.add_argument(
        "--routing-skew",
        type=float,
        default=0.0,
        help="MoE expert popularity as a Zipf exponent (0 uniform; ~0.5 DeepSeek-V3)",
    )
    e.add_argument("--coefficients", default=None, help="calibration JSON")
    e.add_argument("--gpu-file", default=None, help="CSV of extra GPUs (columns of data/gpus.csv)")
    e.add_argument(
        "--prefix-tokens", type=float, default=0.0, help="a system prompt inside --input-len, kept in the prefix cache"
    )
    e.add_argument("--prefix-share", type=float, default=1.0, help="share of requests that carry it (default 1)")
    e.add_argument(
        "--turns", type=int, default=1, help="turns per conversation; each turn's prompt carries the earlier ones"
    )
    e.add_argument("--images-per-request", type=float, default=0.0, help="images each request carries (multimodal)")
    e.add_argument("--image-size-px", type=_image_size, default=None, help="image side, or HxW like 1080x1920")
    e.add_argument("--mm-encoder-tp-mode", default="weights", choices=["weights", "data"], help="as vLLM's option")
    e.add_argument("--speculative-draft-tokens", type=positive_int, default=None, help="k tokens drafted per step")
    tau = e.add_mutually_exclusive_group()
    tau.add_argument("--speculative-acceptance-length", type=positive_float, default=None, help="tau, bonus included")
    tau.add_argument("--speculative-acceptance-rate", type=float, default=None, help="alpha per drafted token (i.i.d.)")
    e.add_argument("--speculative-draft-layers", type=positive_int, default=1, help="layers of an EAGLE/MTP head")
    e.add_argument("--speculative-draft-vocab", type=positive_int, default=None, help="head vocabulary (EAGLE-3)")
    e.add_argument("--speculative-draft-model", default=None, help="a separate draft model: catalog id or config.json")
    e.add_argument("--json", action="store_true")

    cli_plan.add_parser(sub)
    cli_frontier.add_parser(sub)
    cli_simulate.add_parser(sub)

    v = sub.add_parser("validate", help="predict every case of a measurements CSV and compare")
    v.add_argument("cases", help="CSV in the schema of measured-public.csv")
    v.add_argument("--gpu-file", default=None, help="CSV of extra GPUs (columns of data/gpus.csv) the cases name")
    v.add_argument("--json", action="store_true", help="one object per row")
    v.add_argument("--out", default=None, help="also write the per-row table as CSV here (never overwrites)")
    v.add_argument(
        "--method",
        default="simulate",
        choices=["simulate", "closed-form"],
        help="simulate each row's benchmark run (default) or use the closed forms (fast)",
    )

    c = sub.add_parser("calibrate", help="fit the efficiency coefficients to load-test results")
    c.add_argument(
        "results", nargs="+", help="result files or folders (vLLM, SGLang, GenAI-Perf, GuideLLM), or a cases CSV"
    )
    c.add_argument("--out", required=True, help="coefficients JSON to write (never overwritten unless --overwrite)")
    c.add_argument("--overwrite", action="store_true")
    _results_options(c)
    c.add_argument("--free", default=",".join(DEFAULT_FREE), help="coefficients to fit, comma-separated")
    c.add_argument(
        "--method",
        default="closed-form",
        choices=["closed-form", "simulate"],
        help="predict each run by the closed forms (default, fast) or by simulating it (a sweep of a few runs)",
    )
    c.add_argument("--fix", action="append", default=[], metavar="NAME=VALUE", help="hold a coefficient at a value")
    c.add_argument(
        "--targets",
        default="runs",
        help="what to fit: runs (every run's metrics), limits (every sweep's SLO-limited concurrency or "
        "rate at --ttft-slo/--tpot-slo/--stat), or runs,limits",
    )
    c.add_argument("--ttft-slo", "--slo-ttft", type=positive_float, default=2.0, help="TTFT SLO in s (default 2)")
    c.add_argument("--tpot-slo", "--slo-tpot", type=positive_float, default=0.1, help="TPOT SLO in s (default 0.1)")
    c.add_argument(
        "--stat",
        default="mean",
        choices=list(LIMIT_STATS),
        help="statistic the SLOs apply to (the closed forms predict means: mean or median)",
    )
    c.add_argument("--json", action="store_true", help="print the saved JSON instead of the report")
    c.add_argument("--save-unconverged", action="store_true", help="save a fit that did not converge")
    c.add_argument(
        "--history",
        default=None,
        help="also append this fit to a calibration history (a JSON-lines file, or a folder that holds one)",
    )
    c.add_argument("--label", default="", help="a name for this fit in the history (e.g. the load test's date)")

    e = sub.add_parser("errors", help="error tables: measured vs predicted by model size, GPU, engine, source")
    e.add_argument("cases", help="a cases CSV (the schema of measured-public.csv) or load-test results (files, folder)")
    e.add_argument("--coefficients", default=None, help="a calibration JSON: the 'fitted' variant (default: fit here)")
    e.add_argument("--by", default="size", help=f"group rows by, comma-separated: {', '.join(GROUPS)}")
    e.add_argument(
        "--variants",
        default="defaults,fitted",
        help="comma-separated: defaults, fitted, lomo (leave one model out), loso (leave one source out)",
    )
    e.add_argument("--format", default="markdown", choices=["markdown", "html", "csv"])
    e.add_argument("--free", default=",".join(DEFAULT_FREE), help="coefficients the fits free, comma-separated")
    e.add_argument(
        "--method", default="closed-form", choices=["closed-form", "simulate"], help="how each row is predicted"
    )
    _results_options(e)

    g = sub.add_parser("gpus", help="list the GPU catalog")
    g.add_argument("--gpu-file", default=None)
    g.add_argument("--json", action="store_true")
    m = sub.add_parser("models", help="list the model catalog")
    m.add_argument("--json", action="store_true")
    return p


def _results_options(p: argparse.ArgumentParser) -> None:
    """What `calibrate` and `errors` need to read load-test results: hardware and formats for
    runs whose files and manifest do not say, a manifest, extra GPUs, the length distribution."""
    for name in ("gpu", "engine", "model"):
        p.add_argument(f"--{name}", default=None, help=f"{name} for runs whose files and manifest do not say")
    for name in ("num-gpus", "tp", "pp", "ep"):
        p.add_argument(f"--{name}", type=positive_int, default=None, help=f"{name} for runs that do not say")
    p.add_argument("--manifest", default=None, help="manifest mapping file globs to gpu/tp/engine/model")
    p.add_argument("--gpu-file", default=None, help="CSV of extra GPUs (columns of data/gpus.csv) the cases name")
    p.add_argument(
        "--weight-dtype",
        default=None,
        choices=list(WEIGHT_BYTES_PER_PARAM),
        help="weight format of runs that do not say (default: the checkpoint's own)",
    )
    p.add_argument("--kv-dtype", default="auto", choices=list(KV_BYTES_PER_ELEMENT))
    p.add_argument(
        "--length-dist", default="fixed", choices=["fixed", "dataset"], help="dataset: ShareGPT-like output lengths"
    )


def _estimate(a: argparse.Namespace) -> int:
    eng = EngineConfig(
        engine=a.engine,
        max_num_seqs=a.max_num_seqs,
        max_num_batched_tokens=a.max_num_batched_tokens,
        gpu_memory_utilization=a.gpu_memory_utilization,
        block_size=a.block_size,
        cuda_graphs=not a.no_cuda_graphs,
        eplb=a.enable_eplb,
    )
    est = estimate(
        a.model,
        a.gpu,
        a.num_gpus,
        input_len=a.input_len,
        output_len=a.output_len,
        tp=a.tp,
        pp=a.pp,
        ep=a.ep,
        attn_dp=a.attn_dp,
        weight_dtype=a.weight_dtype,
        kv_dtype=a.kv_dtype,
        concurrency=a.concurrency,
        request_rate=a.request_rate,
        ttft_slo_s=a.ttft_slo,
        tpot_slo_s=a.tpot_slo,
        engine=eng,
        coefficients=a.coefficients,
        gpu_file=a.gpu_file,
        images_per_request=a.images_per_request,
        image_size_px=a.image_size_px,
        encoder_tp_mode=a.mm_encoder_tp_mode,
        speculative=_speculative(a),
        lengths=a.lengths,
        routing_skew=a.routing_skew,
        prefix_tokens=a.prefix_tokens,
        prefix_share=a.prefix_share,
        turns=a.turns,
    )
    print(json.dumps(est.to_dict(), indent=2) if a.json else est)
    return 0


def _validate(a: argparse.Namespace) -> int:
    import pandas as pd

    from gpucap.calibration.validate import error_summary, read_cases, validate

    out = Path(a.out) if a.out else None
    if out is not None and out.exists():
        raise ValueError(f"{out} exists; choose another --out (results are never overwritten)")
    _add_gpu_file(a)
    result = validate(read_cases(a.cases), method=a.method)
    if out is not None:
        result.to_csv(out, index=False)
    if a.json:
        rows = []
        for _, r in result.iterrows():
            if isinstance(r["error"], str):
                rows.append({"case_id": r["case_id"], "error": r["error"]})
            else:
                rows.append(
                    {
                        "case_id": r["case_id"],
                        **{
                            m: (None if pd.isna(r[f"{m}_predicted"]) else float(r[f"{m}_predicted"]))
                            for m in ("output_tok_s", "ttft_ms", "tpot_ms")
                        },
                    }
                )
        print(json.dumps(rows, indent=1))
        return 0
    ok = result["error"].isna()
    print(f"{int(ok.sum())} of {len(result)} rows predicted")
    for _, r in result[~ok].iterrows():
        print(f"  not predicted: {r['case_id']} ({r['model']} on {r['gpu']}): {r['error']}")
    print("\nabsolute error |predicted / measured - 1|:")
    print(error_summary(result).to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    for by in ("engine", "gpu", "model"):
        s = error_summary(result, by)
        s = s[s["metric"] == "output_tok_s"]
        print(f"\noutput tokens/s by {by}:")
        print(s.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    return 0


def _add_gpu_file(a: argparse.Namespace) -> None:
    """``--gpu-file``'s GPUs join the catalog for this command (read now: a bad file stops it)."""
    if a.gpu_file:
        from gpucap.catalog.gpus import add_gpu_file

        add_gpu_file(a.gpu_file)


def _read_calibration_cases(a: argparse.Namespace) -> tuple[Any, Any]:
    """Cases to fit (schema of measured-public.csv) and the tidy runs they came from (or None)."""
    import pandas as pd

    _add_gpu_file(a)
    from gpucap.calibration.loadtests import cases_from_runs
    from gpucap.calibration.results import read_results, runs_needing
    from gpucap.calibration.validate import read_cases

    first = Path(a.results[0])
    if len(a.results) == 1 and first.suffix == ".csv" and "load_mode" in pd.read_csv(first, nrows=0).columns:
        return read_cases(first), None
    defaults = {
        k: v
        for k, v in {
            "gpu": a.gpu,
            "engine": a.engine,
            "model": a.model,
            "num_gpus": a.num_gpus,
            "tp": a.tp,
            "pp": a.pp,
            "ep": a.ep,
        }.items()
        if v is not None
    }
    rs = read_results([Path(p) for p in a.results], manifest=a.manifest, defaults=defaults)
    for file, why in rs.bad:
        print(f"not read: {file}: {why}", file=sys.stderr)
    for run, why in runs_needing(rs):
        print(f"not usable: {run}: {why} (give it with --gpu/--tp/--model/--engine or a manifest)", file=sys.stderr)
    return cases_from_runs(
        rs.runs, weight_dtype=a.weight_dtype, kv_cache_dtype=a.kv_dtype, length_dist=a.length_dist
    ), rs.runs


def _calibrate(a: argparse.Namespace) -> int:
    from gpucap.calibration.analysis import error_table
    from gpucap.calibration.calibrate import calibrate

    targets = tuple(t.strip() for t in a.targets.split(",") if t.strip())
    out = output_file(a.out, overwrite=a.overwrite, inputs=a.results)  # checked before the fit
    fixed = {}
    for item in a.fix:
        name, _, value = item.partition("=")
        try:
            fixed[name.strip()] = float(value)
        except ValueError:
            raise ValueError(f"--fix {item!r}: expected NAME=NUMBER") from None
    if a.history:  # a history that does not read stops the command before the fit
        from gpucap.calibration.history import append_history, history_path, read_history

        read_history(history_path(a.history))
    cases, _ = _read_calibration_cases(a)
    sources = [
        str(p) for arg in a.results for p in ([Path(arg)] if Path(arg).is_file() else sorted(Path(arg).rglob("*")))
    ]
    fit = calibrate(
        cases,
        free=tuple(n.strip() for n in a.free.split(",") if n.strip()),
        fixed=fixed,
        sources=sources,
        method=a.method,
        targets=targets,
        slo=Slo(a.ttft_slo, a.tpot_slo, a.stat),
    )
    if not fit.success and not a.save_unconverged:
        print(fit.report())
        raise ValueError(f"the fit did not converge ({fit.message}); nothing written (--save-unconverged saves it)")
    fit.save(out, overwrite=a.overwrite)
    if a.history:
        print(f"appended to {append_history(fit, a.history, label=a.label)}", file=sys.stderr)
    if a.json:
        print(json.dumps(fit.to_dict(), indent=2))
        return 0
    print(fit.report())
    print(f"\nmedian absolute error by model size, default -> calibrated coefficients ({a.method}):")
    table = error_table(cases, fit.coefficients, by="size", method=a.method)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    for line in fit.provenance.get("not_sweeps", []):
        print(f"no limit: {line}")
    print(f"\nwrote {out}")
    return 0


def _errors(a: argparse.Namespace) -> int:
    from gpucap.calibration.analysis import error_tables, format_error_table
    from gpucap.physics.coefficients import Coefficients

    a.results = [a.cases]
    cases, _ = _read_calibration_cases(a)
    coef = Coefficients.from_file(a.coefficients) if a.coefficients else None
    table = error_tables(
        cases,
        coef,
        by=tuple(b.strip() for b in a.by.split(",") if b.strip()),
        variants=tuple(v.strip() for v in a.variants.split(",") if v.strip()),
        free=tuple(n.strip() for n in a.free.split(",") if n.strip()),
        method=a.method,
    )
    print(format_error_table(table, a.format))
    return 0


def _gpus(a: argparse.Namespace) -> int:
    gpus = load_gpus(a.gpu_file)
    rows: list[dict[str, Any]] = [
        {
            "key": g.key,
            "memory_GiB": round(g.memory_bytes / GiB, 1),
            "bf16_TFLOPs": g.flops_per_s["bf16"] / TERA,
            "fp8_TFLOPs": g.flops_per_s["fp8"] / TERA or None,
            "fp4_TFLOPs": g.flops_per_s["fp4"] / TERA or None,
            "hbm_TB_per_s": g.hbm_bytes_per_s / TB,
            "link": g.link_kind,
            "link_GB_per_s": g.link_bytes_per_s / GB,
        }
        for g in gpus.values()
    ]
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'key':<20}{'GiB':>7}{'bf16 TF':>9}{'fp8 TF':>8}{'fp4 TF':>8}{'TB/s':>6}  link")
    for r in rows:
        print(
            f"{r['key']:<20}{r['memory_GiB']:>7.1f}{r['bf16_TFLOPs']:>9.0f}{r['fp8_TFLOPs'] or 0:>8.0f}"
            f"{r['fp4_TFLOPs'] or 0:>8.0f}{r['hbm_TB_per_s']:>6.2f}  {r['link']} {r['link_GB_per_s']:.0f} GB/s"
        )
    return 0


def _models(a: argparse.Namespace) -> int:
    rows = []
    for hf_id, card in model_cards().items():
        spec = load_model(hf_id)
        rows.append(
            {
                "id": hf_id,
                "family": spec.family,
                "total_params_B": round(spec.total_params / 1e9, 2),
                "active_params_B": round(spec.active_params / 1e9, 2),
                "layers": spec.num_layers,
                "attention": "MLA" if spec.is_mla else f"GQA {spec.num_heads}/{spec.num_kv_heads}",
                "aliases": card.get("aliases", []),
            }
        )
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'id':<48}{'family':<13}{'total B':>9}{'active B':>9}  attention")
    for r in rows:
        print(
            f"{r['id']:<48}{r['family']:<13}{r['total_params_B']:>9.1f}{r['active_params_B']:>9.1f}  {r['attention']}"
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    handlers = {
        "estimate": _estimate,
        "plan": cli_plan.run,
        "frontier": cli_frontier.run,
        "simulate": cli_simulate.run,
        "validate": _validate,
        "calibrate": _calibrate,
        "errors": _errors,
        "gpus": _gpus,
        "models": _models,
    }
    try:
        return handlers[args.command](args)
    except BrokenPipeError:  # output piped into `head`
        sys.stderr.close()
        return 0
    except DoesNotFit as exc:
        print(f"gpucap: does not fit: {exc}", file=sys.stderr)
        return 3
    except ValueError as exc:
        print(f"gpucap: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
