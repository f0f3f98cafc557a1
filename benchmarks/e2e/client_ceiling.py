"""How many streamed tokens per second `vllm bench serve` itself can take: the load generator's
ceiling, measured against a server that streams instantly.

    benchmarks/e2e/.venv/bin/python benchmarks/e2e/client_ceiling.py [--concurrency 64,256,1024] \\
        [--output-len 256] [--prompts-per-level 1024] [--client-core 1 --server-core 0]

The server (``serve``, aiohttp, in this file) answers ``/v1/completions`` as vLLM's OpenAI server
streams: one server-sent event per token, then a usage chunk and ``[DONE]``, never waiting for a
model: each stream yields to the others between tokens (``--step-ms 0``: chunks arrive at the
client many to a read), or every stream writes one chunk per step of a common clock
(``--step-ms S``: one chunk per stream per step, as an engine streams them). ``vllm bench serve`` (random prompts
of 16 tokens, ``--ignore-eos``) runs against it level by level, pinned to its own core with the
server on another, so whatever limits the measured tokens/s is the client's own per-chunk work.
Printed per level: the client's output tokens/s, its mean TPOT and median ITL, its CPU time per
streamed token (``os.wait4``'s rusage, less a one-prompt run's start-up cost) and the server's.

A published run was client-bound where its output tokens/s reach this ceiling (scaled by the
speed of its client's core); `vllm bench serve` parses every chunk in one Python process, and
chunks that arrive while it is busy are read together, so their inter-token gaps read as ~0 and
the median ITL falls far below the mean TPOT.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def serve(port: int, step_s: float) -> None:
    """The instant server: every request streams its ``max_tokens`` chunks at once (``step_s`` 0),
    or one chunk a step, every stream on the same clock as an engine's steps (``step_s`` > 0)."""
    from aiohttp import web

    tick = {"event": asyncio.Event()}

    async def clock() -> None:
        while True:
            await asyncio.sleep(step_s)
            tick["event"].set()
            tick["event"] = asyncio.Event()

    async def start_clock(app: web.Application) -> None:
        if step_s > 0:
            app["clock"] = asyncio.create_task(clock())

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        n = int(body.get("max_tokens") or 16)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        head = {"id": "cmpl-0", "object": "text_completion", "created": 0, "model": body.get("model", "m")}
        for k in range(n):
            done = "length" if k == n - 1 else None
            chunk = dict(head, choices=[{"index": 0, "text": " a", "logprobs": None, "finish_reason": done}])
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            if step_s > 0:
                await tick["event"].wait()  # the next step
            else:
                await asyncio.sleep(0)  # let the other streams write theirs
        usage = dict(head, choices=[], usage={"prompt_tokens": 16, "completion_tokens": n, "total_tokens": 16 + n})
        await resp.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        await resp.write_eof()
        return resp

    app = web.Application(client_max_size=1 << 24)
    app.router.add_post("/v1/completions", completions)
    app.on_startup.append(start_clock)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bench(vllm: str, port: int, model: str, concurrency: int, prompts: int, output_len: int, core: int) -> dict:
    """One `vllm bench serve` level pinned to ``core``; its result and CPU seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            "taskset", "-c", str(core), vllm, "bench", "serve", "--backend", "vllm", "--base-url",
            f"http://127.0.0.1:{port}", "--endpoint", "/v1/completions", "--model", "tiny-llama", "--tokenizer",
            model, "--dataset-name", "random", "--random-input-len", "16", "--random-output-len", str(output_len),
            "--ignore-eos", "--num-prompts", str(prompts), "--max-concurrency", str(concurrency),
            "--request-rate", "inf", "--percentile-metrics", "ttft,tpot,itl", "--metric-percentiles", "50,99",
            "--disable-tqdm", "--save-result", "--result-dir", tmp, "--result-filename", "r.json",
        ]  # fmt: skip
        with open(os.devnull, "w") as quiet:
            p = subprocess.Popen(cmd, stdout=quiet, stderr=subprocess.STDOUT)
            _, status, ru = os.wait4(p.pid, 0)
        if status:
            raise SystemExit(f"client_ceiling: vllm bench serve exited {status} at concurrency {concurrency}")
        result = json.loads((Path(tmp) / "r.json").read_text())
    result["cpu_s"] = ru.ru_utime + ru.ru_stime
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)  # the server process itself
    ap.add_argument(
        "--step-ms", type=float, default=0.0, help="one chunk per stream every this many ms (0: as fast as possible)"
    )
    ap.add_argument("--concurrency", default="64,256,1024")
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--prompts-per-level", type=int, default=1024)
    ap.add_argument("--client-core", type=int, default=1)
    ap.add_argument("--server-core", type=int, default=0)
    ap.add_argument("--vllm", default=str(HERE / ".venv" / "bin" / "vllm"))
    ap.add_argument("--model", default=str(HERE / "model"), help="tokenizer folder (make_model.py's model)")
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.step_ms / 1e3)
        return
    port = free_port()
    server = subprocess.Popen(
        [
            "taskset",
            "-c",
            str(args.server_core),
            sys.executable,
            __file__,
            "--serve",
            str(port),
            "--step-ms",
            str(args.step_ms),
        ],
        start_new_session=True,
    )
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        base = bench(args.vllm, port, args.model, 1, 1, args.output_len, args.client_core)
        print(f"client start-up: {base['cpu_s']:.1f} CPU s (subtracted below)")
        print("concurrency  tokens/s  TPOT mean ms  ITL median ms  client us/token  server us/token")
        for c in (int(v) for v in args.concurrency.split(",")):
            t0 = _server_cpu(server.pid)
            r = bench(args.vllm, port, args.model, c, args.prompts_per_level, args.output_len, args.client_core)
            t1 = _server_cpu(server.pid)
            tokens = r["total_output_tokens"]
            print(
                f"{c:>11}  {r['output_throughput']:8.0f}  {r['mean_tpot_ms']:12.2f}  {r['median_itl_ms']:13.3f}  "
                f"{(r['cpu_s'] - base['cpu_s']) / tokens * 1e6:15.1f}  {(t1 - t0) / tokens * 1e6:15.1f}"
            )
    finally:
        os.killpg(server.pid, 15)
        server.wait()


def _server_cpu(pid: int) -> float:
    """CPU seconds the server process has used (/proc/PID/stat utime + stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    main()
