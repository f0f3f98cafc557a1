"""How each serving engine fills a step: small policy objects the step-level simulation
(``gpucap.queueing.simulate``) follows. Each is data: the order in which work enters a step, what a
request must find free in the KV cache to be admitted, and whether the host's per-step work runs
beside the GPU's.

- ``vllm``: vLLM V1 (``vllm/v1/core/sched/scheduler.py``). Running requests first, in admission
  order: a decode takes one token of the step's budget (``max_num_batched_tokens``), an unfinished
  prompt its next chunk. Then waiting requests, first come first served, each starting on a chunk
  of its prompt, while budget, batch slots and KV blocks last. A request is admitted with blocks
  for the tokens of its first chunk only; when a running request cannot get a block, the last
  admitted is preempted and later recomputed from scratch.
- ``sglang``: SGLang (``sglang/srt/managers/scheduler.py``, ``get_next_batch_to_run``): prefill
  first. While a new prefill batch can be formed (waiting requests whose whole prompt, plus 0.7 of
  every running request's remaining output, fit the KV cache: ``SGLANG_INIT_NEW_TOKEN_RATIO``,
  ``global_config.py``), the step is that prefill batch, up to ``chunked_prefill_size`` tokens,
  and running decodes wait; otherwise the step decodes every running request. Retraction
  (SGLang's preemption) recomputes, as in vLLM.
- ``trtllm``: TensorRT-LLM's capacity scheduler with its default policy ``GUARANTEED_NO_EVICT``:
  a request is admitted only when the KV cache holds its whole prompt and all its output tokens,
  so nothing is ever evicted; generation requests first, then context chunks within
  ``max_num_tokens``.

Host work per step (scheduling, sampling, detokenizing) overlaps the GPU when the engine runs
one step ahead: vLLM's async scheduling (``--async-scheduling``; the default since vLLM PR
#27614, late 2025), SGLang's overlap scheduler (default since v0.4) and TensorRT-LLM's overlap
scheduler (default in its PyTorch backend). That switch is an engine knob
(``EngineConfig.overlap_host``), applied in ``gpucap.physics.steptime.combine``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpucap.types import PREFILL_FIRST_ENGINES

SGLANG_NEW_TOKEN_RATIO = 0.7  # SGLANG_INIT_NEW_TOKEN_RATIO, sglang/global_config.py


@dataclass(frozen=True)
class Policy:
    """What an engine's scheduler does each step (module docstring)."""

    name: str
    admit_whole_prompt: bool  # KV for the whole prompt at admission (else only its first chunk)
    reserve_output: float  # share of each request's output tokens held back in the KV cache
    preempts: bool  # a request that cannot grow is preempted and recomputed
    # under the engine's prefix caching (EngineConfig.prefix_caching) a preempted request's full
    # blocks stay hashed in the free pool and hit on resume (vLLM V1: vllm/v1/core/block_pool.py)
    resumes_from_cache: bool = False

    @property
    def decodes_with_prompts(self) -> bool:
        """False where a step with prompt chunks runs no decodes (``gpucap.types.PREFILL_FIRST_ENGINES``)."""
        return self.name not in PREFILL_FIRST_ENGINES

    def __post_init__(self) -> None:
        if not 0.0 <= self.reserve_output <= 1.0:
            raise ValueError(f"reserve_output must be in [0, 1], got {self.reserve_output!r}")


VLLM_V1 = Policy(
    "vllm",
    admit_whole_prompt=False,
    reserve_output=0.0,
    preempts=True,
    resumes_from_cache=True,
)
SGLANG = Policy(
    "sglang",
    admit_whole_prompt=True,
    reserve_output=SGLANG_NEW_TOKEN_RATIO,
    preempts=True,
)
TRTLLM = Policy(
    "trtllm",
    admit_whole_prompt=True,
    reserve_output=1.0,
    preempts=False,
)
POLICIES = {p.name: p for p in (VLLM_V1, SGLANG, TRTLLM)}


def policy_for(engine: str) -> Policy:
    """The scheduler policy of ``engine`` (vllm, sglang, trtllm)."""
    try:
        return POLICIES[engine]
    except KeyError:
        raise ValueError(f"no scheduler policy for engine {engine!r}; use one of {', '.join(POLICIES)}") from None
