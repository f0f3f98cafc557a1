"""Invariants that must hold for any input (hypothesis)."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucap.catalog.gpus import get_gpu
from gpucap.config import hardware
from gpucap.errors import DoesNotFit
from gpucap.estimate import estimate
from gpucap.physics.batching import closed_loop
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.memory import memory_limit
from gpucap.physics.requests import Requests
from gpucap.units import GiB

MODELS = st.sampled_from(
    ["Qwen/Qwen3-8B", "meta-llama/Llama-3.1-8B", "mistralai/Mistral-7B-v0.3", "openai/gpt-oss-20b"]
)
CONTEXT = st.integers(min_value=16, max_value=100_000)


def _limit(hw, ctx: int) -> float:
    """Requests memory holds; 0 when the weights do not fit at all."""
    try:
        return memory_limit(hw, ctx)[1]
    except DoesNotFit:
        return 0.0


@settings(max_examples=30, deadline=None)
@given(
    model=MODELS,
    memory_gib=st.floats(min_value=40, max_value=300),
    extra_gib=st.floats(min_value=0, max_value=100),
    ctx=CONTEXT,
)
def test_more_memory_never_lowers_the_memory_limit(model: str, memory_gib: float, extra_gib: float, ctx: int) -> None:
    base = get_gpu("H100-SXM-80GB")
    small = dataclasses.replace(base, memory_bytes=memory_gib * GiB)
    big = dataclasses.replace(base, memory_bytes=(memory_gib + extra_gib) * GiB)
    lim_small = _limit(hardware(model, small), ctx)
    lim_big = _limit(hardware(model, big), ctx)
    assert lim_big >= lim_small


@settings(max_examples=30, deadline=None)
@given(model=MODELS, ctx=CONTEXT, more=st.integers(min_value=0, max_value=50_000))
def test_longer_context_never_raises_the_memory_limit(model: str, ctx: int, more: int) -> None:
    hw = hardware(model, "H100-SXM-80GB")
    short = _limit(hw, ctx)
    long = _limit(hw, ctx + more)
    assert long <= short


@settings(max_examples=20, deadline=None)
@given(model=MODELS, gpu=st.sampled_from(["H100-SXM-80GB", "A100-SXM-80GB", "L40S-48GB"]))
def test_fp8_kv_doubles_the_tokens_that_fit(model: str, gpu: str) -> None:
    bf16, _ = memory_limit(hardware(model, gpu, weight_dtype="fp8", kv_dtype="bf16"), 1000)
    fp8, _ = memory_limit(hardware(model, gpu, weight_dtype="fp8", kv_dtype="fp8"), 1000)
    assert fp8.kv_budget == bf16.kv_budget
    assert np.isclose(fp8.kv_tokens_per_gpu, 2 * bf16.kv_tokens_per_gpu)


@settings(max_examples=12, deadline=None)
@given(
    model=MODELS,
    isl=st.integers(min_value=16, max_value=20_000),
    osl=st.integers(min_value=2, max_value=4_000),
    ttft=st.floats(min_value=0.2, max_value=20),
    tpot=st.floats(min_value=0.01, max_value=0.5),
)
def test_recommendation_never_exceeds_the_memory_limit(
    model: str, isl: int, osl: int, ttft: float, tpot: float
) -> None:
    e = estimate(model, "H100-SXM-80GB", input_len=isl, output_len=osl, ttft_slo_s=ttft, tpot_slo_s=tpot)
    assert e.memory.fits
    assert e.recommended_concurrency <= e.limits["memory"]


@settings(max_examples=20, deadline=None)
@given(
    model=MODELS,
    isl=st.integers(min_value=16, max_value=30_000),
    osl=st.integers(min_value=2, max_value=4_000),
    engine=st.sampled_from(["vllm", "sglang", "trtllm"]),
)
def test_tpot_never_falls_as_concurrency_rises(model: str, isl: int, osl: int, engine: str) -> None:
    hw = hardware(model, "H100-SXM-80GB", engine=engine)
    c = np.geomspace(1, 2048, 40)
    p = closed_loop(hw, Coefficients.for_engine(engine), Requests(isl, osl, max_running=1024.0), concurrency=c)
    # equal within the fixed point's own tolerance (1e-7 relative)
    assert np.all(np.diff(p.tpot_s) >= -1e-6 * p.tpot_s[1:])


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    model=st.sampled_from(
        [
            "meta-llama/Llama-3.1-8B",
            "meta-llama/Llama-3.2-3B-Instruct",
            "Qwen/Qwen3-32B",
            "Qwen/Qwen3-30B-A3B",
            "openai/gpt-oss-20b",
        ]
    ),
    gpu=st.sampled_from(
        ["A100-SXM-80GB", "H100-SXM-80GB", "H200-SXM-141GB", "B200-180GB", "L40S-48GB", "MI300X-192GB"]
    ),
    engine=st.sampled_from(["vllm", "sglang", "trtllm"]),
    tp=st.sampled_from([1, 2, 4]),
    pp=st.sampled_from([1, 2]),
    input_len=st.integers(min_value=50, max_value=12000),
    longer=st.floats(min_value=1.0005, max_value=3.0),
    output_len=st.integers(min_value=2, max_value=1000),
    lengths=st.sampled_from(["varied", "fixed"]),
)
def test_a_longer_prompt_never_raises_the_recommendation(
    model: str, gpu: str, engine: str, tp: int, pp: int, input_len: int, longer: float, output_len: int, lengths: str
) -> None:
    from gpucap.types import BOTTLENECKS

    kw = dict(tp=tp, pp=pp, output_len=output_len, lengths=lengths, engine=engine)
    try:
        short = estimate(model, gpu, tp * pp, input_len=input_len, **kw)
        long = estimate(model, gpu, tp * pp, input_len=int(input_len * longer), **kw)
    except (DoesNotFit, ValueError):
        return  # does not fit, or a split the model does not allow
    assert short.bottleneck in BOTTLENECKS and long.bottleneck in BOTTLENECKS
    for e in (short, long):  # a limit that binds is one the limits report
        assert e.bottleneck in e.limits or e.bottleneck in ("ttft_slo", "tpot_slo")
    if short.bottleneck != "host" and lengths == "varied":
        assert long.recommended_concurrency <= short.recommended_concurrency
    # Where the HTTP server's core binds (tiny prompts and outputs), a closed loop's requests/s
    # is the core's and E2E = C / X is fixed: a longer prompt lengthens the steps, the decode
    # takes more of E2E and the wait at the core, in TTFT, less. That is Little's law, not a
    # modelling slip; the open-loop planner sees the core as a rate limit instead.
    # Fixed lengths are left out: after the first wave the requests whose prompts shared a step
    # come back together and pass the HTTP server one after another, and a shorter prompt puts
    # more of them in a step, a longer burst that more groups queue behind
    # (gpucap.physics.waves). The step-level simulation has it too: Qwen3-32B on 2 MI300X, 633
    # output tokens, 48 in flight, mean TTFT 3.13 s with 2,329-token prompts and 1.97 s with
    # 6,843 (benchmarks/README.md, "Waves after the first").


# Draws that once broke the property above, each for its own reason: the search grid's points
# (up to ~2% apart, placed from memory's limit, which a longer prompt lowers), the share of steps
# a prompt's chunks take as the decodes see them (it jumped when a prompt one token past the
# budget's room took a full chunk and a remainder), and a fixed-length wave's chunks of a long
# prompt (charged the pairs of its first chunk only).
FOUND = [
    ("meta-llama/Llama-3.2-3B-Instruct", "H100-SXM-80GB", "trtllm", 1, 1, 8158, 8168, 37, "varied"),
    ("meta-llama/Llama-3.2-3B-Instruct", "H100-SXM-80GB", "sglang", 2, 1, 50, 51, 2, "fixed"),
    ("meta-llama/Llama-3.2-3B-Instruct", "B200-180GB", "trtllm", 1, 2, 145, 258, 709, "varied"),
    ("openai/gpt-oss-20b", "B200-180GB", "trtllm", 2, 2, 314, 337, 100, "fixed"),
    ("Qwen/Qwen3-30B-A3B", "L40S-48GB", "sglang", 1, 2, 7892, 23676, 2, "fixed"),
]


@pytest.mark.parametrize(("model", "gpu", "engine", "tp", "pp", "short", "long", "output_len", "lengths"), FOUND)
def test_draws_that_raised_the_recommendation(
    model: str, gpu: str, engine: str, tp: int, pp: int, short: int, long: int, output_len: int, lengths: str
) -> None:
    kw = dict(tp=tp, pp=pp, output_len=output_len, lengths=lengths, engine=engine)
    a = estimate(model, gpu, tp * pp, input_len=short, **kw)
    b = estimate(model, gpu, tp * pp, input_len=long, **kw)
    assert b.recommended_concurrency <= a.recommended_concurrency


@pytest.mark.parametrize(("model", "gpu", "engine", "tp", "pp", "short", "long", "output_len", "lengths"), FOUND[:4])
def test_the_recommendation_is_the_largest_whole_concurrency_meeting_the_slos(
    model: str, gpu: str, engine: str, tp: int, pp: int, short: int, long: int, output_len: int, lengths: str
) -> None:
    """Between two points of the search grid the answer is taken to the request: the loop at the
    recommendation meets both SLOs, one more request in flight misses one (or memory binds)."""
    from gpucap.config import SLO, Workload
    from gpucap.physics.concurrency import loop_point

    for input_len in (short, long):
        e = estimate(model, gpu, tp * pp, tp=tp, pp=pp, input_len=input_len, output_len=output_len, lengths=lengths,
                     engine=engine)  # fmt: skip
        rec = float(e.recommended_concurrency)
        if e.bottleneck == "memory":
            continue
        hw = hardware(model, gpu, tp=tp, pp=pp, engine=engine)
        wl = Workload(input_len=input_len, output_len=output_len, lengths=lengths)
        slots = float(hw.engine.max_num_seqs or np.inf)
        p = loop_point(hw, Coefficients.for_engine(engine), wl, np.array([rec, rec + 1.0]), max_running=slots)
        ok = (p.ttft_s <= SLO().ttft_s) & (p.tpot_s <= SLO().tpot_s)
        assert ok.tolist() == [True, False], (input_len, rec)


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_no_rise_where_a_prompt_starts_to_take_two_chunks(engine: str) -> None:
    """Llama-3.2-3B on an H100, 37-token outputs: across the budget's room (8,192 less the
    decodes) the recommendation does not rise (it went 31 -> 32 at 8,160 -> 8,168 tokens)."""
    recs = [
        estimate(
            "meta-llama/Llama-3.2-3B-Instruct", "H100-SXM-80GB", 1, input_len=i, output_len=37, engine=engine
        ).recommended_concurrency
        for i in range(8120, 8240, 8)
    ]
    assert np.all(np.diff(recs) <= 0), recs


@pytest.mark.parametrize("engine", ["vllm", "trtllm"])
def test_ttft_does_not_drop_where_a_prompt_starts_to_take_two_chunks(engine: str) -> None:
    """Llama-3.2-3B on an H100, 37-token outputs, prompts from 7,800 to 8,600 tokens: past the
    budget's room (8,192 less the decodes) a prompt takes a full chunk and a remainder, so the
    wait for the step in progress is still a full chunk's. With even half chunks it had dropped
    by 15-23 ms at 4-16 requests in flight (8,176-8,188 tokens)."""
    hw = hardware("meta-llama/Llama-3.2-3B-Instruct", "H100-SXM-80GB", engine=engine)
    coef = Coefficients.for_engine(engine)
    prompts = np.arange(7800.0, 8600.0, 4.0)
    for c in (1.0, 4.0, 8.0, 16.0):
        p = closed_loop(hw, coef, Requests(prompts, 37.0, max_running=2048.0), concurrency=c)
        assert np.all(np.diff(p.ttft_s) >= -1e-9 * p.ttft_s[1:]), c
