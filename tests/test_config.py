"""The config objects: the estimator and the planner on Deployment / Workload / SLO /
OperatingPoint give what their flat-keyword forms give, the objects check their values, sweep
with dataclasses.replace, and DoesNotFit carries its numbers."""

from __future__ import annotations

import dataclasses

import pytest

import gpucap
from gpucap import SLO, Deployment, DoesNotFit, OperatingPoint, Workload, estimate, estimate_for
from gpucap.planning.result import Target
from gpucap.planning.search import Search, plan, plan_for
from gpucap.units import GiB

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
H100 = "H100-SXM-80GB"


def test_estimate_for_is_estimate_on_objects() -> None:
    flat = estimate(LLAMA_8B, H100, 2, tp=1, input_len=2000, output_len=300, ttft_slo_s=1.0, tpot_slo_s=0.05)
    objects = estimate_for(
        Deployment(LLAMA_8B, H100, 2, tp=1), Workload(2000, 300), SLO(ttft_s=1.0, tpot_s=0.05), OperatingPoint()
    )
    assert objects.recommended_concurrency == flat.recommended_concurrency
    assert objects.bottleneck == flat.bottleneck and objects.limits == flat.limits
    assert objects.ttft_s == flat.ttft_s and objects.replicas == flat.replicas == 2


def test_a_deployment_sweeps_with_replace_and_is_a_cache_key() -> None:
    base = Deployment(LLAMA_8B, H100, 8)
    swept = {tp: dataclasses.replace(base, tp=tp) for tp in (1, 2, 4, 8)}
    assert [d.resolve().layout.tp for d in swept.values()] == [1, 2, 4, 8]
    assert [d.replicas(d.resolve().layout) for d in swept.values()] == [8, 4, 2, 1]
    assert len({*swept.values(), dataclasses.replace(base, tp=1)}) == 4  # frozen and hashable
    with pytest.raises(ValueError, match="use 8 GPUs"):
        Deployment(LLAMA_8B, H100, 10, tp=4).replicas(Deployment(LLAMA_8B, H100, 10, tp=4).resolve().layout)


@pytest.mark.parametrize(
    ("make", "word"),
    [
        (lambda: SLO(ttft_s=-1.0), "ttft_slo_s"),
        (lambda: SLO(tpot_s=0.0), "tpot_slo_s"),
        (lambda: SLO(statistic="p75"), "stat"),
        (lambda: OperatingPoint(concurrency=4, request_rate=1.0), "not both"),
        (lambda: OperatingPoint(request_rate=0.0), "request_rate"),
        (lambda: Workload(0, 10), "input_len"),
    ],
)
def test_objects_check_their_values(make, word: str) -> None:
    with pytest.raises(ValueError, match=word):
        make()


def test_the_estimator_refuses_a_tail_statistic() -> None:
    with pytest.raises(ValueError, match="planner"):
        estimate_for(Deployment(LLAMA_8B, H100), Workload(1000, 100), SLO(statistic="p99"))


def test_plan_for_is_plan_on_objects() -> None:
    kw = dict(input_len=2000, output_len=300, gpus=[H100], gpu_counts=[1], weight_dtypes=["fp8"], kv_dtypes=["auto"])
    flat = plan(LLAMA_8B, target_request_rate=5.0, ttft_slo_s=1.0, tpot_slo_s=0.05, stat="p95", **kw)
    objects = plan_for(
        LLAMA_8B,
        Target("request_rate", 5.0),
        SLO(1.0, 0.05, "p95"),
        input_len=2000,
        output_len=300,
        search=Search(gpus=(H100,), gpu_counts=(1,), weight_dtypes=("fp8",), kv_dtypes=("auto",)),
    )
    cols = ["gpu", "tp", "replicas", "capacity_requests_per_s", "ttft_s", "tpot_s", "cost_per_hour"]
    assert objects.plans[cols].equals(flat.plans[cols]) and objects.slo == flat.slo


def test_does_not_fit_carries_how_much_and_what_would_fit() -> None:
    # Llama-3.1-405B: 405.8e9 parameters x 2 bytes = 756 GiB of bf16 weights against one H100's
    # 79.2 GiB x 0.92 usable: short by roughly 756 - 73 = 683 GiB, plus the reservations
    with pytest.raises(DoesNotFit) as caught:
        estimate("meta-llama/Llama-3.1-405B", H100, input_len=100, output_len=10)
    err = caught.value
    assert 680 * GiB < err.short_bytes < 700 * GiB
    assert "a GPU with more memory" in err.options and any(o.startswith("tp x pp = ") for o in err.options)
    assert "--" not in str(err)  # physics names options, the CLI names flags


def test_the_public_surface() -> None:
    for name in gpucap.__all__:
        assert getattr(gpucap, name) is not None, name
    # dir() lists the names imported on first use too (plan, calibrate, validate, ...)
    assert set(gpucap.__all__) <= set(dir(gpucap)) and "plan" in dir(gpucap)
