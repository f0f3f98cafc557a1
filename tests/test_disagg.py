"""Disaggregated prefill/decode pools (gpucap.planning.disagg) against aggregated serving."""

from __future__ import annotations

import pytest

from gpucap.config import hardware
from gpucap.planning.disagg import check_by_simulation, compare_disaggregated, read_links, transfer_s

LLAMA_70B = "meta-llama/Llama-3.3-70B-Instruct"
CASE = dict(rate=2.0, input_len=8000.0, output_len=200.0)


def test_kv_transfer_by_hand():
    links = read_links()
    hw = hardware(LLAMA_70B, "H100-SXM-80GB", tp=2, weight_dtype="fp8")
    # each decode GPU receives its shard: 8000 tokens x 80 layers x 2 x (8 KV heads / 2) x 128 x 2 bytes
    # = 1.31 GB over a 400 Gb/s NIC (50 GB/s per direction)
    assert transfer_s(hw, 8000, links["nic-400g"]) == pytest.approx(8000 * 163_840 / 50e9)
    # inside the node, over the H100's NVLink (450 GB/s per direction)
    assert transfer_s(hw, 8000, links["nvlink"]) == pytest.approx(8000 * 163_840 / 450e9)


def test_a_transfer_above_the_ttft_slo_is_not_offered():
    table, notes = compare_disaggregated(
        LLAMA_70B,
        "H100-SXM-80GB",
        ttft_slo_s=0.02,
        tpot_slo_s=0.05,
        tp=(2,),
        weight_dtype="fp8",
        link="nic-200g",
        **CASE,
    )
    assert "disaggregated" not in set(table.get("serving", []))
    assert any("above the TTFT SLO of 0.02 s: no split with it is offered" in n for n in notes)
    with pytest.raises(ValueError, match="unknown link 'ib'"):
        compare_disaggregated(LLAMA_70B, "H100-SXM-80GB", ttft_slo_s=2, tpot_slo_s=0.03, link="ib", **CASE)


def test_long_prompts_and_tight_tpot_favour_the_split_and_the_simulation_agrees():
    table, _ = compare_disaggregated(
        LLAMA_70B, "H100-SXM-80GB", ttft_slo_s=2.0, tpot_slo_s=0.03, weight_dtype="fp8", **CASE
    )
    rows = table.set_index("serving")
    assert rows.loc["disaggregated", "gpus"] < rows.loc["aggregated", "gpus"]
    for kind in ("aggregated", "disaggregated"):
        row = rows.loc[kind]
        assert row["ttft_s"] <= 2.0 and row["tpot_s"] <= 0.03
        sim = check_by_simulation(row, **CASE)
        assert sim["ttft_s"] == pytest.approx(row["ttft_s"], rel=0.3)
        # the split's decode pool is sized at the batch that just meets the SLO: its TPOT is a bound
        assert sim["tpot_s"] <= 0.03 * 1.1
