"""Hostile-input probe: bad values and damaged files, by family, as a careless or hostile user
would try them. Prints, per family, how many cases were tried and how many were clean.

    .venv/bin/python benchmarks/probe.py

Clean means: the input is accepted with sane values (positive sizes, finite metrics), or it is
refused with one line that names the file, field or value (a ValueError from the library, exit
status 2 or 3 with a ``gpucap:`` line from the command line). Anything else (another exception,
a traceback, a negative size, a non-finite metric, a whole folder lost for one bad file) is not
clean and is listed. The same classes are kept as tests (tests/test_config_probe.py,
tests/test_results.py, tests/test_cli.py, tests/test_loadtest.py, tests/test_widgets.py).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpucap.calibration.results import read_results  # noqa: E402
from gpucap.catalog.models import ModelSpec  # noqa: E402
from gpucap.cli.main import main  # noqa: E402
from tests.test_config_probe import mutations  # noqa: E402

LOADTESTS = ROOT / "data" / "loadtests"
# Values a careless edit or a hostile file puts where a metric belongs (JSON text).
BAD_METRICS = ("Infinity", "-Infinity", "NaN", "1e400", "9" * 400, "-1", '"abc"', "true", "null", "[]", "{}")


def _read_probe(probe: Path, case: str, bad: list[str]) -> ModelSpec | None:
    """The config at ``probe`` read as a model, or None where it is refused; a refusal that is
    not one line naming the file, or any other exception, is listed in ``bad`` under ``case``."""
    try:
        return ModelSpec.from_hf_config(probe)
    except ValueError as exc:
        if "\n" in str(exc) or str(probe) not in str(exc):
            bad.append(f"{case}: message {str(exc)[:80]!r}")
    except Exception as exc:  # noqa: BLE001 - what the probe looks for
        bad.append(f"{case}: {type(exc).__name__}: {str(exc)[:80]}")
    return None


def config_family(tmp: Path) -> tuple[int, list[str]]:
    """Every shipped config.json, every scalar field, every bad value (tests/test_config_probe.py)."""
    tried, bad = 0, []
    probe = tmp / "config" / "config.json"
    probe.parent.mkdir()
    for config in sorted((ROOT / "data" / "models").glob("*/*/config.json")):
        for section, key, value, new in mutations(json.loads(config.read_text())):
            tried += 1
            probe.write_text(json.dumps(new))
            case = f"{config.parent.name} {section + '.' if section else ''}{key}={str(value)[:12]}"
            spec = _read_probe(probe, case, bad)
            if spec is None:
                continue
            sizes = (spec.num_layers, spec.num_heads, spec.num_kv_heads, spec.head_dim, spec.total_params)
            if min(sizes) <= 0 or (spec.is_moe and spec.experts_per_token > spec.num_experts):
                bad.append(f"{case}: accepted with sizes {sizes}")
    return tried, bad


def _result_mutations() -> Iterator[tuple[str, str, str]]:
    """(name, file suffix, text) of damaged copies of the shipped real result files: each metric
    of a vLLM JSON and of the first SGLang JSON line set to each bad value, plus damaged shapes."""
    sources = [
        LOADTESTS / "nerdalert-llama-3.2-3b-l40s" / "vllm-10qps-Llama-3.2-3B-Instruct.json",
        LOADTESTS / "vllm-cpu-tiny-llama" / "concurrency-0004.json",
    ]
    for src in sources:
        data = json.loads(src.read_text())
        for key, v in data.items():
            if isinstance(v, int | float) and not isinstance(v, bool):
                for bad in BAD_METRICS:
                    text = json.dumps({k: ("@@" if k == key else x) for k, x in data.items()})
                    yield f"{src.name} {key}={bad[:10]}", ".json", text.replace('"@@"', bad)
    line = (LOADTESTS / "datacrunch-h200-sglang" / "llama_405b_online_output.jsonl").read_text().splitlines()[0]
    data = json.loads(line)
    for key, v in data.items():
        if isinstance(v, int | float) and not isinstance(v, bool):
            for bad in BAD_METRICS:
                text = json.dumps({k: ("@@" if k == key else x) for k, x in data.items()})
                yield f"sglang {key}={bad[:10]}", ".jsonl", text.replace('"@@"', bad)
    console = (LOADTESTS / "gpustack-qwen3-8b-h100" / "vllm-bench-serve-console.txt").read_text()
    whole = (LOADTESTS / "nerdalert-llama-3.2-3b-l40s" / "vllm-10qps-Llama-3.2-3B-Instruct.json").read_text()
    shapes = {
        "deep nesting": ("[" * 100_000, ".json"),
        "list of numbers": ("[1, 2, 3]", ".json"),
        "empty": ("", ".json"),
        "half a JSON file": (whole[: len(whole) // 2], ".json"),
        "binary": ("\x00\x01\x02" * 1000, ".json"),
        "console without its closing line": (console.rsplit("=", 60)[0], ".txt"),
        "console half": (console[: len(console) // 2], ".txt"),
    }
    for name, (text, suffix) in shapes.items():
        yield name, suffix, text


def results_family(tmp: Path) -> tuple[int, list[str]]:
    """Each damaged file in a folder beside one good file: the good run still loads, the damaged
    one loads with finite values or is named in the bad list; read_results never raises."""
    tried, bad = 0, []
    good = LOADTESTS / "vllm-cpu-tiny-llama" / "concurrency-0001.json"
    for k, (name, suffix, text) in enumerate(_result_mutations()):
        tried += 1
        folder = tmp / f"results-{k}"
        folder.mkdir()
        (folder / "good.json").write_text(good.read_text())
        (folder / f"damaged{suffix}").write_text(text)
        try:
            rs = read_results(folder)
        except Exception as exc:  # noqa: BLE001
            bad.append(f"{name}: {type(exc).__name__} {str(exc)[:60]}")
            continue
        files = set(rs.runs["source_file"].astype(str).map(lambda p: Path(p).name))
        if "good.json" not in files:
            bad.append(f"{name}: the good file did not load")
        runs = rs.runs[rs.runs["source_file"].astype(str).str.endswith("damaged" + suffix)]
        numbers = runs.drop(columns=["request_rate"]).select_dtypes("number").to_numpy().ravel()
        if any(not math.isnan(x) and (math.isinf(x) or x < 0) for x in numbers):
            bad.append(f"{name}: loaded a non-finite or negative value")
        named = any(Path(f).name.startswith("damaged") for f, _ in rs.bad)
        if runs.empty and not named and name not in ("empty",):
            bad.append(f"{name}: neither loaded nor named")
    return tried, bad


def _cli(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:  # argparse refusals
            rc = int(exc.code or 0)
    return rc, err.getvalue()


def cli_family() -> tuple[int, list[str]]:
    """`gpucap estimate` and `plan` with each numeric option set to each bad number."""
    base_estimate = ["estimate", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100-SXM-80GB",
                     "--num-gpus", "1", "--input-len", "1000", "--output-len", "200"]  # fmt: skip
    base_plan = ["plan", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpus", "H100-SXM-80GB",
                 "--input-len", "1000", "--output-len", "200", "--target-rps", "5", "--simulate-top", "0"]  # fmt: skip
    options: dict[str, tuple[list[str], list[str]]] = {
        "estimate": (base_estimate, ["--num-gpus", "--tp", "--pp", "--ep", "--input-len", "--output-len",
                                     "--ttft-slo", "--tpot-slo", "--concurrency", "--request-rate",
                                     "--gpu-memory-utilization", "--max-num-seqs", "--max-num-batched-tokens"]),
        "plan": (base_plan, ["--target-rps", "--input-len", "--output-len", "--ttft-slo", "--tpot-slo",
                             "--burst-margin", "--usd-per-kwh"]),
    }  # fmt: skip
    values = ("0", "-1", "nan", "inf", "1e30", "abc", "1.5", "")
    tried, bad = 0, []
    for command, (base, opts) in options.items():
        rc, err = _cli(base)
        if rc != 0:  # the probe changes one option of a command that works
            raise SystemExit(f"probe: {' '.join(base)} fails by itself (rc {rc}): {err.strip()[-200:]}")
        for opt in opts:
            for v in values:
                tried += 1
                argv = [a for i, a in enumerate(base) if not (a == opt or (i > 0 and base[i - 1] == opt))]
                rc, err = _cli([*argv, opt, v])
                lines = [ln for ln in err.strip().splitlines() if ln]
                if "Traceback" in err or rc not in (0, 2, 3) or (rc != 0 and not lines):
                    bad.append(f"{command} {opt} {v!r}: rc {rc}, {err.strip()[-80:]!r}")
    return tried, bad


def files_family(tmp: Path) -> tuple[int, list[str]]:
    """Every option that names a file, given a device that never ends, a pipe that never answers,
    a file of NUL bytes and a folder: each in its own process under a 3 GiB limit and a 60 s
    timeout (the cases of tests/test_hostile_files.py, over every such option)."""
    import os
    import resource
    import subprocess

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    fifo = tmp / "pipe.json"
    os.mkfifo(fifo)
    zeros = tmp / "zeros.csv"
    zeros.write_bytes(bytes(1 << 20))
    est = ["estimate", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100-SXM-80GB", "--input-len", "1000",
           "--output-len", "200"]  # fmt: skip
    results = str(LOADTESTS / "datacrunch-h200-sglang")
    out = str(tmp / "never-written.json")
    commands = {
        "estimate --startup-log": [*est, "--startup-log"],
        "estimate --coefficients": [*est, "--coefficients"],
        "estimate --gpu-file": [*est, "--gpu-file"],
        "calibrate --manifest": ["calibrate", results, "--out", out, "--manifest"],
        "calibrate RESULTS": ["calibrate", "--out", out],
        "validate CASES": ["validate"],
        "plan --trace": ["plan", "--model", "meta-llama/Llama-3.1-8B", "--gpus", "H100-SXM-80GB", "--trace"],
        "plan --price": ["plan", "--model", "meta-llama/Llama-3.1-8B", "--gpus", "H100-SXM-80GB", "--target-rps", "5",
                         "--input-len", "1000", "--output-len", "200", "--simulate-top", "0", "--price"],
    }  # fmt: skip
    tried, bad = 0, []
    for name, argv in commands.items():
        for target in ("/dev/zero", str(fifo), str(zeros), str(tmp)):
            tried += 1
            try:
                run = subprocess.run([sys.executable, "-m", "gpucap", *argv, target], capture_output=True, text=True,
                                     timeout=60, preexec_fn=limit, cwd=ROOT)  # fmt: skip
            except subprocess.TimeoutExpired:
                bad.append(f"{name} {target}: no answer in 60 s")
                continue
            lines = [ln for ln in run.stderr.strip().splitlines() if ln]
            if run.returncode != 2 or "Traceback" in run.stderr or len(lines) != 1 or Path(out).exists():
                bad.append(f"{name} {target}: rc {run.returncode}, {run.stderr.strip()[-100:]!r}")
    return tried, bad


LAYER_LISTS = ("layer_types", "no_rope_layers", "attn_type_list")


def layer_list_family(tmp: Path) -> tuple[int, list[str]]:
    """Per-layer lists of the shipped configs (``LAYER_LISTS``) one entry short, empty, absent,
    or with an unknown kind: clean if refused with one line naming the file, or if the layers
    read the same as the original's (an absent or empty list with a documented default)."""
    tried, bad = 0, []
    for path in sorted((ROOT / "data" / "models").glob("*/*/config.json")):
        cfg = json.loads(path.read_text())
        for section in ("", "text_config"):
            part = cfg if not section else cfg.get(section)
            if not isinstance(part, dict):
                continue
            for key in LAYER_LISTS:
                if not isinstance(part.get(key), list) or not part[key]:
                    continue
                original = ModelSpec.from_hf_config(path).layer_window
                cuts = {"short": part[key][:-1], "empty": [], "absent": None,
                        "unknown kind": ["bogus", *part[key][1:]] if isinstance(part[key][0], str) else [7, *part[key][1:]]}  # fmt: skip
                for what, value in cuts.items():
                    tried += 1
                    new = json.loads(json.dumps(cfg))
                    target = new if not section else new[section]
                    if value is None:
                        target.pop(key)
                    else:
                        target[key] = value
                    probe = tmp / "probe" / "config.json"
                    probe.parent.mkdir(exist_ok=True)
                    probe.write_text(json.dumps(new))
                    spec = _read_probe(probe, f"{path.parent.name} {key} {what}", bad)
                    if spec is None:
                        continue
                    if spec.layer_window != original:
                        bad.append(f"{path.parent.name} {key} {what}: accepted with other layers, silently")
    return tried, bad


MONOTONE_DRAWS = 2000
MONOTONE_MODELS = ("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.2-3B-Instruct", "Qwen/Qwen3-32B",
                   "Qwen/Qwen3-30B-A3B", "openai/gpt-oss-20b", "mistralai/Mistral-7B-v0.3")  # fmt: skip
MONOTONE_GPUS = ("A100-SXM-80GB", "H100-SXM-80GB", "H200-SXM-141GB", "B200-180GB", "L40S-48GB", "MI300X-192GB")


def longer_prompt_family(tmp: Path) -> tuple[int, list[str]]:
    """Random deployments and lengths (seeded): clean if a longer prompt does not raise the
    recommended concurrency, outside the documented exception where the HTTP server's core
    binds (tests/test_properties.py). Draws that do not fit count as clean."""
    from gpucap.errors import DoesNotFit
    from gpucap.estimate import estimate

    rng = np.random.default_rng(0)
    tried, bad = 0, []
    for _ in range(MONOTONE_DRAWS):
        model, gpu = str(rng.choice(MONOTONE_MODELS)), str(rng.choice(MONOTONE_GPUS))
        engine = str(rng.choice(["vllm", "sglang", "trtllm"]))
        tp, pp = int(rng.choice([1, 2, 4])), int(rng.choice([1, 2]))
        short = int(rng.integers(50, 12000))
        long = max(short + 1, int(short * rng.uniform(1.0005, 3.0)))
        kw = dict(tp=tp, pp=pp, output_len=int(rng.integers(2, 1000)), lengths=str(rng.choice(["varied", "fixed"])),
                  engine=engine)  # fmt: skip
        tried += 1
        try:
            a = estimate(model, gpu, tp * pp, input_len=short, **kw)
            b = estimate(model, gpu, tp * pp, input_len=long, **kw)
        except (DoesNotFit, ValueError):
            continue
        if a.bottleneck != "host" and b.recommended_concurrency > a.recommended_concurrency:
            bad.append(f"{model} {gpu} {engine} tp={tp} pp={pp} {kw}: input {short} -> {long}: "
                       f"{a.recommended_concurrency} -> {b.recommended_concurrency}")  # fmt: skip
    return tried, bad


FAMILIES: dict[str, Callable[[Path], tuple[int, list[str]]]] = {
    "model configs (shipped configs, one field at a time)": config_family,
    "result files (metrics set to bad values, damaged shapes)": results_family,
    "estimate / plan options (bad numbers)": lambda tmp: cli_family(),
    "files an option names (/dev/zero, a pipe, NUL bytes, a folder)": files_family,
    "per-layer lists (short, empty, absent, unknown kind)": layer_list_family,
    "a longer prompt (random deployments; the recommendation must not rise)": longer_prompt_family,
}


def run() -> None:
    total_tried = total_clean = 0
    with tempfile.TemporaryDirectory() as tmp:
        for k, (name, family) in enumerate(FAMILIES.items()):
            sub = Path(tmp) / str(k)
            sub.mkdir()
            tried, bad = family(sub)
            total_tried, total_clean = total_tried + tried, total_clean + tried - len(bad)
            print(f"{name}: {tried - len(bad)} of {tried} clean")
            for line in bad[:10]:
                print(f"    not clean: {line}")
    print(f"all: {total_clean} of {total_tried} clean")


if __name__ == "__main__":
    run()
