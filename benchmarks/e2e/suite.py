"""`make e2e-suite`: the real vLLM server of `make e2e` through the load tests gpucap must predict,
fitted once and checked on everything else (~20-30 min on this machine).

    .venv/bin/python benchmarks/e2e/suite.py [--out benchmarks/e2e/out] [--cells closed,range,...]

Cells (each a `benchmarks/loadtest.py` run against `vllm serve` of the tiny Llama on this CPU):

    closed    closed loop, fixed 256 / 64 tokens, concurrency 1, 2, 4, 8, 16  <- the fit
    range     the same with --random-range-ratio 0.5
    at-once   64 and 256 prompts of 256 / 64 sent at once
    poisson   Poisson arrivals at 1, 2.5 and 4 requests/s (the last past saturation)
    host      prompts of 2 tokens, 1 output: one at a time, and 512 at once (the HTTP server alone)
    budget    1,920-token prompts, 32 output, concurrency 1 and 4, with --max-num-batched-tokens
              512 and 8192 (two servers)
    waves     384-token prompts, 64 output, concurrency 4 and 8, on the 512-token budget's server: a
              wave's prompts take 3 and 6 budget-full steps, so its requests get their first
              tokens steps apart (does the next wave arrive together, or spread?)
    groups    200-token prompts, 64 output, concurrency 8 and 16, on the same server: a step holds
              two such prompts beside the decodes, so the waves after the first come back in pairs
    seqs      --max-num-seqs 4 at concurrency 16 (requests queue for a batch slot)
    preempt   256 prompts of 128-384 / 32-96 tokens sent at once into a KV cache of 160 blocks
              (20,480 tokens, --num-gpu-blocks-override): vLLM admits prompts while their blocks
              fit and preempts (frees, later recomputes) running requests when their outputs
              outgrow the cache
    preempt-long  64 prompts of 512-1536 / 128-384 tokens at once into the same cache (~16 requests'
              worth): each preempted request recomputes a long prompt

gpucap's coefficients are fitted once, by simulation, on the `closed` sweep as `make e2e` fits
them (``gpucap.calibration.promptsteps``: u_compute from the server's own timing of the sweep's prompt
steps, the rest of ``fit.FREE`` from the sweep's results); every cell is then predicted by
simulating its benchmark run with those coefficients, untouched. The script prints and writes
(``table-<time>.md``, ``cells-<time>.csv`` in the run folder) the error per cell and statistic: throughput, TTFT and TPOT mean
and p99, measured / predicted. Everything lands in ``<out>/suite-<YYYYmmdd-HHMMSS>/``; the servers
are always stopped. Each server logs every engine step (``--enable-logging-iteration-details``, in
``server-<knobs>.log``) and its ``/metrics`` is scraped every 2 s into ``metrics-<knobs>/``
(``gpucap.telemetry``): the engine's own view of the same load tests.
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from fit import FREE, as_served, server_engine  # noqa: E402

from gpucap.calibration import validate  # noqa: E402
from gpucap.calibration.loadtests import cases_from_runs  # noqa: E402
from gpucap.calibration.promptsteps import calibrate_with_prompt_steps  # noqa: E402
from gpucap.calibration.results import read_results  # noqa: E402
from gpucap.catalog.lookup import load_model  # noqa: E402
from gpucap.physics.coefficients import Coefficients  # noqa: E402
from gpucap.physics.memory import kv_bytes_per_token  # noqa: E402
from gpucap.queueing.simulate import run_benchmark  # noqa: E402
from gpucap.telemetry.scrape import scrape_to_folder  # noqa: E402
from gpucap.telemetry.steplog import read_step_log  # noqa: E402

KEY = "CPU-E2E"
NAME = "tiny-llama"
KV_GIB = 1
STATS = (("output_tok_s", "throughput"), ("ttft", "TTFT"), ("tpot", "TPOT"))


BLOCK = 128


@dataclass(frozen=True)
class Server:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    kv_blocks: int | None = None  # --num-gpu-blocks-override; None: VLLM_CPU_KVCACHE_SPACE=KV_GIB

    @property
    def name(self) -> str:
        blocks = f"-blocks{self.kv_blocks}" if self.kv_blocks else ""
        return f"seqs{self.max_num_seqs}-tokens{self.max_num_batched_tokens}{blocks}"

    def kv_gib(self, model: Path) -> float:
        """The KV cache the server holds, in GiB: its blocks at gpucap's KV bytes a token of
        ``model`` (float32), or KV_GIB."""
        if not self.kv_blocks:
            return float(KV_GIB)
        return self.kv_blocks * BLOCK * kv_bytes_per_token(load_model(model), "fp32") / 2**30


@dataclass(frozen=True)
class Cell:
    name: str
    server: Server
    input_len: int
    output_len: int
    args: tuple[str, ...]  # load-test options: levels, range ratio
    labels: dict[str, str] = field(default_factory=dict)


DEFAULT = Server()
CELLS = (
    Cell("closed", DEFAULT, 256, 64, ("--concurrency", "1,2,4,8,16", "--prompts-per-concurrency", "8")),
    Cell(
        "range",
        DEFAULT,
        256,
        64,
        ("--concurrency", "1,2,4,8,16", "--prompts-per-concurrency", "8", "--range-ratio", "0.5"),
    ),  # fmt: skip
    Cell("at-once", DEFAULT, 256, 64, ("--all-at-once", "64,256")),
    Cell("poisson", DEFAULT, 256, 64, ("--request-rate", "1,2.5,4", "--rate-seconds", "30", "--num-prompts", "16")),
    Cell("host", DEFAULT, 2, 1, ("--concurrency", "1", "--num-prompts", "32", "--all-at-once", "512")),
    Cell("budget-512", Server(256, 512), 1920, 32, ("--concurrency", "1,4", "--prompts-per-concurrency", "4")),
    Cell("budget-8192", Server(256, 8192), 1920, 32, ("--concurrency", "1,4", "--prompts-per-concurrency", "4")),
    Cell("waves", Server(256, 512), 384, 64, ("--concurrency", "4,8", "--prompts-per-concurrency", "8")),
    Cell("groups", Server(256, 512), 200, 64, ("--concurrency", "8,16", "--prompts-per-concurrency", "8")),
    Cell("seqs", Server(4, 2048), 256, 64, ("--concurrency", "16", "--prompts-per-concurrency", "4")),
    Cell("preempt", Server(256, 2048, 160), 256, 64, ("--all-at-once", "256", "--range-ratio", "0.5")),
    Cell("preempt-long", Server(256, 2048, 160), 1024, 256, ("--all-at-once", "64", "--range-ratio", "0.5")),
)


def say(msg: str, t0: float = time.perf_counter()) -> None:
    print(f"suite: [{time.perf_counter() - t0:5.0f} s] {msg}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class VllmServer:
    """``vllm serve`` of the tiny model with one ``Server``'s knobs, in a process group of its own
    (stopped as one, always)."""

    def __init__(self, venv: Path, model: Path, server: Server, log: Path) -> None:
        self.port = free_port()
        env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE=str(KV_GIB), VLLM_CPU_OMP_THREADS_BIND="0")
        cmd = [
            str(venv / "bin" / "vllm"), "serve", str(model), "--served-model-name", NAME, "--host", "127.0.0.1",
            "--port", str(self.port), "--dtype", "float32", "--max-model-len", "2048",
            "--max-num-seqs", str(server.max_num_seqs), "--max-num-batched-tokens", str(server.max_num_batched_tokens),
            "--block-size", str(BLOCK), "--enforce-eager", "--no-enable-prefix-caching", "--seed", "0",
            "--enable-logging-iteration-details",
            *(["--num-gpu-blocks-override", str(server.kv_blocks)] if server.kv_blocks else []),
        ]  # fmt: skip
        self.log = log.open("x")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.stopping = threading.Event()

    def scrape(self, folder: Path, every_s: float = 2.0) -> threading.Thread:
        """Sample the server's /metrics into ``folder`` until it stops (``gpucap.telemetry.scrape``)."""

        def run() -> None:
            scrape_to_folder(
                f"http://127.0.0.1:{self.port}/metrics", folder, every_s=every_s, for_s=24 * 3600.0,
                stop=self.stopping.is_set, on_error=lambda msg: None,
            )  # fmt: skip

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    def wait_ready(self, timeout_s: float = 600.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"suite: error: the server exited while starting; see {self.log.name}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(2)
        raise SystemExit(f"suite: error: the server was not ready within {timeout_s:.0f} s; see {self.log.name}")

    def stop(self) -> None:
        self.stopping.set()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


def prepare(venv: Path, run: Path, python: str) -> tuple[Path, Path]:
    """The e2e venv, the model and this CPU as a GPU-file row (the steps of run.sh)."""
    subprocess.run(["bash", str(HERE / "setup_venv.sh")], check=True, env=dict(os.environ, PYTHON=python))
    model = HERE / "model"
    subprocess.run(
        [str(venv / "bin" / "python"), str(HERE / "make_model.py"), str(model), "--dtype", "float32"], check=True
    )
    cpu = run / "cpu.csv"
    subprocess.run(
        [str(venv / "bin" / "python"), str(HERE / "measure_cpu.py"), str(model), str(cpu), "--key", KEY,
         "--cores", "0", "--tokens", "256", "--dtype", "float32"],
        check=True,
    )  # fmt: skip
    return model, cpu


def load_test(venv: Path, model: Path, cell: Cell, port: int, out: Path) -> Path:
    """One cell's load test into ``out/<cell>/<stamp>/``; returns that folder."""
    knobs = [f"max_num_seqs={cell.server.max_num_seqs}", f"max_num_batched_tokens={cell.server.max_num_batched_tokens}"]
    cmd = [
        sys.executable, str(ROOT / "benchmarks" / "loadtest.py"), "--base-url", f"http://127.0.0.1:{port}",
        "--model", NAME, "--tokenizer", str(model), "--vllm", str(venv / "bin" / "vllm"), "--gpu", KEY,
        "--gpucap-model", str(model / "config.json"), "--input-len", str(cell.input_len),
        "--output-len", str(cell.output_len), "--num-warmups", "2", "--ttft-slo", "1000", "--tpot-slo", "1000",
        "--level-timeout", "900", "--out", str(out / cell.name),
        *[a for k in knobs for a in ("--engine-knob", k)], "--engine-knob", f"block_size={BLOCK}",
        "--engine-knob", "enforce_eager=true", "--engine-knob", "enable_prefix_caching=false", *cell.args,
    ]  # fmt: skip
    subprocess.run(cmd, check=True)
    return sorted((out / cell.name).iterdir())[-1]


def cell_cases(folder: Path, cell: Cell, args_fit: argparse.Namespace) -> pd.DataFrame:
    """The cell's runs as cases with the engine as served (``fit.as_served``)."""
    rs = read_results(folder)
    if rs.bad or rs.incomplete:
        raise SystemExit(f"suite: error: {folder}: unreadable {rs.bad}, incomplete {rs.incomplete}")
    runs = rs.runs.sort_values(["concurrency", "request_rate", "num_prompts"]).reset_index(drop=True)
    fit_args = copy.copy(args_fit)
    fit_args.max_num_seqs, fit_args.max_num_batched_tokens, fit_args.kv_cache_gib = (
        cell.server.max_num_seqs,
        cell.server.max_num_batched_tokens,
        cell.server.kv_gib(Path(args_fit.model)),
    )
    engine = server_engine(fit_args)
    cases = as_served(cases_from_runs(runs, weight_dtype="fp32", kv_cache_dtype="fp32"), engine)
    return cases.assign(cell=cell.name)


def error_rows(cases: pd.DataFrame, coef: Coefficients) -> pd.DataFrame:
    """Per case: measured and simulated throughput, TTFT and TPOT (mean and p99)."""
    prepared, errors = validate.prepare_cases(cases)
    if errors:
        raise SystemExit(f"suite: error: cases not predicted: {errors}")
    rows = []
    for case, (_, row) in zip(prepared, cases.iterrows(), strict=True):
        assert case.bench is not None and case.input_dist is not None and case.output_dist is not None
        run = run_benchmark(case.hw, coef, case.bench, input_len=case.input_dist, output_len=case.output_dist)
        level = (
            f"c={row['concurrency']:g}" if row["load_mode"] == "fixed-concurrency"
            else f"{row['request_rate']:g}/s" if row["load_mode"] == "poisson"
            else f"{row['num_prompts']:g} at once"
        )  # fmt: skip
        out = {"cell": row["cell"], "level": level, "tput measured": row["output_tok_s"],
               "tput predicted": run.output_tokens_per_s, "preemptions predicted": run.preemptions}  # fmt: skip
        for metric, label in (("ttft", "TTFT"), ("tpot", "TPOT")):
            for stat in ("mean", "p99"):
                out[f"{label} {stat} measured"] = row.get(f"{metric}_{stat}_ms", np.nan)
                out[f"{label} {stat} predicted"] = run.stats[metric][stat] * 1e3
        rows.append(out)
    return pd.DataFrame(rows)


def errors_table(rows: pd.DataFrame) -> pd.DataFrame:
    """|predicted / measured - 1| per row and column."""
    out = rows[["cell", "level"]].copy()
    for name in ("tput", "TTFT mean", "TTFT p99", "TPOT mean", "TPOT p99"):
        with np.errstate(invalid="ignore", divide="ignore"):
            out[name] = (rows[f"{name} predicted"] / rows[f"{name} measured"] - 1.0).abs()
    return out


def markdown(err: pd.DataFrame) -> str:
    """The error table as a Markdown table, errors in whole percent."""
    head = "| " + " | ".join(err.columns) + " |\n|" + "---|" * len(err.columns) + "\n"
    cells = (
        "| " + " | ".join(v if isinstance(v, str) else ("" if np.isnan(v) else f"{v:.0%}") for v in row) + " |\n"
        for row in err.itertuples(index=False)
    )
    return head + "".join(cells)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE / "out")
    ap.add_argument("--cells", default=",".join(c.name for c in CELLS), help="cells to run (default all)")
    ap.add_argument("--venv", type=Path, default=Path(os.environ.get("E2E_VENV", HERE / ".venv")))
    ap.add_argument("--reuse", type=Path, default=None, help="a suite folder whose load tests to fit and predict again")
    args = ap.parse_args()
    wanted = [c for c in CELLS if c.name in args.cells.split(",")]
    if not wanted or "closed" not in [c.name for c in wanted]:
        raise SystemExit("suite: error: --cells must include closed (the fit)")
    if args.reuse:
        run = args.reuse
        cpu, model = run / "cpu.csv", HERE / "model"
    else:
        run = args.out / f"suite-{dt.datetime.now():%Y%m%d-%H%M%S}"
        run.mkdir(parents=True, exist_ok=False)
        model, cpu = prepare(args.venv, run, os.environ.get("PYTHON", "python3"))
    os.environ["GPUCAP_GPU_FILE"] = str(cpu)
    say(f"everything lands in {run}")
    folders: dict[str, Path] = {}
    if args.reuse:
        folders = {c.name: sorted((run / "loadtest" / c.name).iterdir())[-1] for c in wanted}
    else:
        for server in dict.fromkeys(c.server for c in wanted):
            srv = VllmServer(args.venv, model, server, run / f"server-{server.name}.log")
            try:
                srv.wait_ready()
                srv.scrape(run / f"metrics-{server.name}")
                say(f"server {server.name} ready on port {srv.port}")
                for cell in (c for c in wanted if c.server == server):
                    say(f"cell {cell.name}")
                    folders[cell.name] = load_test(args.venv, model, cell, srv.port, run / "loadtest")
            finally:
                srv.stop()
            say(f"server {server.name} stopped")

    fit_args = argparse.Namespace(
        model=str(model / "config.json"), gpu=KEY, dtype="fp32", kv_cache_gib=KV_GIB, max_num_seqs=256,
        max_num_batched_tokens=2048, block_size=BLOCK, eager=True,
    )  # fmt: skip
    cases = {c.name: cell_cases(folders[c.name], c, fit_args) for c in wanted}
    closed = cases["closed"]
    start = Coefficients.for_engine("vllm")
    closed_cell = next(c for c in wanted if c.name == "closed")
    log = run / f"server-{closed_cell.server.name}.log"
    if not log.is_file():
        raise SystemExit(f"suite: error: {log} is missing: u_compute is taken from the closed cell's server log")
    with_steps = calibrate_with_prompt_steps(
        closed, read_step_log(log), sorted(folders["closed"].glob("*.json")), free=FREE, start=start, method="simulate"
    )
    fit = with_steps.fit
    print(with_steps.report())
    rows = pd.concat([error_rows(cases[c.name], fit.coefficients) for c in wanted], ignore_index=True)
    err = errors_table(rows)
    pd.set_option("display.width", 250)
    print("\nmeasured / predicted (fitted on the closed cell only):")
    print(rows.to_string(index=False, float_format=lambda x: f"{x:.1f}"))
    print("\n|predicted / measured - 1|:")
    print(err.to_string(index=False, float_format=lambda x: f"{x:.0%}"))
    held = err[err["cell"] != "closed"]
    medians = held.drop(columns=["cell", "level"]).median()
    print("\nheld-out cells, median |error|: " + ", ".join(f"{k} {v:.0%}" for k, v in medians.items()))
    stamp = f"{dt.datetime.now():%Y%m%d-%H%M%S}"  # a new pair of files for every fit, never overwritten
    cells, table = run / f"cells-{stamp}.csv", run / f"table-{stamp}.md"
    for path in (cells, table):
        if path.exists():
            raise SystemExit(
                f"suite: error: {path} exists; wait a second and run again (results are never overwritten)"
            )
    rows.to_csv(cells, index=False)
    table.write_text(markdown(err))
    say(f"done; {cells} and {table}")


if __name__ == "__main__":
    main()
