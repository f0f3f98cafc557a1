"""Load-test an OpenAI-compatible server with ``vllm bench serve``, one level at a time, into a
folder that ``gpucap calibrate`` and ``gpucap.calibration.results.read_results`` read as it is.

    python benchmarks/loadtest.py --base-url http://127.0.0.1:8000 --model meta-llama/Llama-3.1-8B-Instruct \\
        --gpu H100-SXM-80GB --tp 1 --input-len 1024 --output-len 256 --concurrency 1,4,16,64 \\
        --ttft-slo 2 --tpot-slo 0.1 --out benchmarks/out/loadtest

Each level is one ``vllm bench serve`` run on the random dataset with ``--ignore-eos``: fixed
lengths by default, so that every request reads ``--input-len`` tokens and writes
``--output-len``, or lengths uniform within +/- ``--range-ratio`` of them
(``--random-range-ratio``, written to the metadata). Levels run in increasing load: every
``--concurrency`` (closed loop, requests sent as fast as the cap allows), every ``--all-at-once``
(that many prompts sent at once, no cap: ``--request-rate inf``), then every ``--request-rate``
(Poisson arrivals).
A sweep stops by itself after a level whose median (``--stat``) TTFT or TPOT exceeds
``--stop-factor`` times its SLO: higher loads would only queue. Results land in
``<out>/<YYYYmmdd-HHMMSS>/`` (a new folder; an existing file is never overwritten), one
``concurrency-0016.json`` or ``rate-00002p500.json`` per level with the hardware as ``--metadata`` (gpu,
num_gpus, tp, pp, engine, model), the console output of each level in a ``.log`` next to it, and
``commands.log`` with every command run and why the sweep stopped.

Prompts per level: ``max(--num-prompts, --prompts-per-concurrency x C)`` for a concurrency C
(every request slot is refilled several times, so the steady state dominates the run), and
``max(--num-prompts, ceil(R x --rate-seconds))`` for a request rate R. Level k (0, 1, ...) draws
its prompts with seed ``--seed + k``: with one seed, every level would send the same first
prompts, and a server with prefix caching would answer them from its cache. vLLM's warm-up
requests (``--num-warmups``) repeat the level's first prompt.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from gpucap.calibration.resultfields import ENGINE_KNOBS
from gpucap.cli.args import names, positive_float, positive_int

STATS = ("median", "mean")


class LoadTestError(Exception):
    """A problem the user can fix: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def levels(kind: type, text: str) -> list[float]:
    """'1,4,16' -> [1, 4, 16]: positive, distinct, sorted increasing."""
    parse = positive_int if kind is int else positive_float
    try:
        values = [float(parse(t)) for t in names(text)]
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}; give comma-separated values such as 1,4,16") from None
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"{text!r}: a level is repeated")
    if kind is float and len({round(v, 3) for v in values}) != len(values):
        raise argparse.ArgumentTypeError(f"{text!r}: request rates must differ by at least 0.001/s (file names)")
    if kind is float and min(values) < 0.001:
        raise argparse.ArgumentTypeError(f"{text!r}: request rates below 0.001/s are not supported")
    return sorted(values)


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="loadtest.py",
        description="Load-test a server with `vllm bench serve`, level by level, into a folder that "
        "`gpucap calibrate` reads; stops past the SLOs.",
    )
    s = p.add_argument_group("server")
    s.add_argument("--base-url", required=True, help="server address, e.g. http://127.0.0.1:8000")
    s.add_argument("--model", required=True, help="model name the server serves (the API's model field)")
    s.add_argument("--tokenizer", default=None, help="tokenizer name or path when --model is not one")
    s.add_argument("--vllm", default="vllm", help="path of the vllm executable (default: vllm on PATH)")
    h = p.add_argument_group("hardware, written into each result as --metadata")
    h.add_argument("--gpu", required=True, help="gpucap GPU key (`gpucap gpus`, or a row of your --gpu-file)")
    h.add_argument("--num-gpus", type=positive_int, default=None, help="GPUs serving (default tp x pp)")
    h.add_argument("--tp", type=positive_int, default=1)
    h.add_argument("--pp", type=positive_int, default=1)
    h.add_argument("--engine", default="vllm", choices=["vllm", "sglang", "trtllm"], help="engine serving")
    h.add_argument("--gpucap-model", default=None, help="gpucap model id or config.json path (default: --model)")
    h.add_argument("--weight-dtype", default=None, help="weights as served (bf16, fp8, nvfp4, ...)")
    h.add_argument("--kv-dtype", default=None, help="KV cache as served (auto, fp8, ...)")
    h.add_argument(
        "--engine-knob",
        action="append",
        default=[],
        type=engine_knob,
        metavar="KEY=VALUE",
        help=f"the server's setting, repeatable: {', '.join(ENGINE_KNOBS)}",
    )
    w = p.add_argument_group("workload")
    w.add_argument("--input-len", type=positive_int, required=True, help="prompt tokens per request")
    w.add_argument("--output-len", type=positive_int, required=True, help="output tokens per request")
    w.add_argument("--concurrency", type=lambda t: levels(int, t), default=None, help="levels, e.g. 1,4,16")
    w.add_argument("--request-rate", type=lambda t: levels(float, t), default=None, help="requests/s, e.g. 2,4")
    w.add_argument(
        "--all-at-once", type=lambda t: levels(int, t), default=None, help="prompts sent at once per level, e.g. 64,256"
    )
    w.add_argument("--range-ratio", type=range_ratio, default=0.0, help="lengths within +/- this share (default 0)")
    w.add_argument("--num-prompts", type=positive_int, default=32, help="least prompts per level (default 32)")
    w.add_argument("--prompts-per-concurrency", type=positive_int, default=4, help="prompts per request slot")
    w.add_argument("--rate-seconds", type=positive_float, default=60.0, help="seconds of arrivals per rate level")
    w.add_argument("--num-warmups", type=int, default=0, help="warm-up requests before each level, not counted")
    w.add_argument("--seed", type=int, default=0)
    st = p.add_argument_group("stopping")
    st.add_argument("--ttft-slo", type=positive_float, default=2.0, help="seconds (default 2)")
    st.add_argument("--tpot-slo", type=positive_float, default=0.1, help="seconds (default 0.1)")
    st.add_argument("--stop-factor", type=positive_float, default=3.0, help="stop past this many x SLO (default 3)")
    st.add_argument("--stat", choices=STATS, default="median", help="statistic the stop rule reads")
    st.add_argument(
        "--level-timeout",
        type=positive_float,
        default=None,
        help=f"seconds one level may take (default {BASE_TIMEOUT_S:g} s + {PER_PROMPT_TIMEOUT_S:g} s per prompt)",
    )
    st.add_argument(
        "--probe-timeout",
        type=float,
        default=PROBE_TIMEOUT_S,
        help=f"seconds the server has to answer one one-token request before the sweep (default {PROBE_TIMEOUT_S:g}; "
        "0 skips the probe)",
    )
    o = p.add_argument_group("output")
    o.add_argument("--out", type=Path, default=Path("benchmarks/out/loadtest"), help="parent of the run folder")
    o.add_argument("--dry-run", action="store_true", help="print the commands and write nothing")
    return p


@dataclass(frozen=True)
class Level:
    kind: str  # "concurrency", "prompts" (all at once) or "rate"
    value: float
    num_prompts: int
    seed: int = 0

    @property
    def name(self) -> str:
        """File stem; zero-padded so that a folder listing is in load order."""
        if self.kind == "concurrency":
            return f"concurrency-{int(self.value):04d}"
        if self.kind == "prompts":
            return f"at-once-{int(self.value):05d}"
        return f"rate-{self.value:09.3f}".replace(".", "p")

    def describe(self) -> str:
        if self.kind == "prompts":
            return f"{int(self.value)} prompts at once"
        return f"concurrency {int(self.value)}" if self.kind == "concurrency" else f"request rate {self.value:g}/s"


def range_ratio(text: str) -> float:
    """``--random-range-ratio`` of vLLM: a share in [0, 1)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; give a share such as 0.5") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a range ratio must be in [0, 1)")
    return value


def plan_levels(args: argparse.Namespace) -> list[Level]:
    """Every level in run order, with its prompt count (module docstring)."""
    out = [
        Level("concurrency", c, max(args.num_prompts, args.prompts_per_concurrency * int(c)))
        for c in args.concurrency or []
    ]
    out += [Level("prompts", n, int(n)) for n in args.all_at_once or []]
    out += [Level("rate", r, max(args.num_prompts, math.ceil(r * args.rate_seconds))) for r in args.request_rate or []]
    return [dataclasses.replace(level, seed=args.seed + k) for k, level in enumerate(out)]


def check(args: argparse.Namespace) -> None:
    """Argument checks argparse cannot make; raises LoadTestError naming the option."""
    if not args.concurrency and not args.request_rate and not args.all_at_once:
        raise LoadTestError(
            "give --concurrency (e.g. 1,4,16), --all-at-once (e.g. 64,256) or --request-rate (e.g. 2,4)"
        )
    if not args.base_url.startswith(("http://", "https://")):
        raise LoadTestError(f"--base-url {args.base_url!r} must start with http:// or https://")
    if args.num_gpus is not None and args.num_gpus % (args.tp * args.pp):
        raise LoadTestError(f"--num-gpus {args.num_gpus} is not a multiple of --tp x --pp = {args.tp * args.pp}")
    if args.num_warmups < 0:
        raise LoadTestError(f"--num-warmups {args.num_warmups} must be 0 or more")
    if args.stop_factor < 1:
        raise LoadTestError(f"--stop-factor {args.stop_factor} must be at least 1 (a multiple of the SLO)")
    for name in ("gpu", "gpucap_model", "model"):
        value = getattr(args, name)
        if value is not None and any(c.isspace() for c in value):
            raise LoadTestError(f"--{name.replace('_', '-')} {value!r}: no spaces (it is written as key=value)")


def find_vllm(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise LoadTestError(f"--vllm {name!r}: no such executable; give the path of vllm (e.g. .venv/bin/vllm)")
    return path


def metadata(args: argparse.Namespace) -> list[str]:
    """``--metadata`` pairs: the keys ``gpucap.calibration.results`` reads (gpu, num_gpus, tp, pp, engine, model,
    formats and engine knobs when given)."""
    pairs = {
        "gpu": args.gpu,
        "num_gpus": args.num_gpus or args.tp * args.pp,
        "tp": args.tp,
        "pp": args.pp,
        "engine": args.engine,
        "model": args.gpucap_model or args.model,
        "weight_dtype": args.weight_dtype,
        "kv_cache_dtype": args.kv_dtype,
        **dict(args.engine_knob),
        "range_ratio": args.range_ratio or None,
    }
    return [f"{k}={v}" for k, v in pairs.items() if v is not None]


def engine_knob(text: str) -> tuple[str, str]:
    """``max_num_seqs=64``: a setting of the server that gpucap predicts with."""
    key, sep, value = text.partition("=")
    key = key.strip().replace("-", "_")
    if not sep or key not in ENGINE_KNOBS or not value.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: give KEY=VALUE with KEY one of {', '.join(ENGINE_KNOBS)}")
    return key, value.strip()


def bench_command(vllm: str, args: argparse.Namespace, level: Level, result_dir: Path) -> list[str]:
    """The ``vllm bench serve`` command line of one level (flags of vLLM 0.32's ``bench serve``)."""
    cmd = [vllm, "bench", "serve", "--backend", "vllm", "--base-url", args.base_url, "--endpoint", "/v1/completions"]
    cmd += ["--model", args.model] + (["--tokenizer", args.tokenizer] if args.tokenizer else [])
    cmd += ["--dataset-name", "random", "--random-input-len", str(args.input_len)]
    cmd += [
        "--random-output-len",
        str(args.output_len),
        "--random-range-ratio",
        f"{args.range_ratio:g}",
        "--ignore-eos",
    ]
    cmd += ["--num-prompts", str(level.num_prompts), "--seed", str(level.seed)]
    cmd += ["--num-warmups", str(args.num_warmups)] if args.num_warmups else []
    if level.kind == "concurrency":
        cmd += ["--max-concurrency", str(int(level.value)), "--request-rate", "inf"]
    elif level.kind == "prompts":
        cmd += ["--request-rate", "inf"]
    else:
        cmd += ["--request-rate", f"{level.value:g}"]
    cmd += ["--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "90,99", "--disable-tqdm"]
    cmd += ["--save-result", "--result-dir", str(result_dir), "--result-filename", f"{level.name}.json"]
    return cmd + ["--metadata", *metadata(args)]


# A level with no result by then has hung: a generous bound from the prompts it sends
PROBE_TIMEOUT_S = 120.0  # a server that cannot answer one short request in this long will not carry a level
MAX_FAILED_SHARE = 0.05  # a level with more of its requests failed is not a measurement of the load
BASE_TIMEOUT_S = 600.0
PER_PROMPT_TIMEOUT_S = 10.0


def level_timeout_s(args: argparse.Namespace, level: Level) -> float:
    """``--level-timeout``, else BASE_TIMEOUT_S + PER_PROMPT_TIMEOUT_S x the level's prompts."""
    return args.level_timeout or BASE_TIMEOUT_S + PER_PROMPT_TIMEOUT_S * level.num_prompts


def new_run_dir(parent: Path, now: dt.datetime | None = None) -> Path:
    """``parent/<YYYYmmdd-HHMMSS>`` (of ``now``, default the current time), created here; never
    an existing folder."""
    stamp = (now or dt.datetime.now()).strftime("%Y%m%d-%H%M%S")
    run = parent / stamp
    if parent.exists() and not parent.is_dir():
        raise LoadTestError(f"--out {parent} is a file; give a folder (the run folder goes inside it)")
    try:
        run.mkdir(parents=True, exist_ok=False)
    except FileExistsError:
        raise LoadTestError(
            f"{run} already exists; wait a second and run again (results are never overwritten)"
        ) from None
    except OSError as exc:
        raise LoadTestError(f"--out {parent}: cannot create {run} ({exc.strerror or exc})") from None
    return run


def level_latency_s(result: Path, stat: str) -> tuple[float, float]:
    """(TTFT, TPOT) in seconds at ``stat`` from a vLLM result file; errors name the file and key."""
    try:
        data = json.loads(result.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise LoadTestError(f"{result}: cannot read the result ({exc})") from None
    completed = data.get("completed") if isinstance(data, dict) else None
    if not isinstance(completed, int | float) or isinstance(completed, bool) or completed <= 0:
        failed = data.get("failed") if isinstance(data, dict) else None
        raise LoadTestError(
            f"{result.stem}: no request completed ({failed} failed); is the server at --base-url up and "
            f"serving --model? (log: {result.with_suffix('.log')})"
        )
    failed = data.get("failed") if isinstance(data.get("failed"), int | float) else 0
    if failed > MAX_FAILED_SHARE * (completed + failed):
        raise LoadTestError(
            f"{result.stem}: {failed:g} of {completed + failed:g} requests failed (more than "
            f"{MAX_FAILED_SHARE:.0%}); its latencies describe the requests that got through, not the load "
            f"(log: {result.with_suffix('.log')})"
        )
    out = []
    for metric in ("ttft", "tpot"):
        key = f"{stat}_{metric}_ms"
        v = data.get(key) if isinstance(data, dict) else None
        if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v):
            raise LoadTestError(f"{result}: {key} is {v!r}, not a number; did every request fail?")
        out.append(v / 1e3)
    return out[0], out[1]


def stop_reason(
    ttft_s: float, tpot_s: float, *, ttft_slo_s: float, tpot_slo_s: float, factor: float, stat: str
) -> str | None:
    """Why a sweep stops after this level: TTFT > factor x TTFT SLO or TPOT > factor x TPOT SLO;
    None to go on."""
    reasons = [
        f"{stat} {name} {value:.3g} s > {factor:g} x SLO {slo:g} s"
        for name, value, slo in (("TTFT", ttft_s, ttft_slo_s), ("TPOT", tpot_s, tpot_slo_s))
        if value > factor * slo
    ]
    return "; ".join(reasons) or None


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the benchmark and everything it started (its own process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _die_with_parent() -> None:
    """In the child, before it runs: on Linux, ask the kernel to SIGKILL it when the harness dies
    (SIGKILL of the harness, a closed terminal), so no benchmark goes on loading the server."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def run_level(cmd: list[str], log: Path, timeout_s: float) -> None:
    """One ``vllm bench serve`` in its own process group: on timeout, Ctrl-C, SIGTERM or SIGHUP
    the whole group is killed, grandchildren included; if the harness itself is killed, the
    kernel kills the benchmark (``_die_with_parent``)."""
    with log.open("x", encoding="utf-8") as f:
        proc = subprocess.Popen(
            cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent
        )
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _stop_group(proc)
            raise LoadTestError(
                f"{log.stem}: no result within {timeout_s:g} s (set --level-timeout to allow more; log: {log})"
            ) from None
        except BaseException:  # Ctrl-C, SIGTERM (Stopped), anything: leave no benchmark behind
            _stop_group(proc)
            raise
    if proc.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:] or ["(no output)"]
        raise LoadTestError(f"{log.stem}: vllm bench serve exited {proc.returncode}: {tail[0]} (log: {log})")


def probe(base_url: str, model: str, timeout_s: float) -> None:
    """One completion of one token from the server before the sweep: a server that accepts
    connections and never answers fails here in ``timeout_s``, not after a level's timeout. Any
    HTTP answer, even an error status, means it answers (the levels report what it says)."""
    import urllib.error
    import urllib.request

    body = json.dumps({"model": model, "prompt": "Hello", "max_tokens": 1}).encode()
    request = urllib.request.Request(
        base_url.rstrip("/") + "/v1/completions", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            answer.read(1 << 16)
    except urllib.error.HTTPError:
        return
    except (TimeoutError, urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError) or "timed out" in str(reason):
            raise LoadTestError(
                f"{base_url} accepted the connection but did not answer a one-token request in {timeout_s:g} s; "
                "is the server still loading, or stuck? (--probe-timeout allows more)"
            ) from None
        raise LoadTestError(f"{base_url}: no server answers ({reason}); start it, or check --base-url") from None


def run(args: argparse.Namespace) -> Path | None:
    """Every level in order, stopping each sweep past the stop factor; returns the run folder."""
    check(args)
    plan = plan_levels(args)
    vllm = find_vllm(args.vllm)
    if args.dry_run:
        for level in plan:
            print(shlex.join(bench_command(vllm, args, level, args.out / "<run>")))
        return None
    if args.probe_timeout > 0:
        probe(args.base_url, args.model, args.probe_timeout)
    run_dir = new_run_dir(args.out)
    journal = run_dir / "commands.log"
    print(f"loadtest: results in {run_dir}")
    stopped: set[str] = set()
    for level in plan:
        if level.kind in stopped:
            continue
        result = run_dir / f"{level.name}.json"
        for path in (result, result.with_suffix(".pytorch.json"), result.with_suffix(".log")):
            if path.exists():  # vllm would overwrite it
                raise LoadTestError(f"{path} exists; results are never overwritten")
        cmd = bench_command(vllm, args, level, run_dir)
        with journal.open("a", encoding="utf-8") as j:
            j.write(shlex.join(cmd) + "\n")
        t0 = time.perf_counter()
        try:
            run_level(cmd, result.with_suffix(".log"), level_timeout_s(args, level))
            ttft, tpot = level_latency_s(result, args.stat)
        except (LoadTestError, Stopped, KeyboardInterrupt) as exc:
            why = str(exc) if isinstance(exc, LoadTestError) else "stopped by a signal (Ctrl-C, SIGTERM or SIGHUP)"
            with journal.open("a", encoding="utf-8") as j:
                j.write(f"# failed: {why}\n")
            summarize(run_dir)
            raise
        print(
            f"loadtest: {level.describe()}: {level.num_prompts} prompts, {args.stat} TTFT {ttft * 1e3:.0f} ms, "
            f"TPOT {tpot * 1e3:.1f} ms ({time.perf_counter() - t0:.0f} s)"
        )
        why = stop_reason(
            ttft, tpot, ttft_slo_s=args.ttft_slo, tpot_slo_s=args.tpot_slo, factor=args.stop_factor, stat=args.stat
        )
        if why and level.kind != "prompts":  # all at once is no sweep toward the SLO: its TTFT is the queue
            stopped.add(level.kind)
            message = f"loadtest: stopping the {level.kind} sweep after {level.describe()}: {why}"
            print(message)
            with journal.open("a", encoding="utf-8") as j:
                j.write(f"# {message}\n")
    summarize(run_dir)
    return run_dir


def summarize(run_dir: Path) -> None:
    """Read the folder back as ``gpucap calibrate`` will, and say what it holds."""
    try:
        from gpucap.calibration.results import read_results
    except ImportError:  # the harness also runs where gpucap is not installed
        return
    try:
        rs = read_results(run_dir)
    except ValueError:
        print(f"loadtest: {run_dir}: no level has a result gpucap can read")
        return
    print(f"loadtest: {run_dir}: {len(rs.runs)} runs readable by gpucap", end="")
    print("" if not (rs.bad or rs.incomplete) else f"; unreadable {rs.bad}, incomplete {rs.incomplete}")


class Stopped(Exception):
    """SIGTERM or SIGHUP arrived: unwind like Ctrl-C, so the running benchmark is killed and the
    summary printed."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Stopped


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    previous = {s: signal.signal(s, _on_sigterm) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        run(args)
    except LoadTestError as exc:
        print(f"loadtest.py: error: {exc}", file=sys.stderr)
        return 2
    except (Stopped, KeyboardInterrupt):
        print("loadtest.py: stopped; what was measured is in the run folder above", file=sys.stderr)
        return 130
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 0


if __name__ == "__main__":
    sys.exit(main())
