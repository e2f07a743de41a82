"""The bake's metric comparison (serving_rollout/bake_metrics.py): PromQL's histogram_quantile, a window from two
readings, the judgement, and a Prometheus reading in the same shape as a scrape of the engine. Prometheus's HTTP
answers here are a TEST DOUBLE (canned /api/v1/query bodies); the lab asks the real one
(tests/integration/test_bake_prometheus_lab.py)."""

import http.server
import io
import json
import threading
import urllib.error
import urllib.parse
from pathlib import Path

import pytest

from serving_rollout import bake_metrics
from serving_rollout.module_utils import engine_metrics

# tests/fixtures/metrics: the shape SGLang documents (sgl-project/sglang docs/references/production_metrics.md)
TEXT = """# TYPE sglang:e2e_request_latency_seconds histogram
sglang:e2e_request_latency_seconds_sum{model_name="m"} 9.0
sglang:e2e_request_latency_seconds_count{model_name="m"} 30.0
sglang:e2e_request_latency_seconds_bucket{le="0.1",model_name="m"} 0.0
sglang:e2e_request_latency_seconds_bucket{le="0.2",model_name="m"} 10.0
sglang:e2e_request_latency_seconds_bucket{le="0.4",model_name="m"} 25.0
sglang:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 30.0
sglang:time_to_first_token_seconds_bucket{le="0.01",model_name="m"} 20.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 30.0
sglang:num_requests_total{model_name="m"} 31.0
sglang:num_aborted_requests_total{model_name="m"} 1.0
sglang:token_usage{model_name="m"} 0.25
"""


def test_histogram_quantile_is_promqls_linear_interpolation_within_the_bucket():
    buckets = {"0.1": 0.0, "0.2": 10.0, "0.4": 25.0, "+Inf": 30.0}
    assert bake_metrics.histogram_quantile(0.5, buckets) == 0.2 + 0.2 * (15 - 10) / 15  # rank 15 in (0.2, 0.4]
    assert bake_metrics.histogram_quantile(0.2, buckets) == pytest.approx(0.1 + 0.1 * 6 / 10)
    assert bake_metrics.histogram_quantile(0.99, buckets) == 0.4  # in +Inf: the highest finite bound
    assert bake_metrics.histogram_quantile(0.5, {"0.1": 0.0, "+Inf": 0.0}) is None
    assert bake_metrics.histogram_quantile(0.5, {"0.1": 3.0}) is None  # no +Inf: no quantile, as PromQL


def test_a_scrape_reading_holds_buckets_and_summed_series_by_the_engines_adapter_names():
    reading = engine_metrics.reading("sglang", TEXT)
    assert reading["e2e"] == {"0.1": 0.0, "0.2": 10.0, "0.4": 25.0, "+Inf": 30.0}
    assert reading["requests"] == 31.0 and reading["errors"] == 1.0 and reading["kv_usage"] == 0.25
    assert "generated" not in reading  # not in the text: left out, and the window names it when it needs it
    vllm = 'vllm:request_success_total{finished_reason="stop",model_name="m"} 8\n' \
           'vllm:request_success_total{finished_reason="abort",model_name="m"} 2\n' \
           'vllm:request_success_total{finished_reason="error",model_name="m"} 1\n'
    assert engine_metrics.reading("vllm", vllm) == {"requests": 11.0, "errors": 3.0}


def test_the_real_vllms_metrics_give_a_window_of_its_two_requests():
    """tests/fixtures/metrics: the lab's real vLLM 0.32 read before and after two chat requests of 12 tokens each."""
    folder = Path(__file__).parent.parent / "fixtures" / "metrics"
    start, end = ({"at": at, "ok": True, "series": engine_metrics.reading(
        "vllm", (folder / f"vllm-0.32-cpu-{when}.txt").read_text())} for at, when in ((0.0, "before"), (10.0, "after")))
    assert set(end["series"]) == {"ttft", "e2e", "requests", "errors", "generated", "kv_usage"}  # every series named
    w = bake_metrics.window(start, end)
    assert w["ok"] and w["requests"] == 2 and w["latency_requests"] == 2 and w["errors"] == 0, w
    assert w["generation_tps"] == 2.4 and w["kv_usage"] == 0.0  # 24 tokens over the 10 s between the readings
    assert 0 < w["e2e"]["p50_s"] <= w["e2e"]["p99_s"]


def test_a_window_is_the_difference_and_a_counter_reset_or_a_missing_series_is_unreadable_by_name():
    end = {"at": 60.0, "ok": True, "series": engine_metrics.reading("sglang", TEXT)}
    start = {"at": 0.0, "ok": True, "series": {role: ({le: 0.0 for le in value} if isinstance(value, dict) else 0.0)
                                               for role, value in end["series"].items()}}
    w = bake_metrics.window(start, end)
    assert w["ok"] and w["requests"] == 31.0 and w["errors"] == 1.0 and w["latency_requests"] == 30.0
    assert round(w["error_rate"], 4) == round(1 / 31, 4) and w["e2e"]["p50_s"] == bake_metrics.histogram_quantile(
        0.5, end["series"]["e2e"])
    assert bake_metrics.window(end, start) == {
        "ok": False, "error": "ttft went down over the window (a counter reset: the engine restarted)"}
    lacking = {**end, "series": {k: v for k, v in end["series"].items() if k != "requests"}}
    assert bake_metrics.window(start, lacking)["error"] == "the series for requests is missing at the window's end"


def spread(center, n=60, bounds=("0.1", "0.2", "0.3", "0.4", "0.6", "0.8", "+Inf")):
    values = [center * (0.8 + 0.4 * k / (n - 1)) for k in range(n)]
    return {b: float(sum(1 for v in values if b == "+Inf" or v <= float(b))) for b in bounds}


def window(center, errors=0.0, n=60):
    buckets = spread(center, n)
    return {"ok": True, "seconds": 60.0, "ttft": {"buckets": buckets, **quantiles(buckets)},
            "e2e": {"buckets": buckets, **quantiles(buckets)}, "latency_requests": float(n),
            "requests": float(n) + errors, "errors": errors, "error_rate": errors / (n + errors)}


def quantiles(buckets):
    return {f"p{round(q * 100)}_s": bake_metrics.histogram_quantile(q, buckets) for q in bake_metrics.QUANTILES}


def test_the_judgement_fails_a_slower_window_passes_the_same_and_names_an_error_rate_rise():
    rule = {"metrics": ["e2e_s"]}
    same = bake_metrics.judge(window(0.25), window(0.25), rule)
    assert same["verdict"] == "pass" and same["reasons"] == [] and same["metrics"][0]["verdict"] == "not worse"
    slower = bake_metrics.judge(window(0.25), window(0.4), rule)
    assert slower["verdict"] == "fail" and slower["reasons"][0].startswith("E2E p50 0.2"), slower["reasons"]
    faster = bake_metrics.judge(window(0.4), window(0.25), rule)
    assert faster["verdict"] == "pass"  # one-sided: better is no regression
    errors = bake_metrics.judge(window(0.25), window(0.25, errors=3.0), rule)
    assert errors["reasons"] == ["the error rate rose from 0.00% to 4.76% (more than 1% points)"]
    few = bake_metrics.judge(window(0.25, n=5), window(0.25), rule)
    assert few["verdict"] == "fail" and "holds 5 finished requests, fewer than the 20" in few["reasons"][0]


def prometheus(values, sample_at=None, fail=None):
    """A TEST DOUBLE of Prometheus's /api/v1/query: answers each query from `values` {query: result list}."""
    asked = []

    def opener(request, timeout):
        if fail:
            raise urllib.error.URLError(fail)
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(request.full_url).query)
        asked.append(query)
        q, at = query["query"][0], float(query["time"][0])
        result = [{"metric": {}, "value": [at, str(sample_at if sample_at is not None else at - 1)]}] \
            if q.startswith("max(timestamp(") else values.get(q, [])
        return io.BytesIO(json.dumps({"status": "success", "data": {"resultType": "vector",
                                                                     "result": result}}).encode())
    return opener, asked


def test_a_prometheus_reading_asks_promql_with_the_hosts_labels_and_gives_a_scrapes_shape():
    labels = {"host": "gpu-7"}
    q = bake_metrics.queries("sglang", labels)
    assert q["e2e"] == 'sum by (le) (sglang:e2e_request_latency_seconds_bucket{host="gpu-7"})'
    assert q["errors"] == 'sum(sglang:num_aborted_requests_total{host="gpu-7"})'
    assert bake_metrics.queries("vllm", labels)["errors"] == \
        'sum(vllm:request_success_total{finished_reason=~"abort|error",host="gpu-7"})'
    scraped = engine_metrics.reading("sglang", TEXT)
    values = {q[role]: ([{"metric": {"le": le}, "value": [0, str(v)]} for le, v in scraped[role].items()]
                        if isinstance(scraped[role], dict) else [{"metric": {}, "value": [0, str(scraped[role])]}])
              for role in scraped}
    opener, asked = prometheus(values)
    reading = bake_metrics.prometheus_reading("http://prom:9090", "sglang", labels, 1000.0, opener=opener)
    assert reading["ok"] and reading["series"] == scraped and {a["time"][0] for a in asked} == {"1000.000"}


def test_an_unreachable_prometheus_or_a_stale_sample_is_an_unreadable_window_by_name():
    opener, _ = prometheus({}, fail="[Errno 111] Connection refused")
    down = bake_metrics.prometheus_reading("http://prom:9090", "sglang", {"host": "h"}, 1000.0, opener=opener)
    assert not down["ok"] and "Prometheus at http://prom:9090 did not answer" in down["error"] \
        and "Connection refused" in down["error"]
    opener, _ = prometheus({}, sample_at=900.0)
    stale = bake_metrics.prometheus_reading("http://prom:9090", "sglang", {"host": "h"}, 1000.0, opener=opener)
    assert stale["error"] == ('Prometheus\'s newest sample for host="h" at 1000 is 100 s old (more than 60 s): it '
                              "did not scrape the engine then")


@pytest.fixture
def prometheus_behind_auth():
    """A TEST DOUBLE of a Prometheus behind a reverse proxy's authentication, over real HTTP (urllib's own path):
    401 without the right Authorization header, else an empty vector for every query."""
    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            seen.append(self.headers.get("Authorization"))
            if self.headers.get("Authorization") not in ("Bearer prom-token-5521", "Basic b3BzOnByb20tcHctNzcwMQ=="):
                self.send_error(401, "Unauthorized")
                return
            body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()


def test_a_prometheus_behind_authentication_is_asked_with_the_controllers_credentials_never_shown(
        prometheus_behind_auth):
    url, seen = prometheus_behind_auth
    for environ in ({bake_metrics.TOKEN_ENV: "prom-token-5521"}, {bake_metrics.BASIC_ENV: "ops:prom-pw-7701"}):
        reading = bake_metrics.prometheus_reading(url, "sglang", {"host": "h"}, 1000.0, environ=environ)
        # authenticated: the answer is read (no sample: named as such), not a refusal
        assert reading["error"] == f'Prometheus at {url} has no sample of max(timestamp(sglang:e2e_request_latency_' \
                                   'seconds_count{host="h"})) at 1000', reading
    refused = bake_metrics.prometheus_reading(url, "sglang", {"host": "h"}, 1000.0, environ={})
    assert not refused["ok"] and refused["error"].startswith(f"Prometheus at {url} did not answer ") \
        and refused["error"].endswith(": Unauthorized"), refused
    wrong = bake_metrics.prometheus_reading(url, "sglang", {"host": "h"}, 1000.0,
                                            environ={bake_metrics.TOKEN_ENV: "prom-token-wrong"})
    assert "Unauthorized" in wrong["error"] and "prom-token-wrong" not in json.dumps(wrong), wrong
    assert seen[0] == "Bearer prom-token-5521" and None in seen
    shown = json.dumps([reading, refused, wrong, bake_metrics.window(reading, reading)])
    assert "prom-token-5521" not in shown and "prom-pw-7701" not in shown
    with pytest.raises(bake_metrics.Unreadable, match="must be user:password \\(its value is not shown\\)$"):
        bake_metrics.auth_headers({bake_metrics.BASIC_ENV: "only-a-secret-9"})
