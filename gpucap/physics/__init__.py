"""One replica's physics: memory per GPU, the roofline time of one engine step, and continuous batching in steady state and in finite runs (DESIGN.md sections 3-5, 8). Imports only the catalog, gpucap.config and the base modules."""

from typing import TYPE_CHECKING

from gpucap.lazy import public_names

if TYPE_CHECKING:
    from gpucap.physics.batching import LoadPoint as LoadPoint
    from gpucap.physics.batching import closed_loop as closed_loop
    from gpucap.physics.batching import open_loop as open_loop
    from gpucap.physics.coefficients import COEFFICIENT_INFO as COEFFICIENT_INFO
    from gpucap.physics.coefficients import Coefficients as Coefficients
    from gpucap.physics.extras import NO_EXTRAS as NO_EXTRAS
    from gpucap.physics.extras import Extras as Extras
    from gpucap.physics.memory import MemoryBreakdown as MemoryBreakdown
    from gpucap.physics.memory import batch_slots as batch_slots
    from gpucap.physics.memory import concurrency_by_memory as concurrency_by_memory
    from gpucap.physics.memory import hardware_memory as hardware_memory
    from gpucap.physics.memory import held_tokens_per_layer as held_tokens_per_layer
    from gpucap.physics.memory import kv_bytes_per_token as kv_bytes_per_token
    from gpucap.physics.memory import kv_bytes_per_token_per_gpu as kv_bytes_per_token_per_gpu
    from gpucap.physics.memory import memory_limit as memory_limit
    from gpucap.physics.memory import weight_bytes_per_gpu as weight_bytes_per_gpu
    from gpucap.physics.requests import Requests as Requests
    from gpucap.physics.speculative import acceptance_length as acceptance_length
    from gpucap.physics.step import StepTime as StepTime
    from gpucap.physics.step import StepWork as StepWork
    from gpucap.physics.step import experts_touched as experts_touched
    from gpucap.physics.step import prefill_pairs_per_layer as prefill_pairs_per_layer
    from gpucap.physics.step import step_work as step_work
    from gpucap.physics.steptime import GEMM_COMPUTE as GEMM_COMPUTE
    from gpucap.physics.steptime import step_terms as step_terms
    from gpucap.physics.steptime import step_time as step_time

__getattr__, __dir__, __all__ = public_names(__name__, __file__)
