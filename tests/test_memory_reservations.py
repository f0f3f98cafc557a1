"""What vLLM charges to the KV budget besides the weights: its profiling run's peak (the forward
pass or the sampler, whichever is larger), the non-torch memory its profiler sees, and a KV
budget given outright (``--kv-cache-memory``). Expected bytes are worked by hand from the models'
config.json shapes and vLLM's sources (``vllm/v1/worker/gpu_model_runner.py``,
``vllm/v1/sample/sampler.py``)."""

from __future__ import annotations

import json

import pytest

from gpucap.catalog.gpus import get_gpu
from gpucap.catalog.lookup import load_model
from gpucap.cli.main import main
from gpucap.config import RUNTIME_OVERHEAD_BYTES, EngineConfig, Layout, hardware
from gpucap.physics.activations import activation_bytes_per_gpu, forward_activation_bytes_per_gpu, sampler_bytes_per_gpu
from gpucap.physics.memory import hardware_memory, memory_breakdown
from gpucap.units import GiB

H100 = get_gpu("H100-SXM-80GB")


def test_vllm_profiling_peak_is_the_larger_of_forward_and_sampler() -> None:
    spec = load_model("Qwen/Qwen3-32B")  # hidden 5120, intermediate 25600, vocab 151,936
    # vLLM's V1 runner with FlashInfer / Triton top-k/top-p on an H100: 1024 sequences, 8192 tokens
    engine = EngineConfig(sampler="in-place").resolve(H100)
    # forward: 8192 tokens x (4 x 5120 + 2 x 25600) x 2 bytes
    assert forward_activation_bytes_per_gpu(spec, Layout(), engine) == 8192 * 71_680 * 2 == 1_174_405_120
    # sampler: min(1024, 8192) rows x 151,936 x (2 + 4 + 4 + 4) bytes, on every GPU (all-gathered)
    assert sampler_bytes_per_gpu(spec, engine) == 1024 * 151_936 * 14 == 2_178_154_496
    assert activation_bytes_per_gpu(spec, Layout(), engine) == 2_178_154_496
    assert activation_bytes_per_gpu(spec, Layout(tp=2), engine) == 2_178_154_496
    # 256 sequences: 256 x 151,936 x 14 = 544,538,624 < the forward pass, which now sets the peak
    fewer = EngineConfig(max_num_seqs=256, sampler="in-place").resolve(H100)
    assert activation_bytes_per_gpu(spec, Layout(), fewer) == 1_174_405_120
    # a dummy batch of fewer tokens than sequences samples one row per token
    few_tokens = EngineConfig(max_num_seqs=1024, max_num_batched_tokens=512, sampler="in-place").resolve(H100)
    assert sampler_bytes_per_gpu(spec, few_tokens) == 512 * 151_936 * 14


def test_v2_runner_samples_the_logits_alone() -> None:
    """vLLM's V2 model runner (the default) profiles the sampler with dummy requests that keep the
    default top-k and top-p and need no logits processing: the bf16 logits alone, 2 bytes a logit."""
    spec = load_model("Qwen/Qwen3-32B")
    engine = EngineConfig().resolve(H100)
    assert engine.sampler == "logits"
    assert sampler_bytes_per_gpu(spec, engine) == 1024 * 151_936 * 2 == 311_164_928
    # so the forward pass over 8192 tokens sets the peak: 1,174,405,120 B
    assert activation_bytes_per_gpu(spec, Layout(), engine) == 1_174_405_120
    # vLLM 0.27.1 (V2 runner, logged) left 8.22 GiB for Qwen3-32B at tp 2 on RTX PRO 6000s at
    # utilization 0.426 (data/memory case 28): 0.426 x 95.01 - 30.51 weights - 0.70 forward
    # (8192 x (20,480 + 25,600) x 2 B) - 0.07 - 0.25 NCCL - 1.0 graphs = 7.94 GiB, within 0.3
    engine = EngineConfig(gpu_memory_utilization=0.426)
    mem = hardware_memory(hardware("Qwen/Qwen3-32B", "RTX-PRO-6000-96GB", tp=2, engine=engine))
    assert mem.activations == 8192 * 46_080 * 2
    assert mem.kv_budget / GiB == pytest.approx(8.22, abs=0.3)


def test_sort_sampler_holds_38_bytes_a_logit_and_matches_the_logged_peaks() -> None:
    """PyTorch's sort (vLLM's native top-k/top-p) holds the bf16 logits (2), their fp32 copy (4),
    sorted values and int64 indices (4 + 8), int64 reverse indices (8) and CUB's alternate key and
    value buffers (4 + 8): 38 bytes a logit; below 128 rows the full-sort path's two int2 arrays
    (16) replace the reverse indices (8): 46."""
    qwen3_8b = load_model("Qwen/Qwen3-8B")  # vocab 151,936
    small = EngineConfig(sampler="sort").resolve(get_gpu("RTX-4090-24GB"))  # 256 sequences, 2048 tokens
    assert sampler_bytes_per_gpu(qwen3_8b, small) == 256 * 151_936 * 38 == 1_478_033_408
    # vLLM 0.10.2 without FlashInfer logged "1.4 GiB for peak activation" for Qwen3-8B on a 24 GB
    # card and for Qwen3-235B at tp 8 on L40S: 1,478,033,408 B = 1.377 GiB, within 2%
    assert sampler_bytes_per_gpu(qwen3_8b, small) / GiB == pytest.approx(1.40, rel=0.02)
    # 1024 sequences (2 x H200, Qwen3-Next, same vocabulary) logged 5.58 GiB: 5.51 GiB, within 2%
    big = EngineConfig(sampler="sort").resolve(get_gpu("H200-SXM-141GB"))
    assert sampler_bytes_per_gpu(qwen3_8b, big) / GiB == pytest.approx(5.58, rel=0.02)
    few = EngineConfig(sampler="sort", max_num_seqs=32).resolve(H100)
    assert sampler_bytes_per_gpu(qwen3_8b, few) == 32 * 151_936 * 46
    with pytest.raises(ValueError, match="unknown sampler 'argsort'; use one of logits, in-place, sort"):
        EngineConfig(sampler="argsort")


def test_vllm_batch_defaults_by_gpu_memory() -> None:
    """vLLM's get_batch_defaults (v0.31, v0.33), API server: >= 160 GiB 1024 / 16384; >= 70 GiB and
    not an A100 1024 / 8192; otherwise 256 / 2048."""
    for gpu, seqs, tokens in [
        ("B200-180GB", 1024, 16384),  # 178.35 GiB as CUDA reports it
        ("MI300X-192GB", 1024, 16384),
        ("H200-SXM-141GB", 1024, 8192),
        ("H100-SXM-80GB", 1024, 8192),
        ("A100-SXM-80GB", 256, 2048),
        ("L40S-48GB", 256, 2048),
    ]:
        engine = EngineConfig().resolve(get_gpu(gpu))
        assert (engine.max_num_seqs, engine.max_num_batched_tokens) == (seqs, tokens), gpu


def test_other_engines_keep_forward_plus_their_logits() -> None:
    spec = load_model("Qwen/Qwen3-32B")
    engine = EngineConfig(engine="sglang").resolve(H100)  # 1024 running requests, chunks of 8192
    # 8192 x (4 x 5120 + 2 x 25600 / 2) x 2 + 1024 x 151,936 / 2 x 4
    assert activation_bytes_per_gpu(spec, Layout(tp=2), engine) == 8192 * 46_080 * 2 + 1024 * 75_968 * 4


def test_non_torch_charge_by_engine() -> None:
    # vLLM (0.11+) takes its snapshot after the CUDA context and NCCL exist: only the profiling
    # run's workspaces count, "0.07 GiB for non-torch memory" (vLLM PR #21489's log)
    assert EngineConfig().resolve(H100).runtime_overhead_bytes == pytest.approx(0.07 * GiB)
    assert EngineConfig(engine="sglang").resolve(H100).runtime_overhead_bytes == RUNTIME_OVERHEAD_BYTES
    assert EngineConfig(runtime_overhead_bytes=0.5 * GiB).resolve(H100).runtime_overhead_bytes == 0.5 * GiB
    # across GPUs vLLM also charges the buffers NCCL allocates at the profiling run's first
    # all-reduce: 0.25 GiB (the smallest it logs, 0.20-0.43 GiB at tp 2-16); one GPU has none
    spec = load_model("Qwen/Qwen3-32B")
    one, two = (
        memory_breakdown(spec, H100, Layout(tp=tp), weight_dtype="bf16", kv_dtype="auto", engine=EngineConfig())
        for tp in (1, 2)
    )
    assert one.runtime_overhead == pytest.approx(0.07 * GiB)
    assert two.runtime_overhead == pytest.approx((0.07 + 0.25) * GiB)
    sglang = EngineConfig(engine="sglang")
    split = memory_breakdown(spec, H100, Layout(tp=2), weight_dtype="bf16", kv_dtype="auto", engine=sglang)
    assert split.runtime_overhead == RUNTIME_OVERHEAD_BYTES  # its 1 GiB already holds NCCL's
    with pytest.raises(ValueError, match="runtime_overhead_bytes"):
        EngineConfig(runtime_overhead_bytes=-1.0)
    with pytest.raises(ValueError, match="kv_cache_memory_bytes"):
        EngineConfig(kv_cache_memory_bytes=float("nan"))


def test_given_kv_budget_is_used_as_is() -> None:
    spec = load_model("Qwen/Qwen3-32B")
    given = EngineConfig(kv_cache_memory_bytes=8.52 * GiB, gpu_memory_utilization=0.5)
    mem = memory_breakdown(spec, H100, Layout(), weight_dtype="bf16", kv_dtype="auto", engine=given)
    assert mem.kv_budget == 8.52 * GiB  # the utilization is not used, as in vLLM
    assert mem.usable == pytest.approx(mem.reserved + mem.weights.total + 8.52 * GiB)
    # 8.52 GiB / (64 layers x 2 x 8 KV heads x 128 x 2 bytes = 262,144 B per token)
    assert mem.kv_tokens_per_gpu == pytest.approx(8.52 * GiB / 262_144)


def test_qwen2_7b_on_an_a100_matches_vllms_log() -> None:
    # vLLM 0.10.1.1, Qwen2-7B-Instruct on one A100 80GB at gpu_memory_utilization 0.25 (data/memory
    # case 20, dennislee22/vLLM-benchmarking): "Available KV cache memory: 5.01 GiB". That version
    # captures CUDA graphs after the KV cache, so none are charged; at tp 1 its non-torch charge is
    # the workspaces. By hand: 0.25 x 79.15 GiB (the A100's CUDA total) - weights (gpucap's,
    # 14.19 GiB; logged 14.2488) - sampler 256 x 152,064 x 14 B (0.51 GiB; the forward pass of
    # 2048 tokens is 0.20) - 0.07 = 5.02 GiB
    # ('Using FlashInfer for top-p & top-k sampling.' logged: the V1 runner's in-place sampler)
    engine = EngineConfig(gpu_memory_utilization=0.25, cuda_graph_bytes=0.0, sampler="in-place")
    mem = hardware_memory(hardware("Qwen/Qwen2-7B-Instruct", "A100-SXM-80GB", engine=engine))
    assert mem.activations == 256 * 152_064 * 14
    assert mem.kv_budget / GiB == pytest.approx(5.01, abs=0.05)


def test_tight_when_weights_take_most_of_the_usable_memory() -> None:
    from gpucap import estimate
    from gpucap.report.text import format_estimate

    # Qwen3-32B bf16: 32.8e9 params x 2 B = 61.0 GiB of 0.92 x 79.19 = 72.9 GiB usable (84%)
    e = estimate("Qwen/Qwen3-32B", "H100-SXM-80GB", input_len=2000, output_len=500)
    assert e.memory.tight and "tight: the weights take 84%" in format_estimate(e)
    # Qwen3-8B: 8.2e9 x 2 B = 15.3 GiB (21%)
    small = estimate("Qwen/Qwen3-8B", "H100-SXM-80GB", input_len=2000, output_len=500)
    assert not small.memory.tight and "tight:" not in format_estimate(small)
    given = estimate(
        "Qwen/Qwen3-32B", "H100-SXM-80GB", input_len=2000, output_len=500,
        engine=EngineConfig(kv_cache_memory_bytes=8.5 * GiB),
    )  # fmt: skip
    assert given.memory.kv_budget_given and "KV budget as given" in format_estimate(given)


def test_cli_sampler_option_moves_the_activation_reserve(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["estimate", "--model", "Qwen/Qwen3-8B", "--gpu", "RTX-4090-24GB", "--input-len", "512"]
    got = {}
    for sampler in ("logits", "in-place", "sort"):
        assert main([*args, "--output-len", "256", "--sampler", sampler, "--json"]) == 0
        got[sampler] = json.loads(capsys.readouterr().out)["memory"]["activation_bytes_per_gpu"]
    # 256 rows x 151,936 x 14 and x 38 bytes (the sampler sets the peak at 2048 batched tokens);
    # logits alone (2 bytes) fall below the forward pass: 2048 x (4 x 4096 + 2 x 12,288) x 2
    assert (got["in-place"], got["sort"]) == (256 * 151_936 * 14, 256 * 151_936 * 38)
    assert got["logits"] == 2048 * 40_960 * 2
