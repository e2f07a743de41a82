"""Statistics of matched baseline/candidate latency cells (controller side, numpy and scipy).

Deltas are relative: candidate median / baseline median - 1 (negative is faster for a
latency). Error control is at the decision, not per test (METHOD): every (cell, rule metric,
direction) is a one-sided Mann-Whitney test; alpha is split equally over the cells and each
cell's share equally over its looks (Bonferroni), and within a look Holm runs over the cell's
tests. By the union bound
the chance that identical arms get any verdict other than inconclusive is at most alpha,
whatever the number of cells, metrics and looks. A metric is `better` or `worse` only when its
test is rejected and the effect is at least `min_effect`; the bootstrap interval of the median
delta is reported beside it. Drift between the baseline brackets or a difference in the arms'
conditions can only make a cell inconclusive, which keeps the bound.
"""

import numpy as np
from scipy import stats

try:  # as a module_util on a host, or imported from tools/ and tests on the controller
    from ansible.module_utils.conditions import CONDITION_LIMITS, conditions_problem
except ImportError:
    from conditions import CONDITION_LIMITS, conditions_problem

LOWER_IS_BETTER = {"ttft_s": True, "e2e_s": True, "decode_tps": False}
DEFAULT_RULE = {"guard": ["ttft_s", "e2e_s"], "need_better": ["ttft_s", "e2e_s"]}
METHOD = ("Holm within each look over the cell's one-sided Mann-Whitney tests (rule metrics x better/worse); "
          "alpha split equally over the cells and over each cell's looks (Bonferroni); a verdict also needs "
          "|median delta| >= min_effect; family-wise error of the decision <= alpha (union bound)")


def one_sided_p(baseline, candidate, lower_is_better=True):
    """{"better": p, "worse": p}: one-sided Mann-Whitney p-values that the candidate is better
    (lower latency, higher rate) or worse than the baseline."""
    less = float(stats.mannwhitneyu(candidate, baseline, alternative="less").pvalue)
    greater = float(stats.mannwhitneyu(candidate, baseline, alternative="greater").pvalue)
    return {"better": less, "worse": greater} if lower_is_better else {"better": greater, "worse": less}


def holm(pvalues, alpha):
    """The keys of {key: p} that Holm's step-down procedure rejects at family-wise level alpha."""
    ordered = sorted(pvalues.items(), key=lambda item: item[1])
    rejected = set()
    for rank, (key, p) in enumerate(ordered):
        if p > alpha / (len(ordered) - rank):
            break
        rejected.add(key)
    return rejected


def look_alpha(look, looks, alpha):
    """A cell's alpha at each of its `looks` looks: an equal share (Bonferroni over the looks), so
    the looks together spend at most alpha and an early look can stop a clear cell."""
    if not 1 <= look <= looks:
        raise ValueError(f"look must be within 1..{looks}, got {look}")
    return alpha / looks


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


def judge(baseline, candidate, alpha, min_effect=0.02, rule=None, seed=0):
    """Verdicts of one comparison (one look of one cell): baseline and candidate are request
    records. The rule's metrics are tested one-sided both ways, Holm over them at `alpha`; the
    other metrics are reported, not tested."""
    rule = rule or DEFAULT_RULE
    tested = [m for m in LOWER_IS_BETTER if m in set(rule["guard"]) | set(rule["need_better"])]
    metrics, family = {}, {}
    for metric, lower in LOWER_IS_BETTER.items():
        base, cand = _ok(baseline, metric), _ok(candidate, metric)
        if len(base) < 2 or len(cand) < 2:
            metrics[metric] = {"verdict": "inconclusive", "reason": "too few successful requests"}
            continue
        delta, low, high = bootstrap_median_delta(base, cand, seed=seed)
        p = one_sided_p(base, cand, lower)
        metrics[metric] = {"verdict": "inconclusive" if metric in tested else "reported", "delta": delta,
                           "ci": [low, high], "p_better": p["better"], "p_worse": p["worse"],
                           "baseline": summarize(base), "candidate": summarize(cand)}
        if metric in tested:
            family.update({(metric, "better"): p["better"], (metric, "worse"): p["worse"]})
    for metric, direction in holm(family, alpha):
        if abs(metrics[metric]["delta"]) >= min_effect:
            metrics[metric]["verdict"] = direction
    return metrics


def clear(metrics, rule=None):
    """A look's verdicts are clear enough to stop: a guard metric worse, or every need_better
    metric better."""
    rule = rule or DEFAULT_RULE
    verdicts = {m: v.get("verdict") for m, v in metrics.items()}
    return any(verdicts.get(m) == "worse" for m in rule["guard"]) or \
        all(verdicts.get(m) == "better" for m in rule["need_better"])


def sequential_look(baseline, candidate, look, looks, alpha, cells, min_effect=0.02, rule=None):
    """One interim look of a cell's candidate arm against its first baseline bracket: whether to
    stop now, and the verdicts at this look's alpha (the cell's share, alpha / cells)."""
    level = look_alpha(look, looks, alpha / cells)
    metrics = judge(baseline, candidate, level, min_effect, rule)
    return {"look": look, "looks": looks, "alpha": level, "stop": look < looks and clear(metrics, rule),
            "n": len(candidate), "metrics": {m: v.get("verdict") for m, v in metrics.items()}}


def bracket_drift(first, second):
    """Relative difference of the medians of the two baseline brackets."""
    m1, m2 = float(np.median(first)), float(np.median(second))
    return abs(m2 - m1) / m1 if m1 else float("inf")


def _ok(requests, key):
    return [r[key] for r in requests if r.get("error") is None and r.get(key) is not None]


def cell_verdict(cell, min_effect=0.02, alpha=0.05, drift_limit=0.05, seed=0, rule=None, cells=1,
                 condition_limits=None):
    """Verdicts per metric of one cell {name, baseline: [[...req], [...req]], candidate: [...req],
    contract_violations, sequential: {look, looks} (when the candidate arm stopped early),
    conditions: {baseline, candidate}, disturbed: [why a chunk stayed unlike the reference]}.
    Failed requests are counted, never dropped; a cell with a contract violation is reported
    and not timed; a drifting baseline, arms under different conditions or a chunk that stayed
    disturbed make it inconclusive, with the reason.

    A cell that stopped at an interim look is judged at that look (candidate against the first
    bracket, that look's alpha); one that ran to its last look against both brackets."""
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
    sequential = cell.get("sequential") or {}
    look, looks = sequential.get("look", 1), sequential.get("looks", 1)
    level = look_alpha(look, looks, alpha / cells)
    baseline = brackets[0] if look < looks else [r for b in brackets for r in b]
    result["alpha"] = level
    result["look"] = {"look": look, "looks": looks, "against": "first bracket" if look < looks else "both brackets"}
    result["metrics"] = judge(baseline, candidate, level, min_effect, rule, seed)
    problems = []
    if drift > drift_limit:
        problems.append(f"baseline brackets drifted {drift:.1%} (limit {drift_limit:.0%})")
    conditions = cell.get("conditions") or {}
    different = conditions_problem(conditions.get("baseline"), conditions.get("candidate"),
                                   {**CONDITION_LIMITS, **(condition_limits or {})})
    if different:
        problems.append(f"arms ran under different conditions: {different}")
    for chunk_problem in cell.get("disturbed") or []:
        problems.append(f"a chunk stayed disturbed after re-measuring: {chunk_problem}")
    for problem in problems:
        result["reasons"].append(problem)
        for metric in result["metrics"].values():
            if metric["verdict"] in ("better", "worse"):
                metric["verdict"] = "inconclusive"
    result["verdict"] = "timed"
    return result


def decide(cells, rule=None):
    """Overall decision from cells judged by cell_verdict (the error control is there, METHOD).
    Default rule: acceptable only if no eligible cell is worse on TTFT or E2E and at least one
    is better."""
    rule = rule or DEFAULT_RULE
    eligible = [c for c in cells if c.get("eligible")]
    worse = [(c["cell"], m) for c in eligible for m in rule["guard"]
             if c["metrics"].get(m, {}).get("verdict") == "worse"]
    better = [(c["cell"], m) for c in eligible for m in rule["need_better"]
              if c["metrics"].get(m, {}).get("verdict") == "better"]
    reasons = [f"{cell} {metric} worse" for cell, metric in worse] + \
              [f"{cell} {metric} better" for cell, metric in better]
    if not eligible:
        return {"decision": "inconclusive", "rule": rule, "method": METHOD, "reasons": ["no eligible cell"]}
    if worse:
        return {"decision": "reject", "rule": rule, "method": METHOD, "reasons": reasons}
    if better:
        return {"decision": "acceptable", "rule": rule, "method": METHOD, "reasons": reasons}
    return {"decision": "inconclusive", "rule": rule, "method": METHOD,
            "reasons": reasons or ["no cell better"] + [r for c in eligible for r in c["reasons"]]}
