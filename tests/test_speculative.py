"""Speculative decoding: accepted tokens per step, the verify step's work, the drafter's work and
memory, TPOT = t_step / tau, and an estimate end to end, against numbers derived by hand."""

import dataclasses

import numpy as np
import pytest

from gpucap.config import Speculative, hardware
from gpucap.estimate import estimate
from gpucap.physics.batching import closed_loop
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.extras import Extras
from gpucap.physics.memory import hardware_memory
from gpucap.physics.requests import Requests
from gpucap.physics.runs import static_batch
from gpucap.physics.speculative import acceptance_length
from gpucap.physics.step import step_work
from gpucap.physics.steptime import step_time

IDEAL = Coefficients(
    u_compute=1.0, u_hbm=1.0, u_link=1.0, overlap=0.0, t_overhead_s=0.0, t_seq_s=0.0, t_request_s=0.0, t_layer_s=0.0
)
LLAMA8B = "meta-llama/Llama-3.1-8B"

# Llama-3-8B by hand: per layer q,o 2 x 4096^2 + k,v 2 x 4096 x 1024 + MLP 3 x 4096 x 14336
LAYER = 2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336  # 218,103,808
NORMS_ONE_LAYER = 2 * 4096 + 4096  # two RMSNorms of the layer and the final one
LM_HEAD = 128256 * 4096  # 525,336,576
BODY = 32 * LAYER + 65 * 4096  # 32 layers and their norms
KV_TOKEN = 32 * 2 * 8 * 128 * 2  # 131,072 B per token, all layers (bf16)
KV_TOKEN_LAYER = 2 * 8 * 128 * 2  # 4,096 B per token in one layer
EAGLE = Speculative(draft_tokens=3, acceptance_length=2.5)


def test_leviathan_expected_tokens() -> None:
    # tau = (1 - alpha^(k+1)) / (1 - alpha): alpha 0.8, k 4: (1 - 0.32768) / 0.2 = 3.3616
    assert acceptance_length(acceptance_rate=0.8, draft_tokens=4) == pytest.approx(3.3616, rel=1e-12)
    assert acceptance_length(acceptance_rate=0.0, draft_tokens=4) == 1.0  # only the bonus token
    assert acceptance_length(acceptance_rate=1.0, draft_tokens=4) == 5.0  # all drafts + bonus


def test_bad_inputs_are_named() -> None:
    with pytest.raises(ValueError, match=r"acceptance_length must lie in \[1, draft_tokens \+ 1\] = \[1, 4\].*got 4.5"):
        Speculative(draft_tokens=3, acceptance_length=4.5)
    with pytest.raises(ValueError, match="acceptance_length must lie in"):
        Speculative(draft_tokens=3, acceptance_length=0.9)
    with pytest.raises(ValueError, match="draft_tokens must be an integer >= 1, got 0"):
        Speculative(draft_tokens=0, acceptance_length=1.0)
    with pytest.raises(ValueError, match="acceptance_rate must lie in"):
        acceptance_length(acceptance_rate=1.2, draft_tokens=3)
    hw = hardware(LLAMA8B, "H100-SXM-80GB", pp=2)
    with pytest.raises(ValueError, match="pp=1 only, got pp=2"):
        step_work(hw, decode_tokens=8, decode_context=100, extras=Extras(speculative=EAGLE))


def test_verify_step_work() -> None:
    # B = 8 sequences, context 4000, k = 3: 4 tokens per sequence go through the model, each
    # sequence's KV is read once. linear FLOP and attention FLOP x 4; KV written for 32 tokens
    # instead of 8: + 24 x 131,072 B.
    hw = hardware(LLAMA8B, "H100-SXM-80GB")
    plain = step_work(hw, decode_tokens=8, decode_context=4000)
    spec = step_work(hw, decode_tokens=8, decode_context=4000, extras=Extras(speculative=EAGLE))
    assert float(spec.linear_flop) == pytest.approx(4 * float(plain.linear_flop), rel=1e-12)
    assert float(spec.linear_flop) == pytest.approx(2 * (BODY + LM_HEAD) * 32, rel=1e-12)
    assert float(spec.attention_flop) == pytest.approx(4 * float(plain.attention_flop), rel=1e-12)
    assert float(spec.kv_bytes - plain.kv_bytes) == pytest.approx(24 * KV_TOKEN, rel=1e-12)
    assert float(spec.sequences) == float(plain.sequences) == 8.0  # host time per sequence, not per token


def test_eagle_head_draft_work() -> None:
    # EAGLE head on Llama-3.1-8B: one target-shaped layer + the lm_head, 3 passes over 8 sequences
    # at context 4000. Per pass: weights (218,103,808 + 12,288 norms) x 2 + lm_head 525,336,576 x 2
    # bytes; KV read 8 x 4000 x 4096 B, written 8 x 4096 B; activations 8 x 10 x 4096 x 2 B.
    # FLOP per pass: 2 x (218,103,808 + 12,288 + 525,336,576) x 8; attention 8 x 4000 x 4 x 32 x 128.
    hw = hardware(LLAMA8B, "H100-SXM-80GB")
    w = step_work(hw, decode_tokens=8, decode_context=4000, extras=Extras(speculative=EAGLE))
    per_pass_bytes = (LAYER + NORMS_ONE_LAYER) * 2 + LM_HEAD * 2 + 8 * 4000 * KV_TOKEN_LAYER + 8 * KV_TOKEN_LAYER
    per_pass_bytes += 8 * 10 * 4096 * 2
    assert float(w.draft_bytes) == pytest.approx(3 * per_pass_bytes, rel=1e-12)
    assert float(w.draft_linear_flop) == pytest.approx(3 * 2 * (LAYER + NORMS_ONE_LAYER + LM_HEAD) * 8, rel=1e-12)
    assert float(w.draft_attention_flop) == pytest.approx(3 * 8 * 4000 * 4 * 32 * 128, rel=1e-12)


def test_memory_bound_decode_tpot_falls_by_tau() -> None:
    # Batch 1 on H100 is memory-bound: the verify step of 4 tokens reads the same weights and KV
    # as a plain step (4 tokens' KV writes and activations are < 0.01% of 16 GB), so with a
    # drafter that cost nothing TPOT would fall by tau = 2.5 exactly. Checked on the verify part:
    hw = hardware(LLAMA8B, "H100-SXM-80GB")
    plain = step_time(hw, step_work(hw, decode_tokens=1, decode_context=1000), IDEAL).total_s
    work = step_work(hw, decode_tokens=1, decode_context=1000, extras=Extras(speculative=EAGLE))
    no_draft = {f: np.zeros(()) for f in ("draft_linear_flop", "draft_attention_flop", "draft_bytes")}
    verify = step_time(hw, dataclasses.replace(work, **no_draft), IDEAL).total_s
    assert float(plain / (verify / 2.5)) == pytest.approx(2.5, rel=1e-3)
    # With the EAGLE head's cost: 3 passes of (436,232,192 + 1,050,673,152) B at 3.35 TB/s =
    # 1.332 ms (its KV, activations and compute add < 0.5%) on a plain step of 15.01 GB weights
    # ((BODY + LM_HEAD) x 2) + 1000.5 x 131,072 B of KV = 15.14 GB / 3.35 TB/s = 4.52 ms:
    # TPOT = (4.52 + 1.332) / 2.5 = 2.341 ms, 1.93x lower.
    spec = static_batch(hw, IDEAL, Requests(999.0, 3.0, extras=Extras(speculative=EAGLE)), batch=1.0)
    base = static_batch(hw, IDEAL, Requests(999.0, 3.0), batch=1.0)
    assert float(base.tpot_s) == pytest.approx(((BODY + LM_HEAD) * 2 + 1000.5 * KV_TOKEN) / 3.35e12, rel=1e-3)
    assert float(base.tpot_s / spec.tpot_s) == pytest.approx(1.93, rel=0.005)
    assert float(spec.tpot_s) == pytest.approx(float(spec.decode_step.total_s) / 2.5, rel=1e-12)


def test_closed_loop_decodes_in_o_minus_1_over_tau_steps() -> None:
    # Little's law with D = (O - 1) / tau decode steps per request:
    # B = X D t_step, R = X (TTFT + (O - 1) TPOT), TPOT = t_step / tau.
    hw = hardware(LLAMA8B, "H100-SXM-80GB")
    coef = Coefficients(t_request_s=0.0)
    c = np.array([1.0, 8.0, 64.0])
    p = closed_loop(hw, coef, Requests(1000.0, 301.0, extras=Extras(speculative=EAGLE)), concurrency=c)
    t_step = p.decode_step.total_s
    np.testing.assert_allclose(p.tpot_s, t_step / 2.5, rtol=1e-12)
    np.testing.assert_allclose(p.decode_batch, p.requests_per_s * (300 / 2.5) * t_step, rtol=1e-9)
    np.testing.assert_allclose(p.requests_per_s * (p.ttft_s + 300 * p.tpot_s), c, rtol=1e-9)


def test_draft_model_memory_and_speed() -> None:
    # A separate draft model: its whole weights (Llama-3.2-3B, bf16, tp = 1) and its KV per token
    # (28 layers x 2 x 8 x 128 x 2 = 114,688 B) join the target's.
    sp = Speculative(draft_tokens=3, acceptance_length=2.5, draft_model="meta-llama/Llama-3.2-3B-Instruct")
    hw = hardware(LLAMA8B, "H100-SXM-80GB")
    small = hardware("meta-llama/Llama-3.2-3B-Instruct", "H100-SXM-80GB")
    mem = hardware_memory(hw, Extras(speculative=sp))
    assert mem.weights.draft == hardware_memory(small).weights.total
    assert mem.kv_bytes_per_token_per_gpu == KV_TOKEN + 28 * 2 * 8 * 128 * 2
    # the EAGLE head adds one layer: (218,103,808 + 12,288) x 2 = 436,232,192 B and 4096 B per token
    head = hardware_memory(hw, extras=Extras(speculative=EAGLE))
    assert head.weights.draft == 436_232_192
    assert head.kv_bytes_per_token_per_gpu == KV_TOKEN + KV_TOKEN_LAYER


def test_estimate_with_speculation_end_to_end() -> None:
    kw = dict(input_len=16, output_len=500, concurrency=8)  # a short prompt: the steps are decodes
    plain = estimate(LLAMA8B, "H100-SXM-80GB", **kw)
    spec = estimate(LLAMA8B, "H100-SXM-80GB", speculative=EAGLE, **kw)
    # memory: the head's weights come out of the KV budget, and each token costs 4096 B more
    assert plain.memory.kv_budget - spec.memory.kv_budget == 436_232_192
    # decode at batch 8 is memory-bound, so a step grows by the head's reads, 3 x 1.487 GB at
    # 3.35 TB/s x u_hbm 0.8 = 1.66 ms, and yields 2.5 tokens: TPOT falls by
    # 2.5 x t_plain / (t_plain + 1.66 ms) (2.08 at the plain step's 8.19 ms)
    expected = 2.5 * plain.tpot_s / (plain.tpot_s + 3 * (436_232_192 + 2 * LM_HEAD) / (3.35e12 * 0.8))
    assert plain.tpot_s / spec.tpot_s == pytest.approx(expected, rel=0.03)
    assert spec.output_tokens_per_s > 1.8 * plain.output_tokens_per_s
    assert spec.speculative == EAGLE
