"""A bake's metric comparison: the engine's own series over the promoted unit's window against the same series over
the original's window just before the promotion, judged with the A/B's statistics.

A reading is the engine's series at one moment, {at, ok, series | error}, with series {ttft|e2e: {le: cumulative
count}, requests|errors|generated|kv_usage: value}. The host's bake scrapes /metrics for it
(module_utils/engine_metrics.bake_reading); with a Prometheus named in the inventory the controller asks Prometheus
for the same series at the same moments (`prometheus_reading`, PromQL over the engine's names from its adapter and
the host's labels). A window is the difference of two readings; its quantiles are PromQL's histogram_quantile's.

The judgement (`judge`), per latency metric of the run's rule: a regression is a one-sided Mann-Whitney test of the
two windows' binned requests (ties within a bucket) significant at alpha split over the metrics judged, and the
median or p90 worse by at least min_effect; the error rate may rise by at most max_error_rate_rise. A window that
cannot be read (Prometheus unreachable, a series missing, a stale sample, a counter reset, too few requests) fails
the bake, named: never a pass. Generation throughput and KV usage are shown beside it, not judged (they follow the
traffic offered)."""

import base64
import json
import math
import os
import urllib.error
import urllib.parse
import urllib.request

from serving_rollout.module_utils import engine_metrics
from serving_rollout.module_utils.engine_adapters import adapter

QUANTILES = (0.5, 0.9, 0.99)
RULE_METRICS = {"ttft_s": "ttft", "e2e_s": "e2e"}  # the A/B's latency metrics and the histograms that hold them
DEFAULTS = {"min_effect": 0.02, "alpha": 0.05, "max_error_rate_rise": 0.01, "min_requests": 20,
            "max_sample_age_s": 60.0}


# A Prometheus behind authentication: its credentials from the controller's environment, never the inventory's URL
# (the URL is kept in records and shown; roles/rollout/tasks/bake.yml refuses one that holds credentials).
TOKEN_ENV, BASIC_ENV = "SERVING_ROLLOUT_PROMETHEUS_TOKEN", "SERVING_ROLLOUT_PROMETHEUS_BASIC_AUTH"


class Unreadable(Exception):
    """A window the bake cannot read, with why."""


# Prometheus ---------------------------------------------------------------------------------------------------------

def _matchers(labels, own=()):
    """PromQL label matchers: the series' own (engine_metrics.selector's), then the host's labels."""
    return ",".join([f'{label}{op}"{value}"' for label, op, value in own] +
                    [f'{key}="{value}"' for key, value in sorted(labels.items())])


def queries(engine, labels):
    """{role: PromQL} of the series a bake reads for one host (its labels), plus "age": the newest sample's time."""
    names = adapter(engine).get("metrics") or {}
    out = {}
    for role in engine_metrics.HISTOGRAMS:
        if names.get(role):
            out[role] = f"sum by (le) ({names[role]}_bucket{{{_matchers(labels)}}})"
    for role in engine_metrics.SERIES:
        if names.get(role):
            name, own = engine_metrics.selector(names[role])
            out[role] = f"sum({name}{{{_matchers(labels, own)}}})"
    if names.get("e2e"):
        out["age"] = f"max(timestamp({names['e2e']}_count{{{_matchers(labels)}}}))"
    return out


def auth_headers(environ=os.environ):
    """The Authorization header Prometheus needs, from TOKEN_ENV (a bearer token) or BASIC_ENV (user:password)."""
    if environ.get(TOKEN_ENV):
        return {"Authorization": f"Bearer {environ[TOKEN_ENV]}"}
    if environ.get(BASIC_ENV):
        if ":" not in environ[BASIC_ENV]:
            raise Unreadable(f"{BASIC_ENV} must be user:password (its value is not shown)")
        return {"Authorization": "Basic " + base64.b64encode(environ[BASIC_ENV].encode()).decode()}
    return {}


def _instant(url, query, at, timeout, opener, headers):
    target = f"{url.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode({"query": query, "time": f"{at:.3f}"})
    request = urllib.request.Request(target, headers=headers)
    try:
        with opener(request, timeout=timeout) as response:
            body = json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise Unreadable(f"Prometheus at {url} did not answer {query!r}: {getattr(exc, 'reason', exc)}") from exc
    if body.get("status") != "success":
        raise Unreadable(f"Prometheus at {url} refused {query!r}: {body.get('error', body.get('status'))}")
    return body["data"]["result"]


def prometheus_reading(url, engine, labels, at, max_age_s=DEFAULTS["max_sample_age_s"], timeout=10.0,
                       opener=urllib.request.urlopen, environ=os.environ):
    """The reading Prometheus holds for the host at `at` (epoch s): {at, ok, series | error, queries}; `environ`
    holds its credentials (auth_headers)."""
    asked = queries(engine, labels)
    try:
        series, headers = {}, auth_headers(environ)
        for role, query in asked.items():
            result = _instant(url, query, at, timeout, opener, headers)
            if role == "age":
                if not result:
                    raise Unreadable(f"Prometheus at {url} has no sample of {query} at {at:.0f}")
                age = at - float(result[0]["value"][1])
                if age > max_age_s:
                    raise Unreadable(f"Prometheus's newest sample for {_matchers(labels)} at {at:.0f} is {age:.0f} s "
                                     f"old (more than {max_age_s:g} s): it did not scrape the engine then")
            elif role in engine_metrics.HISTOGRAMS:
                buckets = {r["metric"].get("le"): float(r["value"][1]) for r in result if "le" in r["metric"]}
                if buckets:
                    series[role] = buckets
            elif result:
                series[role] = float(result[0]["value"][1])
    except Unreadable as exc:
        return {"at": at, "ok": False, "error": str(exc), "queries": asked}
    return {"at": at, "ok": True, "series": series, "queries": asked}


# One window ---------------------------------------------------------------------------------------------------------

def _upper(le):
    """A bucket's upper bound as a number (+Inf the last)."""
    return math.inf if le == "+Inf" else float(le)


def _bounds(buckets):
    return sorted((_upper(le), count) for le, count in buckets.items())


def histogram_quantile(q, buckets):
    """PromQL's histogram_quantile over {le: cumulative count}: linear within the bucket holding the rank; None when
    empty or without +Inf."""
    ordered = _bounds(buckets)
    if not ordered or ordered[-1][0] != math.inf or ordered[-1][1] <= 0:
        return None
    counts = []
    for _, count in ordered:  # PromQL makes the cumulative counts monotonic before it ranks
        counts.append(max(count, counts[-1]) if counts else count)
    rank = q * counts[-1]
    index = next(n for n, count in enumerate(counts) if count >= rank)
    if index == len(ordered) - 1:
        return ordered[-2][0] if len(ordered) > 1 else None
    start, below = (0.0, 0.0) if index == 0 else (ordered[index - 1][0], counts[index - 1])
    if index == 0 and ordered[0][0] <= 0:
        return ordered[0][0]
    inside = counts[index] - below
    return start + (ordered[index][0] - start) * ((rank - below) / inside if inside else 0.0)


def _delta(role, start, end):
    if role not in start or role not in end:
        raise Unreadable(f"the series for {role} is missing at the window's "
                         f"{'start' if role not in start else 'end'}")
    if isinstance(end[role], dict):
        out = {le: end[role][le] - start[role].get(le, 0.0) for le in end[role]}
        lowest = min(out.values(), default=0.0)
    else:
        out = lowest = end[role] - start[role]
    if lowest < 0:
        raise Unreadable(f"{role} went down over the window (a counter reset: the engine restarted)")
    return out


def window(start, end):
    """What the engine did between two readings: {ok, seconds, requests, errors, error_rate, ttft, e2e (quantiles
    and per-bucket counts), generation_tps, kv_usage} or {ok: False, error}."""
    try:
        for reading in (start, end):
            if not reading.get("ok"):
                raise Unreadable(reading.get("error") or "not read")
        seconds = end["at"] - start["at"]
        out = {"ok": True, "seconds": round(seconds, 3)}
        for role in engine_metrics.HISTOGRAMS:
            buckets = _delta(role, start["series"], end["series"])
            out[role] = {"buckets": buckets, **{f"p{round(q * 100)}_s": histogram_quantile(q, buckets)
                                                for q in QUANTILES}}
        out["latency_requests"] = out["e2e"]["buckets"].get("+Inf", 0.0)
        out["requests"] = _delta("requests", start["series"], end["series"])
        out["errors"] = _delta("errors", start["series"], end["series"]) if "errors" in end["series"] else None
        out["error_rate"] = (out["errors"] / out["requests"]) if out["requests"] and out["errors"] is not None \
            else None
        if "generated" in end["series"] and seconds > 0:
            out["generation_tps"] = round(_delta("generated", start["series"], end["series"]) / seconds, 3)
        out["kv_usage"] = end["series"].get("kv_usage")
        return out
    except Unreadable as exc:
        return {"ok": False, "error": str(exc)}


# The judgement ------------------------------------------------------------------------------------------------------

def mann_whitney_worse(before, after):
    """One-sided p that `after`'s requests are slower than `before`'s: the A/B's Mann-Whitney test (scipy's, as
    serving_rollout/play/abstats.py runs it), each request standing as the rank of its bucket, so the requests of one
    bucket tie (the normal approximation with its tie correction: exact p-values assume no ties)."""
    import numpy as np  # here, not at the top: status and the fleet promotion's plan import this module
    from scipy import stats

    bounds = sorted({*before, *after}, key=_upper)

    def ranks(buckets):
        cumulative = [buckets.get(le, 0.0) for le in bounds]
        per_bucket = [round(c - (cumulative[n - 1] if n else 0.0)) for n, c in enumerate(cumulative)]
        return np.repeat(np.arange(len(bounds)), per_bucket)

    b, a = ranks(before), ranks(after)
    if not b.size or not a.size:
        return None
    if len(set(b) | set(a)) < 2:  # every request in one bucket: nothing tells the windows apart
        return 1.0
    return float(stats.mannwhitneyu(a, b, alternative="greater", method="asymptotic").pvalue)


def _relative(before, after):
    return None if before is None or after is None or before <= 0 else after / before - 1


def _latency(metric, pre, post, rule):
    p = mann_whitney_worse(pre[metric]["buckets"], post[metric]["buckets"])
    deltas = {q: _relative(pre[metric][q], post[metric][q]) for q in ("p50_s", "p90_s")}
    worse = [q for q, d in deltas.items() if d is not None and d >= rule["min_effect"]]
    verdict = "worse" if p is not None and p < rule["alpha"] and worse else "not worse"
    shown = ", ".join(f"{q[:-2]} {pre[metric][q]:.4g} -> {post[metric][q]:.4g} s ({deltas[q]:+.1%})"
                      for q in deltas if deltas[q] is not None)
    return {"metric": metric, "verdict": verdict, "p_worse": p, "deltas": deltas,
            "text": f"{metric.upper()} {shown}, Mann-Whitney p(worse) {p:.3g}" if p is not None else
            f"{metric.upper()}: no requests to compare"}


def _readable(pre, post, rule):
    for name, w in (("before the promotion", pre), ("the promoted unit's", post)):
        if not w.get("ok"):
            return f"the window {name} cannot be read: {w.get('error')}"
        if w["latency_requests"] < rule["min_requests"]:
            return (f"the window {name} holds {w['latency_requests']:g} finished requests, fewer than the "
                    f"{rule['min_requests']} a comparison needs (too little traffic to judge)")
    return None


def judge(pre, post, rule):
    """{verdict: pass|fail, reasons, metrics, error_rate, shown} comparing the promoted unit's window with the
    original's. `rule`: DEFAULTS' keys, and "metrics" (the run's rule metrics: ttft_s, e2e_s)."""
    rule = {**DEFAULTS, **rule}
    problem = _readable(pre, post, rule)
    if problem:
        return {"verdict": "fail", "reasons": [problem], "metrics": [], "shown": {}}
    judged = [RULE_METRICS[m] for m in rule.get("metrics", RULE_METRICS) if m in RULE_METRICS] or \
        list(RULE_METRICS.values())
    # alpha split over the metrics judged (Bonferroni): the bake's false failure stays within alpha as a whole
    metrics = [_latency(m, pre, post, {**rule, "alpha": rule["alpha"] / len(judged)}) for m in judged]
    reasons = [f"{m['text']}: worse by at least {rule['min_effect']:.0%}" for m in metrics if m["verdict"] == "worse"]
    rates = (pre.get("error_rate"), post.get("error_rate"))
    if rates[1] is not None and rates[1] - (rates[0] or 0.0) > rule["max_error_rate_rise"]:
        reasons.append(f"the error rate rose from {rates[0] or 0:.2%} to {rates[1]:.2%} (more than "
                       f"{rule['max_error_rate_rise']:.0%} points)")
    shown = {"requests": (pre["requests"], post["requests"]), "error_rate": rates,
             "generation_tps": (pre.get("generation_tps"), post.get("generation_tps")),
             "kv_usage": (pre.get("kv_usage"), post.get("kv_usage"))}
    return {"verdict": "fail" if reasons else "pass", "reasons": reasons, "metrics": metrics, "shown": shown}
