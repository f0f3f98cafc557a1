"""The command that starts each engine's server for a plan: vLLM's ``vllm serve``, SGLang's
``python -m sglang.launch_server`` and TensorRT-LLM's ``trtllm-serve``, with the plan's split,
formats and batch knobs as each engine spells them."""

from __future__ import annotations

import shlex

from gpucap.config import EngineConfig, Hardware

SERVER_PORT = 8000  # passed to the server and to the load test alike
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}
# gpucap's KV formats as each engine's --kv-cache-dtype (TensorRT-LLM: kv_cache_config.dtype)
KV_FLAGS = {
    "vllm": {"auto": "auto", "bf16": "auto", "fp16": "auto", "fp8": "fp8", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"},
    "sglang": {"auto": "auto", "bf16": "auto", "fp16": "auto", "fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"},
    "trtllm": {"auto": "auto", "bf16": "auto", "fp16": "auto", "fp8": "fp8", "fp8_e4m3": "fp8"},
}  # fmt: skip
SIXTEEN_BIT = ("bf16", "fp16")
CHECKPOINTS = {
    "fp8": "an FP8 checkpoint (e.g. one quantized with NVIDIA Model Optimizer or llm-compressor)",
    "nvfp4": "an NVFP4 checkpoint (e.g. one quantized with NVIDIA Model Optimizer or llm-compressor)",
    "mxfp4": "an MXFP4 checkpoint",
    "int4": "an int4 AWQ or GPTQ checkpoint",
    "int8": "an int8 (W8A8) checkpoint",
}
TRTLLM_EXTRA_FILE = "gpucap-trtllm-extra.yaml"


def weight_flags(engine: str, hw: Hardware, model_id: str) -> tuple[list[str], list[str]]:
    """Flags and notes for the weight format: ``--quantization fp8`` where vLLM or SGLang quantize
    a 16-bit checkpoint to FP8 when loading; for any other change of format, the checkpoint the
    plan needs (engines read a quantized format from the checkpoint's config, no flag)."""
    weight, checkpoint = hw.weight_dtype, hw.spec.checkpoint_dtype
    if weight == checkpoint or (weight in SIXTEEN_BIT and checkpoint in SIXTEEN_BIT):
        return [], []
    name = ENGINE_NAMES[engine]
    if weight == "fp8" and checkpoint in SIXTEEN_BIT and engine in ("vllm", "sglang"):
        return ["--quantization", "fp8"], [
            f"fp8 weights: {name} quantizes the {checkpoint} checkpoint {model_id} when loading it (--quantization fp8); "
            "an FP8 checkpoint serves without the flag"
        ]
    if weight in SIXTEEN_BIT:
        need = "a 16-bit checkpoint"
    else:
        need = CHECKPOINTS.get(weight, f"a {weight} checkpoint")
    return [], [
        f"{weight} weights need {need} of the model in place of {model_id} ({checkpoint}); {name} reads the format "
        "from the checkpoint's config, so no flag is added"
    ]


def kv_flag(engine: str, kv_dtype: str) -> str:
    try:
        return KV_FLAGS[engine][kv_dtype]
    except KeyError:
        raise ValueError(
            f"kv_dtype {kv_dtype!r} has no {ENGINE_NAMES[engine]} KV-cache format; use one of {', '.join(KV_FLAGS[engine])}"
        ) from None


def nondefault_block_size(hw: Hardware) -> int | None:
    """The KV block (page) size where it differs from the engine's default; None leaves it to the
    engine, whose attention backend may need its own (vLLM picks one per backend)."""
    default = EngineConfig(engine=hw.engine.engine).resolve(hw.gpu).block_size
    return hw.engine.block_size if hw.engine.block_size != default else None


# How vLLM and SGLang spell the same knobs: tensor and pipeline parallel sizes, batch slots, the
# prompt-token budget (SGLang's chunked-prefill size), the memory fraction, the KV block (SGLang's
# page) and the context length.
SERVER_FLAGS = {
    "vllm": ("--tensor-parallel-size", "--pipeline-parallel-size", "--max-num-seqs", "--max-num-batched-tokens",
             "--gpu-memory-utilization", "--block-size", "--max-model-len"),
    "sglang": ("--tp-size", "--pp-size", "--max-running-requests", "--chunked-prefill-size",
               "--mem-fraction-static", "--page-size", "--context-length"),
}  # fmt: skip


def _server_flags(engine: str, hw: Hardware, max_len: int, ep: list[str], quant: list[str]) -> list[str]:
    """The flags vLLM and SGLang share, as ``engine`` spells them (``SERVER_FLAGS``), with the
    expert-parallel flags ``ep`` and the weight flags ``quant``."""
    tp, pp, seqs, budget, memory, block_flag, context = SERVER_FLAGS[engine]
    lay, eng = hw.layout, hw.engine
    cmd = [tp, str(lay.tp), pp, str(lay.pp), *ep, seqs, str(eng.max_num_seqs), budget, str(eng.max_num_batched_tokens)]
    cmd += [memory, f"{eng.gpu_memory_utilization:g}"]
    block = nondefault_block_size(hw)
    cmd += [block_flag, str(block)] if block else []
    return cmd + ["--kv-cache-dtype", kv_flag(engine, hw.kv_dtype), *quant, context, str(max_len)]


def serve_vllm(model_id: str, hw: Hardware, max_len: int) -> tuple[str, list[str]]:
    """``vllm serve`` of one replica (flags: module docstring). vLLM's expert parallelism spreads
    the experts over all GPUs of a stage (``--enable-expert-parallel``: ep = tp), no other ep."""
    lay = hw.layout
    if lay.ep > 1 and lay.ep != lay.tp:
        raise ValueError(
            f"ep={lay.ep} with tp={lay.tp}: vLLM's --enable-expert-parallel spreads the experts over all tp GPUs "
            f"(ep = tp = {lay.tp}); use a plan with ep 1 or ep {lay.tp}, or another engine"
        )
    quant, notes = weight_flags("vllm", hw, model_id)
    ep = ["--enable-expert-parallel"] if lay.ep > 1 else []
    cmd = ["vllm", "serve", model_id, "--port", str(SERVER_PORT), *_server_flags("vllm", hw, max_len, ep, quant)]
    return shlex.join(cmd), notes


def serve_sglang(model_id: str, hw: Hardware, max_len: int) -> tuple[str, list[str]]:
    """``python -m sglang.launch_server`` of one replica; gpucap's max_num_batched_tokens is
    SGLang's chunked-prefill size, its memory fraction ``--mem-fraction-static``, its block the page."""
    quant, notes = weight_flags("sglang", hw, model_id)
    ep = ["--ep-size", str(hw.layout.ep)] if hw.layout.ep > 1 else []
    cmd = ["python", "-m", "sglang.launch_server", "--model-path", model_id, "--port", str(SERVER_PORT)]
    cmd += _server_flags("sglang", hw, max_len, ep, quant)
    return shlex.join(cmd), notes


def serve_trtllm(model_id: str, hw: Hardware, max_len: int) -> tuple[str, list[str]]:
    """``trtllm-serve`` of one replica on the PyTorch backend. The KV format and a block size other
    than 32 have no flag in every version: they go in a YAML (``kv_cache_config``) given with
    ``--extra_llm_api_options``, written first by ``printf``."""
    lay, eng = hw.layout, hw.engine
    _, notes = weight_flags("trtllm", hw, model_id)  # no flag quantizes when loading: the checkpoint decides
    kv = kv_flag("trtllm", hw.kv_dtype)
    block = nondefault_block_size(hw)
    extra = ([f"  dtype: {kv}"] if kv != "auto" else []) + ([f"  tokens_per_block: {block}"] if block else [])
    cmd = ["trtllm-serve", model_id, "--backend", "pytorch", "--port", str(SERVER_PORT)]
    cmd += ["--tp_size", str(lay.tp), "--pp_size", str(lay.pp)] + (["--ep_size", str(lay.ep)] if lay.ep > 1 else [])
    cmd += ["--max_batch_size", str(eng.max_num_seqs), "--max_num_tokens", str(eng.max_num_batched_tokens)]
    cmd += ["--kv_cache_free_gpu_memory_fraction", f"{eng.gpu_memory_utilization:g}", "--max_seq_len", str(max_len)]
    if not extra:
        return shlex.join(cmd), notes
    write = shlex.join(["printf", "%s\\n", "kv_cache_config:", *extra]) + f" > {TRTLLM_EXTRA_FILE}"
    if kv != "auto":
        notes.append(
            "TensorRT-LLM takes FP8 KV-cache scales from a quantized checkpoint's config: check in the server log "
            "that the KV cache is fp8"
        )
    return f"{write} && {shlex.join([*cmd, '--extra_llm_api_options', TRTLLM_EXTRA_FILE])}", notes


SERVERS = {"vllm": serve_vllm, "sglang": serve_sglang, "trtllm": serve_trtllm}
