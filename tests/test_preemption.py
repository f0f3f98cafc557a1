"""The engine loop's batch slots and vLLM's preemption of an overfilled KV cache: vLLM admits a
request while its first chunk's blocks are free, so an all-at-once run fills the cache with
prompts and preempts when their outputs grow (measured on vLLM 0.32's CPU server: 14
preemptions of 64 long prompts into 160 blocks, benchmarks/README.md)."""

from gpucap.config import EngineConfig, hardware
from gpucap.physics.coefficients import Coefficients
from gpucap.queueing.loads import Load
from gpucap.queueing.simulate import engine_slots, run_benchmark

COEF = Coefficients.for_engine("vllm")


def tiny_cache_hw(prefix_caching: bool = True):
    knobs = EngineConfig(block_size=16, max_num_seqs=8, max_num_batched_tokens=2048, prefix_caching=prefix_caching)
    return hardware("meta-llama/Llama-3.1-8B", "H100-SXM-80GB", engine=knobs)


def test_engine_slots_are_max_num_seqs_within_the_blocks() -> None:
    hw = tiny_cache_hw()
    assert engine_slots(hw, kv_capacity=64) == 4  # 64 tokens: four 16-token blocks, one a request at least
    assert engine_slots(hw, kv_capacity=16_000) == 8  # max_num_seqs


def run(hw, max_running=None):
    # three 16-token prompts (one block each) with 20 output tokens, into four blocks
    return run_benchmark(
        hw, COEF, Load.all_at_once(3), input_len=16, output_len=20, kv_capacity_tokens=64, max_running=max_running
    )


def test_an_overfilled_cache_preempts() -> None:
    # all three prompts fit (3 of 4 blocks); their 17th tokens need a second block each (6 > 4):
    # the last admitted is preempted, and again when the two left reach 33 tokens (3 blocks each)
    assert run(tiny_cache_hw()).preemptions >= 2
    # slots capped at what the cache holds at the mean length (64 / 36 tokens: one request), as
    # the closed forms count them: the requests run one at a time and nothing is preempted
    assert run(tiny_cache_hw(), max_running=1).preemptions == 0


def test_prefix_caching_keeps_a_preempted_requests_full_blocks() -> None:
    cached, recomputed = run(tiny_cache_hw(True)), run(tiny_cache_hw(False))
    assert cached.preemptions >= 1 and recomputed.preemptions >= 1
    # with prefix caching a resumed request recomputes only its last partial block, without it
    # every token it held: the same run takes no longer with it
    assert cached.duration_s <= recomputed.duration_s
