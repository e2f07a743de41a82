"""Statistics of matched baseline/candidate latency cells (controller side, numpy and scipy).

Deltas are relative: candidate median / baseline median - 1 (negative is faster for a
latency). Error control is at the decision, not per test (METHOD): every (cell, rule metric,
direction) is a one-sided Mann-Whitney test; alpha is split equally over the cells, and within
a look Holm runs over the cell's tests. Over a sequential cell's looks each test has a constant
nominal boundary (look_boundary, Pocock-type) such that it crosses at any look with at most its
share of the cell's alpha; ranks alone decide a Mann-Whitney test, so that chance is the same for
every latency distribution and is computed once from simulated ranks. By the union bound the
chance that identical arms get any verdict other than inconclusive is at most alpha, whatever
the number of cells, metrics and looks. A metric is `better` or `worse` only when its
test is rejected and the effect is at least `min_effect`; the bootstrap interval of the median
delta is reported beside it. Drift between the baseline brackets or a difference in the arms'
conditions can only make a cell inconclusive, which keeps the bound.

A sequential cell stops at a look whose verdict is clear (STOPPING): a guard metric worse, or a
need_better metric better while every other guard metric is shown no worse than `min_effect`
(a one-sided Mann-Whitney test of non-inferiority at alpha). The non-inferiority test only
gates stopping, it never makes a verdict, so the bound above holds for any stopping rule;
without it a cell could stop on a better E2E while its TTFT, untested for harm at that size,
was worse.
"""

import functools

import numpy as np
from scipy import stats

from serving_rollout.module_utils.conditions import CONDITION_LIMITS, conditions_problem

LOWER_IS_BETTER = {"ttft_s": True, "e2e_s": True, "decode_tps": False}
DEFAULT_RULE = {"guard": ["ttft_s", "e2e_s"], "need_better": ["ttft_s", "e2e_s"]}
# Said in the decision record and on the card: plain sentences, each short enough to read once.
STOPPING = ("A cell stops at a look when a guard metric is worse, or when a need_better metric is better and every "
            "other guard metric is shown no worse than min_effect (one-sided Mann-Whitney non-inferiority at "
            "alpha). Otherwise it runs to its last look and is judged against both baseline brackets.")
METHOD = ("Each look applies Holm's method to the cell's one-sided Mann-Whitney tests (each rule metric, better and "
          "worse). Alpha is split equally over the cells. Over a cell's looks, each Holm step has one constant "
          "nominal p-value boundary: one test crosses it at any look with at most that step's level when the arms "
          "are identical (simulated from the permutation distribution of the ranks, never below Bonferroni over the "
          "looks). A verdict also needs the median delta to be at least min_effect in size. The family-wise error "
          "of the decision is at most alpha (union bound). " + STOPPING)
NONINFERIORITY = (" An upgrade's rule, where no metric needs to be better, is acceptable when no cell is worse and "
                  "every cell's guard metrics are each shown at most noninferior_margin worse (a one-sided "
                  "Mann-Whitney test of the candidate scaled back by the margin, at the cell's share of alpha; all "
                  "must be shown).")
# Draws of simulated ranks behind a sequential boundary: a chance of 0.005 is estimated to about 3 %.
BOUNDARY_DRAWS = 200_000


def one_sided_p(baseline, candidate, lower_is_better=True):
    """{"better": p, "worse": p}: one-sided Mann-Whitney p-values that the candidate is better
    (lower latency, higher rate) or worse than the baseline."""
    method = mann_whitney_method(len(candidate), len(baseline))
    less = float(stats.mannwhitneyu(candidate, baseline, alternative="less", method=method).pvalue)
    greater = float(stats.mannwhitneyu(candidate, baseline, alternative="greater", method=method).pvalue)
    return {"better": less, "worse": greater} if lower_is_better else {"better": greater, "worse": less}


def mann_whitney_method(n_candidate, n_baseline):
    """Exact p-values while the null distribution is small; the normal approximation beyond. The
    tests and the boundary's simulation both use this, so they agree."""
    return "exact" if n_candidate * n_baseline <= 2500 else "asymptotic"


def holm(pvalues, alpha):
    """The keys of {key: p} that Holm's step-down procedure rejects at family-wise level alpha, or,
    when alpha is a function, at the nominal level alpha(left) with `left` hypotheses left (a
    sequential boundary for the share alpha / left)."""
    level = alpha if callable(alpha) else (lambda left: alpha / left)
    ordered = sorted(pvalues.items(), key=lambda item: item[1])
    rejected = set()
    for rank, (key, p) in enumerate(ordered):
        if p > level(len(ordered) - rank):
            break
        rejected.add(key)
    return rejected


def sequential_design(requests, chunk, bracket):
    """(candidate n, baseline n) at each look of a sequential cell: the candidate after every chunk
    against the first bracket, and at the last look all its requests against both brackets (the
    second is one chunk)."""
    if min(requests, chunk, bracket) < 1:
        raise ValueError(f"a sequential cell needs requests, chunk and bracket >= 1, got {requests}, {chunk}, "
                         f"{bracket}")
    looks = -(-requests // chunk)
    return tuple((k * chunk, bracket) for k in range(1, looks)) + ((requests, bracket + min(chunk, bracket)),)


def _p_by_u(n_candidate, n_baseline):
    """The one-sided ("less") Mann-Whitney p-value for every value of U, the count of (candidate,
    baseline) pairs in which the candidate is larger: asked of scipy itself, with the method the
    tests use, on one arrangement per U (candidate i above min(max(U - i * n_baseline, 0),
    n_baseline) of the baseline values, and no two values tied), so the boundary and the tests agree."""
    u = np.arange(n_candidate * n_baseline + 1)
    above = np.clip(u[:, None] - n_baseline * np.arange(n_candidate)[None, :], 0, n_baseline)
    candidate = above - 0.5 + np.arange(n_candidate) / (4 * n_candidate)  # distinct, same U
    baseline = np.broadcast_to(np.arange(n_baseline, dtype=float), (u.size, n_baseline))
    return stats.mannwhitneyu(candidate, baseline, axis=1, alternative="less",
                              method=mann_whitney_method(n_candidate, n_baseline)).pvalue


@functools.lru_cache(maxsize=16)
def _smallest_p_over_looks(design, block=5_000):
    """Sorted: for each of BOUNDARY_DRAWS sets of identical arms (uniform values, seeded), the
    smallest one-sided Mann-Whitney p-value over the looks of `design`."""
    rng = np.random.default_rng(20261130)
    n_candidate, n_baseline = max(c for c, _ in design), max(b for _, b in design)
    tables = {look: _p_by_u(*look) for look in set(design)}
    smallest = np.empty(BOUNDARY_DRAWS)
    for start in range(0, BOUNDARY_DRAWS, block):
        candidate, baseline = rng.random((block, n_candidate)), rng.random((block, n_baseline))
        # U at a look: over its candidates, how many of its baseline values each is above.
        u = {b: np.cumsum((candidate[:, :, None] > baseline[:, None, :b]).sum(axis=2), axis=1)
             for b in {b for _, b in design}}
        smallest[start:start + block] = np.min([tables[(c, b)][u[b][:, c - 1]] for c, b in design], axis=0)
    return np.sort(smallest)


@functools.lru_cache(maxsize=64)
def look_boundary(design, level):
    """The nominal one-sided p-value at or below which one test rejects at a look of `design` (see
    sequential_design), chosen so that under identical arms it crosses at any look with chance at
    most `level`: the largest p-value whose simulated chance plus two standard errors stays within
    level. Never below level / looks (Bonferroni, which needs no simulation); one look: level."""
    if len(design) == 1:
        return level
    smallest = _smallest_p_over_looks(design)
    values = np.unique(smallest)
    chance = np.searchsorted(smallest, values, side="right") / smallest.size
    within = chance + 2 * np.sqrt(chance * (1 - chance) / smallest.size) <= level
    simulated = float(values[within].max()) if within.any() else 0.0
    return max(level / len(design), simulated)


def boundary(design, alpha):
    """Holm's nominal level for a cell with share `alpha`, as a function of the hypotheses left:
    plain Holm without a design (one look), the sequential boundary with one."""
    if not design:
        return alpha
    return lambda left: look_boundary(design, alpha / left)


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


def judge(baseline, candidate, alpha, min_effect=0.02, rule=None, seed=0, interval=True):
    """Verdicts of one comparison (one look of one cell): baseline and candidate are request
    records. The rule's metrics are tested one-sided both ways, Holm over them at `alpha` (a level,
    or a boundary: see holm); the other metrics are reported, not tested. interval=False leaves out
    the bootstrap interval (an interim look needs only the verdicts)."""
    rule = rule or DEFAULT_RULE
    tested = _tested(rule)
    metrics, family = {}, {}
    for metric, lower in LOWER_IS_BETTER.items():
        base, cand = _ok(baseline, metric), _ok(candidate, metric)
        if len(base) < 2 or len(cand) < 2:
            metrics[metric] = {"verdict": "inconclusive", "reason": "too few successful requests"}
            continue
        p = one_sided_p(base, cand, lower)
        metrics[metric] = {"verdict": "inconclusive" if metric in tested else "reported",
                           "delta": float(np.median(cand) / np.median(base) - 1.0), "p_better": p["better"],
                           "p_worse": p["worse"], "baseline": summarize(base), "candidate": summarize(cand)}
        if interval:
            metrics[metric]["ci"] = list(bootstrap_median_delta(base, cand, seed=seed)[1:])
        if metric in tested:
            family.update({(metric, "better"): p["better"], (metric, "worse"): p["worse"]})
    for metric, direction in holm(family, alpha):
        if abs(metrics[metric]["delta"]) >= min_effect:
            metrics[metric]["verdict"] = direction
    return metrics


def noninferior_p(baseline, candidate, margin, lower_is_better=True):
    """One-sided Mann-Whitney p-value that the candidate is no worse than the baseline by more than
    `margin` (relative): the candidate scaled back by the margin is tested better than the
    baseline. Small when the candidate is clearly no worse."""
    scale = 1.0 + margin if lower_is_better else 1.0 - margin
    return one_sided_p(baseline, [v / scale for v in candidate], lower_is_better)["better"]


def noninferiority(metrics, baseline, candidate, rule, alpha):
    """A rule with a noninferior_margin (an upgrade's, judged no worse rather than better): each guard metric's
    one-sided test that the candidate is at most the margin worse, at the cell's share of alpha; kept in the
    metric as p_noninferior and noninferior (shown or not)."""
    margin = (rule or {}).get("noninferior_margin")
    if margin is None:
        return
    for metric in rule["guard"]:
        base, cand = _ok(baseline, metric), _ok(candidate, metric)
        if metric in metrics and len(base) >= 2 and len(cand) >= 2:
            p = noninferior_p(base, cand, float(margin), LOWER_IS_BETTER[metric])
            metrics[metric].update(p_noninferior=p, noninferior=p <= alpha)


def clear(metrics, rule=None, noninferior=None):
    """A look's verdicts are clear enough to stop (STOPPING): a guard metric worse, or a need_better
    metric better while every other guard metric is better or in `noninferior` (shown no worse)."""
    rule = rule or DEFAULT_RULE
    verdicts = {m: v.get("verdict") for m, v in metrics.items()}
    if any(verdicts.get(m) == "worse" for m in rule["guard"]):
        return True
    shown_safe = set(noninferior or ()) | {m for m, v in verdicts.items() if v == "better"}
    return any(verdicts.get(m) == "better" for m in rule["need_better"]) and set(rule["guard"]) <= shown_safe


def sequential_look(baseline, candidate, look, design, alpha, cells, min_effect=0.02, rule=None):
    """Look `look` of a cell's candidate arm against its first baseline bracket, `design` the cell's
    looks (sequential_design): whether to stop now (STOPPING), and the verdicts at the boundary for
    the cell's share of alpha (alpha / cells)."""
    rule = rule or DEFAULT_RULE
    design = tuple(tuple(sizes) for sizes in design)
    if not 1 <= look <= len(design):
        raise ValueError(f"look must be within 1..{len(design)}, got {look}")
    metrics = judge(baseline, candidate, boundary(design, alpha / cells), min_effect, rule, interval=False)
    noninferior = {}
    for metric in rule["guard"]:
        base, cand = _ok(baseline, metric), _ok(candidate, metric)
        if len(base) >= 2 and len(cand) >= 2:
            noninferior[metric] = noninferior_p(base, cand, min_effect, LOWER_IS_BETTER[metric])
    shown = [m for m, p in noninferior.items() if p <= alpha]
    return {"look": look, "looks": len(design), "design": [list(sizes) for sizes in design], "alpha": alpha / cells,
            "boundary": look_boundary(design, alpha / cells / (2 * len(_tested(rule)))),  # Holm's first step
            "stop": look < len(design) and clear(metrics, rule, shown), "n": len(candidate),
            "metrics": {m: v.get("verdict") for m, v in metrics.items()}, "noninferior_p": noninferior}


def _tested(rule):
    """The metrics a rule tests (each both ways); the others are reported."""
    return [m for m in LOWER_IS_BETTER if m in set(rule["guard"]) | set(rule["need_better"])]


def bracket_drift(first, second):
    """Relative difference of the medians of the two baseline brackets (0 when a bracket has no
    successful request: that cell cannot be timed at all, see unjudged)."""
    if not len(first) or not len(second):
        return 0.0
    m1, m2 = float(np.median(first)), float(np.median(second))
    return abs(m2 - m1) / m1 if m1 else float("inf")


def _ok(requests, key):
    return [r[key] for r in requests if r.get("error") is None and r.get(key) is not None]


def cell_verdict(cell, min_effect=0.02, alpha=0.05, drift_limit=0.05, seed=0, rule=None, cells=1,
                 condition_limits=None):
    """Verdicts per metric of one cell {name, baseline: [[...req], [...req]], candidate: [...req],
    contract_violations, sequential: {look, looks, design} (the candidate's last look),
    conditions: {baseline, candidate}, disturbed: [why a chunk stayed unlike the reference]}.
    Failed requests are counted, never dropped; a cell with a contract violation is reported
    and not timed; a drifting baseline, arms under different conditions or a chunk that stayed
    disturbed make it inconclusive, with the reason.

    A cell that stopped at an interim look is judged at that look (candidate against the first
    bracket); one that ran to its last look against both brackets; both at the design's boundary."""
    brackets = cell["baseline"]
    candidate = cell["candidate"]
    failures = {"baseline": sum(r.get("error") is not None for b in brackets for r in b),
                "candidate": sum(r.get("error") is not None for r in candidate)}
    sent = {"baseline": sum(len(b) for b in brackets), "candidate": len(candidate)}
    result = {"cell": cell["name"], "failures": failures, "sent": sent, "metrics": {}, "eligible": True,
              "reasons": []}
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
    design = tuple(tuple(sizes) for sizes in sequential.get("design") or ())
    baseline = brackets[0] if look < looks else [r for b in brackets for r in b]
    result["alpha"] = alpha / cells
    result["look"] = {"look": look, "looks": looks, "against": "first bracket" if look < looks else "both brackets"}
    # A record without its design (written before the boundary): Bonferroni over its looks, valid as ever.
    level = boundary(design, alpha / cells) if design or looks == 1 else alpha / cells / looks
    result["metrics"] = judge(baseline, candidate, level, min_effect, rule, seed)
    noninferiority(result["metrics"], baseline, candidate, rule, alpha / cells)
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


def failed_beyond(cells, max_failed=0):
    """(cell, failed, sent) of each cell whose candidate arm failed more than `max_failed` requests."""
    return [(c["cell"], c["failures"]["candidate"], c.get("sent", {}).get("candidate"))
            for c in cells if c.get("failures", {}).get("candidate", 0) > max_failed]


def unjudged(cells, rule=None):
    """Eligible cells where a rule metric could not be tested (an arm without enough successful requests)."""
    rule = rule or DEFAULT_RULE
    return [c["cell"] for c in cells if c.get("eligible")
            and any(c["metrics"].get(m, {}).get("reason") == "too few successful requests" for m in _tested(rule))]


def noninferior_decision(eligible, rule):
    """An upgrade's rule (need_better empty, a noninferior_margin): acceptable when no cell is worse (decided
    before this) and every eligible cell shows every guard metric at most the margin worse. All must be shown
    (an intersection-union test), so each test at its cell's level keeps the decision's error at alpha."""
    margin = float(rule["noninferior_margin"])
    missing = [(c["cell"], m) for c in eligible for m in rule["guard"]
               if not c["metrics"].get(m, {}).get("noninferior")]
    if missing:
        return {"decision": "inconclusive", "rule": rule, "method": METHOD + NONINFERIORITY,
                "reasons": [f"{cell} {metric} not shown at most {margin:.0%} worse" for cell, metric in missing]}
    return {"decision": "acceptable", "rule": rule, "method": METHOD + NONINFERIORITY,
            "reasons": [f"{c['cell']} {m} shown at most {margin:.0%} worse (p={c['metrics'][m]['p_noninferior']:.3g})"
                        for c in eligible for m in rule["guard"]]}


def decide(cells, rule=None, max_failed=0):
    """Overall decision from cells judged by cell_verdict (the error control is there, METHOD).
    Default rule: acceptable only if no eligible cell is worse on TTFT or E2E and at least one
    is better. A candidate that failed more than `max_failed` requests in any cell is a reject
    (a crash or an error is a harm no latency can buy back), and a cell an arm could not be timed
    in (too few successful requests) makes the decision inconclusive at best."""
    rule = rule or DEFAULT_RULE
    failed = failed_beyond(cells, max_failed)
    if failed:
        return {"decision": "reject", "rule": rule, "method": METHOD, "max_failed": max_failed,
                "reasons": [f"{cell} candidate failed {n}{f' of {sent}' if sent else ''} request(s) "
                            f"(limit {max_failed})" for cell, n, sent in failed]}
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
    blind = unjudged(cells, rule)
    if blind:
        return {"decision": "inconclusive", "rule": rule, "method": METHOD,
                "reasons": [f"{cell} could not be timed: too few successful requests in an arm" for cell in blind]
                + reasons}
    if better:
        return {"decision": "acceptable", "rule": rule, "method": METHOD, "reasons": reasons}
    if rule.get("noninferior_margin") is not None and not rule["need_better"]:
        return noninferior_decision(eligible, rule)
    return {"decision": "inconclusive", "rule": rule, "method": METHOD,
            "reasons": reasons or ["no cell better"] + [r for c in eligible for r in c["reasons"]]}
