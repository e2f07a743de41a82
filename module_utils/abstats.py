"""Statistics of matched baseline/candidate latency cells (controller side, numpy and scipy).

Deltas are relative: candidate median / baseline median - 1 (negative is faster for a
latency). A metric is `better` or `worse` only when the bootstrap interval of the median
delta excludes zero on that side, the rank test agrees (p < alpha) and the effect is at
least `min_effect`; otherwise `inconclusive`.
"""

import numpy as np
from scipy import stats

LOWER_IS_BETTER = {"ttft_s": True, "e2e_s": True, "decode_tps": False}


def summarize(values):
    data = np.asarray([v for v in values if v is not None], dtype=float)
    out = {"n": int(data.size)}
    if data.size:
        out.update(median=float(np.median(data)), mean=float(np.mean(data)), min=float(data.min()),
                   max=float(data.max()))
        if data.size >= 10:
            out["p90"] = float(np.percentile(data, 90))
        if data.size >= 100:
            out["p99"] = float(np.percentile(data, 99))
    return out


def bootstrap_median_delta(baseline, candidate, n_boot=2000, confidence=0.95, seed=0):
    """Relative median delta and its percentile bootstrap interval (scipy.stats.bootstrap, the
    two arms resampled independently)."""
    from scipy import stats

    a, b = np.asarray(baseline, dtype=float), np.asarray(candidate, dtype=float)
    if a.size < 2 or b.size < 2:
        raise ValueError(f"need at least 2 values per arm, got {a.size} and {b.size}")

    def ratio(x, y, axis=-1):
        return np.median(y, axis=axis) / np.median(x, axis=axis) - 1.0

    result = stats.bootstrap((a, b), ratio, n_resamples=n_boot, confidence_level=confidence, method="percentile",
                             paired=False, vectorized=True, rng=np.random.default_rng(seed))
    interval = result.confidence_interval
    return float(ratio(a, b)), float(interval.low), float(interval.high)


def metric_verdict(baseline, candidate, lower_is_better=True, min_effect=0.02, alpha=0.05, seed=0):
    delta, low, high = bootstrap_median_delta(baseline, candidate, seed=seed)
    p_value = float(stats.mannwhitneyu(baseline, candidate, alternative="two-sided").pvalue)
    improving = (high < 0) if lower_is_better else (low > 0)
    worsening = (low > 0) if lower_is_better else (high < 0)
    big_enough = abs(delta) >= min_effect
    if improving and p_value < alpha and big_enough:
        verdict = "better"
    elif worsening and p_value < alpha and big_enough:
        verdict = "worse"
    else:
        verdict = "inconclusive"
    return {"verdict": verdict, "delta": delta, "ci": [low, high], "p_value": p_value,
            "baseline": summarize(baseline), "candidate": summarize(candidate)}


def bracket_drift(first, second):
    """Relative difference of the medians of the two baseline brackets."""
    m1, m2 = float(np.median(first)), float(np.median(second))
    return abs(m2 - m1) / m1 if m1 else float("inf")


def _ok(requests, key):
    return [r[key] for r in requests if r.get("error") is None and r.get(key) is not None]


def cell_verdict(cell, min_effect=0.02, alpha=0.05, drift_limit=0.05, seed=0):
    """Verdicts per metric of one cell {name, baseline: [[...req], [...req]], candidate: [...req],
    contract_violations}. Failed requests (None) are counted, never dropped; a cell with a
    contract violation is reported and not timed; a drifting baseline is inconclusive."""
    brackets = cell["baseline"]
    candidate = cell["candidate"]
    failures = {"baseline": sum(r.get("error") is not None for b in brackets for r in b),
                "candidate": sum(r.get("error") is not None for r in candidate)}
    result = {"cell": cell["name"], "failures": failures, "metrics": {}, "eligible": True, "reasons": []}
    if cell.get("contract_violations"):
        result.update(eligible=False, verdict="ineligible")
        result["reasons"].append(f"{len(cell['contract_violations'])} response(s) broke the output contract")
        return result
    if any(failures.values()):
        result["reasons"].append(f"failed requests: {failures}")
    drift = bracket_drift(_ok(brackets[0], "e2e_s"), _ok(brackets[-1], "e2e_s")) if len(brackets) > 1 else 0.0
    result["baseline_drift"] = drift
    for metric, lower in LOWER_IS_BETTER.items():
        base = [v for b in brackets for v in _ok(b, metric)]
        cand = _ok(candidate, metric)
        if len(base) < 2 or len(cand) < 2:
            result["metrics"][metric] = {"verdict": "inconclusive", "reason": "too few successful requests"}
            continue
        result["metrics"][metric] = metric_verdict(base, cand, lower, min_effect, alpha, seed)
    if drift > drift_limit:
        result["reasons"].append(f"baseline brackets drifted {drift:.1%} (limit {drift_limit:.0%})")
        for metric in result["metrics"].values():
            metric["verdict"] = "inconclusive"
    result["verdict"] = "timed"
    return result


def decide(cells, rule=None):
    """Overall decision. Default rule: acceptable only if no eligible cell is worse on TTFT or
    E2E and at least one is better."""
    rule = rule or {"guard": ["ttft_s", "e2e_s"], "need_better": ["ttft_s", "e2e_s"]}
    eligible = [c for c in cells if c.get("eligible")]
    worse = [(c["cell"], m) for c in eligible for m in rule["guard"]
             if c["metrics"].get(m, {}).get("verdict") == "worse"]
    better = [(c["cell"], m) for c in eligible for m in rule["need_better"]
              if c["metrics"].get(m, {}).get("verdict") == "better"]
    reasons = [f"{cell} {metric} worse" for cell, metric in worse] + \
              [f"{cell} {metric} better" for cell, metric in better]
    if not eligible:
        return {"decision": "inconclusive", "rule": rule, "reasons": ["no eligible cell"]}
    if worse:
        return {"decision": "reject", "rule": rule, "reasons": reasons}
    if better:
        return {"decision": "acceptable", "rule": rule, "reasons": reasons}
    return {"decision": "inconclusive", "rule": rule, "reasons": reasons or ["no cell better"]}
