"""The metric families gpucap reads from vLLM's and SGLang's ``/metrics``, under one name each.

Each entry maps a short name (``ttft``, ``itl``, ...) to the family names an engine has exposed
for it over its versions, newest first; the first one present in a scrape is read. A histogram
gives ``<name>_sum``, ``<name>_count`` and its buckets; a counter its ``_total``; a gauge its value.
Sources: vLLM 0.32's ``vllm/v1/metrics/loggers.py`` (the families a live server exposes are in
``../shared/formats/vllm-metrics-0.32-cpu``), vLLM's ``docs/design/metrics.md`` for the renames
(0.10/0.11: ``time_per_output_token_seconds`` became ``inter_token_latency_seconds``, with the
per-request ``request_time_per_output_token_seconds`` beside it; ``gpu_cache_usage_perc``
became ``kv_cache_usage_perc`` and ``gpu_prefix_cache_*`` became ``prefix_cache_*``), and
SGLang's ``python/sglang/srt/metrics/collector.py`` (families with ``--enable-metrics``).
"""

from __future__ import annotations

from dataclasses import dataclass

ENGINES = ("vllm", "sglang")


@dataclass(frozen=True)
class Family:
    """One quantity: its kind ("histogram", "counter", "gauge") and unit, the family names that
    carry it per engine (newest first), and what it measures."""

    kind: str
    unit: str
    names: dict[str, tuple[str, ...]]
    meaning: str


FAMILIES: dict[str, Family] = {
    # per-request histograms (observed when a request finishes, except ttft and itl)
    "ttft": Family(
        "histogram",
        "s",
        {"vllm": ("vllm:time_to_first_token_seconds",), "sglang": ("sglang:time_to_first_token_seconds",)},
        "arrival at the engine's front end to its first token leaving the engine (not the HTTP round trip)",
    ),
    "itl": Family(
        "histogram",
        "s",
        {
            "vllm": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
            "sglang": ("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
        },
        "time between consecutive output tokens of a request (one observation per token)",
    ),
    "tpot": Family(
        "histogram",
        "s",
        {
            "vllm": ("vllm:request_time_per_output_token_seconds",),
            "sglang": ("sglang:request_time_per_output_token_seconds",),
        },
        "a request's decode time / (its output tokens - 1) (one observation per request)",
    ),
    "e2e": Family(
        "histogram",
        "s",
        {"vllm": ("vllm:e2e_request_latency_seconds",), "sglang": ("sglang:e2e_request_latency_seconds",)},
        "arrival to the last token",
    ),
    "queue": Family(
        "histogram",
        "s",
        {"vllm": ("vllm:request_queue_time_seconds",), "sglang": ("sglang:queue_time_seconds", "sglang:queue_time_s")},
        "waiting for the scheduler to admit the request",
    ),
    "prefill": Family(
        "histogram", "s", {"vllm": ("vllm:request_prefill_time_seconds",)}, "admission to the first token"
    ),
    "decode": Family(
        "histogram", "s", {"vllm": ("vllm:request_decode_time_seconds",)}, "first token to the last token"
    ),
    "inference": Family(
        "histogram",
        "s",
        {"vllm": ("vllm:request_inference_time_seconds",)},
        "admission to the last token: the time a request runs in the engine",
    ),
    "prompt_len": Family(
        "histogram",
        "tokens",
        {"vllm": ("vllm:request_prompt_tokens",)},
        "prompt tokens of each finished request",
    ),
    "output_len": Family(
        "histogram",
        "tokens",
        {"vllm": ("vllm:request_generation_tokens",)},
        "output tokens of each finished request",
    ),
    "step_tokens": Family(
        "histogram",
        "tokens",
        {"vllm": ("vllm:iteration_tokens_total",)},
        "tokens of each engine step (prompt and decode); its count is the number of steps",
    ),
    # counters
    "prompt_tokens": Family(
        "counter",
        "tokens",
        {"vllm": ("vllm:prompt_tokens",), "sglang": ("sglang:prompt_tokens",)},
        "prompt tokens of the requests scheduled",
    ),
    "cached_prompt_tokens": Family(
        "counter",
        "tokens",
        {
            "vllm": ("vllm:prompt_tokens_cached", "vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"),
            "sglang": ("sglang:cached_tokens",),
        },  # fmt: skip
        "prompt tokens found in the prefix cache (not computed)",
    ),
    "generation_tokens": Family(
        "counter",
        "tokens",
        {"vllm": ("vllm:generation_tokens",), "sglang": ("sglang:generation_tokens",)},
        "output tokens generated",
    ),
    "finished": Family(
        "counter",
        "requests",
        {"vllm": ("vllm:request_success",), "sglang": ("sglang:num_requests",)},
        "requests finished (every finished_reason)",
    ),
    "preemptions": Family(
        "counter",
        "requests",
        {"vllm": ("vllm:num_preemptions",)},
        "requests preempted (their KV freed, recomputed later)",
    ),
    # gauges
    "running": Family(
        "gauge",
        "requests",
        {"vllm": ("vllm:num_requests_running",), "sglang": ("sglang:num_running_reqs",)},
        "requests in the running batch at the scrape",
    ),
    "waiting": Family(
        "gauge",
        "requests",
        {"vllm": ("vllm:num_requests_waiting",), "sglang": ("sglang:num_queue_reqs",)},
        "requests waiting for admission at the scrape",
    ),
    "kv_usage": Family(
        "gauge",
        "share",
        {"vllm": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), "sglang": ("sglang:token_usage",)},
        "share of the KV cache in use (0-1)",
    ),
}

CACHE_INFO = {"vllm": "vllm:cache_config_info"}  # a gauge of 1 whose labels are the cache settings

# The HTTP server's own timing of each request (prometheus-fastapi-instrumentator, which vLLM's
# OpenAI server mounts): from the request's arrival at the server to the end of its response, per
# handler. Against the engine's E2E (which starts when the request reaches the engine) it gives the
# time the front end holds a request outside the engine (parsing, tokenizing, the response's end).
HTTP_DURATION = "http_request_duration_seconds"
GENERATE_HANDLERS = ("/v1/completions", "/v1/chat/completions", "/v1/responses", "/generate")


def engine_of(sample_names: set[str]) -> str | None:
    """The engine whose families a scrape holds ("vllm", "sglang"), or None."""
    for engine in ENGINES:
        if any(n.startswith(engine + ":") for n in sample_names):
            return engine
    return None
