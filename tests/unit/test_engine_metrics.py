"""The engine's own /metrics window (module_utils/engine_metrics.py) on real exposition text, the
throughput cell's shape (serving_rollout/play/arm.py cell_shape) and the card's figures under load."""

from pathlib import Path

import pytest

from serving_rollout.module_utils import engine_metrics
from serving_rollout.play import arm

FIXTURES = Path(__file__).parent.parent / "fixtures" / "metrics"


def served(name):
    text = (FIXTURES / name).read_text()
    return lambda base_url, path, api_key=None, timeout=10.0: {"ok": True, "status": 200, "text": text}


def test_a_real_vllm_window_counts_the_requests_and_tokens_between_two_scrapes():
    before = engine_metrics.scrape("vllm", "http://x", get=served("vllm-0.32-cpu-before.txt"))
    after = engine_metrics.scrape("vllm", "http://x", get=served("vllm-0.32-cpu-after.txt"))
    window = engine_metrics.window("vllm", before, after)
    assert window["requests"] == 2 and window["generated_tokens"] == 24, window  # the fixture's truth
    figures = engine_metrics.figures(engine_metrics.merge([window]))
    assert figures["requests"] == 2 and 0 < figures["ttft_mean_s"] < figures["e2e_mean_s"] < 10, figures
    assert figures["accept_length"] is None  # no speculation in that engine


def test_sglangs_documented_exposition_is_read_with_its_adapters_names():
    totals = engine_metrics.scrape("sglang", "http://x", get=served("sglang-production-metrics-docs.txt"))["totals"]
    assert totals["sglang:e2e_request_latency_seconds_count"] == 11228.0
    assert totals["sglang:time_to_first_token_seconds_count"] == 11008.0
    assert totals["sglang:generation_tokens_total"] == 7557572.0
    assert not any(name.endswith("_bucket") for name in totals)


def test_an_engine_without_metrics_is_named_with_the_flag_that_serves_them():
    def not_found(base_url, path, api_key=None, timeout=10.0):
        return {"ok": False, "status": 404, "error": "GET /metrics: HTTP 404"}

    scraped = engine_metrics.scrape("sglang", "http://x", get=not_found)
    assert scraped == {"available": False, "reason": "GET /metrics: HTTP 404 (sglang serves it with --enable-metrics)"}
    window = engine_metrics.window("sglang", scraped, scraped)
    assert engine_metrics.figures(engine_metrics.merge([window]))["reason"].startswith("GET /metrics: HTTP 404")


def test_speculations_accept_length_is_one_plus_accepted_per_draft():
    merged = engine_metrics.merge([
        {"available": True, "requests": 2, "ttft_sum_s": 0.2, "ttft_count": 2, "e2e_sum_s": 2.0, "generated_tokens": 90,
         "accepted_tokens": 60, "drafts": 30},
        {"available": True, "requests": 2, "ttft_sum_s": 0.2, "ttft_count": 2, "e2e_sum_s": 2.0, "generated_tokens": 90,
         "accepted_tokens": 40, "drafts": 30}])
    assert engine_metrics.figures(merged)["accept_length"] == pytest.approx(1 + 100 / 60, rel=1e-3)


def test_bad_exposition_input_is_named():
    with pytest.raises(ValueError, match="needs the /metrics text, got NoneType"):
        engine_metrics.totals(None)


@pytest.mark.parametrize("cell, expected", [
    ({"name": "4k", "prompt_tokens": 4000}, (12, 4, 8, 1)),  # a latency cell keeps the arm's shape
    ({"name": "c8", "prompt_tokens": 1000, "concurrency": 8, "requests": 24}, (24, 8, 16, 8)),
    ({"name": "c3", "prompt_tokens": 1000, "concurrency": 3, "requests": 12}, (12, 6, 12, 3)),
    ({"name": "c4", "prompt_tokens": 1000, "concurrency": 4, "requests": 8}, (8, 4, 8, 4)),
])
def test_a_throughput_cell_runs_whole_waves_of_its_own_concurrency(cell, expected):
    assert arm.cell_shape(cell, 12, 4, 8, 1) == expected


def test_a_throughput_cell_with_too_few_requests_is_named():
    with pytest.raises(ValueError, match="cell 'c8': concurrency must be >= 1 and requests >= 2, got 8 and 1"):
        arm.cell_shape({"name": "c8", "concurrency": 8, "requests": 1}, 12, 4, 8, 1)


def test_the_double_counts_what_it_served_in_its_metrics(engine_double):
    """The engine TEST DOUBLE's /metrics in SGLang's names: a cell's window equals what the client got."""
    from serving_rollout.module_utils.cells import run_cell

    double = engine_double()
    cell = run_cell({"base_url": double.url, "requests": 4, "concurrency": 2, "prompt_tokens": 50,
                     "engine": "sglang", "telemetry_interval_s": 5})
    window = cell["engine_metrics"]
    assert window["requests"] == 4, window
    assert window["generated_tokens"] == sum(r["completion_tokens"] for r in cell["requests"])
