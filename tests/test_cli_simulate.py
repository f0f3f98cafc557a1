"""`gpucap simulate`: one load-test run of one replica, reported as vllm bench serve reports it;
bad input is one line on stderr and exit 2."""

from __future__ import annotations

import json

import pytest

from gpucap.cli.main import main

BASE = ["simulate", "--model", "meta-llama/Llama-3.2-3B-Instruct", "--gpu", "H100-SXM-80GB", "--input-len", "16"]
TOY = [*BASE, "--output-len", "4", "--engine", "vllm"]


def test_closed_loop_json(capsys: pytest.CaptureFixture[str]) -> None:
    """A small closed loop: every statistic of the four metrics, throughput = tokens / duration."""
    code = main([*TOY, "--mode", "closed-loop", "--concurrency", "4", "--num-prompts", "8", "--json"])
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    assert set(d["ttft_ms"]) == {"mean", "median", "p90", "p95", "p99"}
    assert d["output_tokens_per_s"] == pytest.approx(8 * 4 / d["duration_s"])
    assert d["tpot_ms"]["mean"] > 0 and d["itl_ms"]["median"] > 0


def test_text_shows_the_chosen_statistic_first(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*TOY, "--mode", "all-at-once", "--num-prompts", "8", "--stat", "p99"]) == 0
    out = capsys.readouterr().out
    assert "8 prompts at once" in out and "TTFT p99" in out


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--mode", "burst", "--num-prompts", "8"], "unknown --mode 'burst'"),
        (
            ["--mode", "closed-loop", "--num-prompts", "8", "--concurrency", "16"],
            "concurrency 16 is above num_prompts 8",
        ),
        (["--mode", "open-loop", "--num-prompts", "8", "--request-rate", "0"], "--request-rate above 0"),
        (["--mode", "all-at-once", "--num-prompts", "8", "--lengths", "range", "--range-ratio", "1"], r"in \[0, 1\)"),
        (["--mode", "all-at-once", "--num-prompts", "8", "--stat", "p50"], "unknown --stat 'p50'"),
        (["--mode", "all-at-once", "--num-prompts", "8", "--lengths", "zipf"], "unknown --lengths 'zipf'"),
        (["--mode", "closed-loop", "--num-prompts", "8"], "needs --concurrency"),
    ],
)
def test_bad_input_is_one_line(capsys: pytest.CaptureFixture[str], extra: list[str], words: str) -> None:
    import re

    assert main([*TOY, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(words, err), err
