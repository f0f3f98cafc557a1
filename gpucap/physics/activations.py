"""What an engine reserves outside the KV cache for its own working memory: the activations of
its profiling run's forward pass (the fused-MoE workspace under vLLM) and its sampler's logits
(DESIGN.md section 3). ``gpucap.physics.memory`` charges them to the KV budget."""

from __future__ import annotations

from gpucap.catalog.models import ModelSpec
from gpucap.config import EngineConfig, Layout
from gpucap.units import ACTIVATION_BYTES

# Bytes per logit alive at the peak of vLLM's sampler profiling (``_dummy_sampler_run``), by how the
# sampler runs there (``EngineConfig.sampler``).
# "logits" (the V2 model runner, which logs "model_runner.py": vLLM's default for dense models from
# v0.22, a list of architectures until v0.24, and for every model it supports from v0.29): its
# dummy requests keep the default top-k and top-p (vocabulary, 1.0: ``SamplingStates``) and need
# no logits processing, so only the logits in the model's dtype are held while the Gumbel kernel
# samples them.
LOGITS_ONLY_BYTES_PER_LOGIT = 2.0
# "in-place" (the V1 model runner, "gpu_model_runner.py", with FlashInfer's sampler or the Triton
# top-k/top-p of v0.17+; v0.21+ warms both): the model-dtype logits (2), their fp32 copy
# (``Sampler.forward``, 4), fp32 probabilities (``softmax``, 4) and fp32 exponential noise
# (``random_sample``, 4); temperature, top-k and top-p work in place.
SAMPLER_BYTES_PER_LOGIT = 2.0 + 4.0 + 4.0 + 4.0
# "sort" (the V1 runner with PyTorch's ``apply_top_k_top_p``: v0.11.1-v0.16 by default, v0.10-v0.11.0
# without FlashInfer): at ``logits.sort()`` the model-dtype logits (2) and their fp32 copy (4) are
# alive with the sorted values (4) and int64 indices (8), PyTorch's int64 reverse indices
# (``segmented_sort_pairs``, ATen/native/cuda/SortStable.cu, 8) and CUB's alternate key and value
# buffers (``DeviceSegmentedRadixSort::SortPairs`` may not overwrite its input: 4 + 8). Below 128
# rows PyTorch sorts by ``segmented_sort_pairs_by_full_sort``: two int2 index-and-segment arrays
# (16) instead of the reverse indices (8).
SORT_SAMPLER_BYTES_PER_LOGIT = 2.0 + 4.0 + (4.0 + 8.0) + 8.0 + (4.0 + 8.0)
SORT_FEW_ROWS = 128  # PyTorch's segment count below which it sorts the whole batch at once
SORT_FEW_ROWS_EXTRA_BYTES = 8.0
OTHER_LOGIT_BYTES = 4.0  # fp32 logits, where SGLang and TensorRT-LLM reserve for sampling


def expert_width_per_gpu(spec: ModelSpec, layout: Layout) -> float:
    """The intermediate width each GPU holds of a routed expert: ``moe_intermediate_size`` split
    over the ``tp x attn_dp / ep`` GPUs that share each expert (whole under expert parallelism)."""
    return spec.moe_intermediate_size / max(layout.stage_gpus // layout.ep, 1)


def fused_moe_workspace_elements_per_token(spec: ModelSpec, layout: Layout) -> float:
    """Elements vLLM's fused-MoE kernel allocates per token of the batch: ``top_k x (max(N, H) + N / 2)``.

    ``fused_experts_impl`` (vLLM 0.32 ``fused_moe/fused_moe.py``) allocates ``cache13``, ``M x top_k x
    max(N, K)`` (the gate-and-up output, reused for the down output) and ``intermediate_cache2``,
    ``M x top_k x N / 2`` (the activation's output), with ``N = 2 x expert_width_per_gpu`` and
    ``K = H`` the hidden size. Qwen3-235B
    (H 4096, I 1536, top 8) at tp 4: 8 x (4096 + 384) = 35,840.
    """
    n = 2.0 * expert_width_per_gpu(spec, layout)
    return spec.experts_per_token * (max(n, float(spec.hidden_size)) + n / 2)


def forward_activation_bytes_per_gpu(spec: ModelSpec, layout: Layout, engine: EngineConfig) -> float:
    """Peak activations of one forward pass over ``T = max_num_batched_tokens`` tokens.

    ``T x (4 x hidden + 2 x mlp_width / tp) x 2 bytes`` (residual, normed input, attention output
    and the gated MLP's two halves; ``mlp_width`` is the dense MLP's or ``top_k x`` the experts').
    Under vLLM a mixture of experts' layers take their fused-MoE workspace instead
    (``fused_moe_workspace_elements_per_token``), the dense layers' MLP where it is wider.
    An approximation of what vLLM's profiler measures for ``_dummy_run(max_num_tokens)``.
    """
    tokens = float(engine.max_num_batched_tokens or 0)
    if engine.engine == "vllm" and spec.is_moe:
        dense = 2 * spec.intermediate_size / layout.tp if spec.num_dense_layers else 0.0
        mlp_elements = max(dense, fused_moe_workspace_elements_per_token(spec, layout))
        return tokens * (4 * spec.hidden_size + mlp_elements) * ACTIVATION_BYTES
    mlp = max(spec.intermediate_size, spec.experts_per_token * spec.moe_intermediate_size)
    return tokens * (4 * spec.hidden_size + 2 * mlp / layout.tp) * ACTIVATION_BYTES


def sampler_bytes_per_gpu(spec: ModelSpec, engine: EngineConfig) -> float:
    """Peak of the sampler's profiling run: ``rows x vocab x bytes per logit``, with
    ``rows = min(max_num_seqs, max_num_batched_tokens)``.

    One sampled row per request of the dummy batch (``_dummy_run`` splits the tokens over
    ``min(max_num_seqs, tokens)`` requests), each row the whole vocabulary on every GPU: vLLM
    all-gathers the logits under tensor parallelism (``LogitsProcessor._gather_logits``,
    ``Platform.use_all_gather`` is true). Bytes per logit by ``engine.sampler``:
    ``LOGITS_ONLY_BYTES_PER_LOGIT`` (2, "logits"), ``SAMPLER_BYTES_PER_LOGIT`` (14, "in-place") or
    ``SORT_SAMPLER_BYTES_PER_LOGIT`` (38, "sort"; 46 below ``SORT_FEW_ROWS`` rows).
    """
    rows = min(float(engine.max_num_seqs or 0), float(engine.max_num_batched_tokens or 0))
    if engine.sampler == "sort":
        per_logit = SORT_SAMPLER_BYTES_PER_LOGIT + (SORT_FEW_ROWS_EXTRA_BYTES if rows < SORT_FEW_ROWS else 0.0)
    elif engine.sampler == "in-place":
        per_logit = SAMPLER_BYTES_PER_LOGIT
    else:
        per_logit = LOGITS_ONLY_BYTES_PER_LOGIT
    return rows * spec.vocab_size * per_logit


def activation_bytes_per_gpu(spec: ModelSpec, layout: Layout, engine: EngineConfig) -> float:
    """Peak activations the engine reserves outside the KV cache.

    vLLM: its profiling run's peak, ``max(forward, sampler)``. The sampler runs after the forward
    pass has freed its intermediates (``profile_run`` keeps only the sampled rows' hidden
    states), so the two peaks do not add (``forward_activation_bytes_per_gpu``,
    ``sampler_bytes_per_gpu``).

    SGLang and TensorRT-LLM: the forward pass plus fp32 logits for ``max_num_seqs`` rows of this
    GPU's vocabulary shard, ``max_num_seqs x vocab / tp x 4`` (``OTHER_LOGIT_BYTES``), an
    approximation of their reservations not checked against their logs.
    """
    forward = forward_activation_bytes_per_gpu(spec, layout, engine)
    if engine.engine == "vllm":
        return max(forward, sampler_bytes_per_gpu(spec, engine))
    return forward + float(engine.max_num_seqs or 0) * spec.vocab_size / layout.tp * OTHER_LOGIT_BYTES
