"""A/B statistics: verdicts per metric, drift, contract, failures, decision rule."""

import numpy as np
import pytest
from ansible.module_utils import abstats


def requests(rng, n, e2e, ttft=0.05, noise=0.02):
    out = []
    for _ in range(n):
        t = ttft * rng.normal(1, noise)
        e = e2e * rng.normal(1, noise)
        out.append({"ttft_s": t, "e2e_s": e, "decode_tps": 31 / (e - t), "error": None})
    return out


def cell(seed, base_e2e=1.0, cand_e2e=1.0, second_base_e2e=None, n=12):
    rng = np.random.default_rng(seed)
    return {"name": "4k", "baseline": [requests(rng, n, base_e2e), requests(rng, n, second_base_e2e or base_e2e)],
            "candidate": requests(rng, n, cand_e2e)}


def test_a_clear_improvement_is_better():
    result = abstats.cell_verdict(cell(1, cand_e2e=0.90))
    assert result["metrics"]["e2e_s"]["verdict"] == "better"
    assert result["metrics"]["e2e_s"]["delta"] == pytest.approx(-0.10, abs=0.02)
    # Outside the rule's metrics: reported with its delta, never tested (it is not in the family).
    assert result["metrics"]["decode_tps"]["verdict"] == "reported" and result["metrics"]["decode_tps"]["delta"] > 0


def test_a_clear_regression_is_worse_and_rejected():
    result = abstats.cell_verdict(cell(2, cand_e2e=1.10))
    assert result["metrics"]["e2e_s"]["verdict"] == "worse"
    assert abstats.decide([result])["decision"] == "reject"


def test_identical_arms_are_inconclusive():
    result = abstats.cell_verdict(cell(3))
    assert {m["verdict"] for m in result["metrics"].values()} == {"inconclusive", "reported"}
    assert abstats.decide([result])["decision"] == "inconclusive"


def test_baseline_drift_makes_the_cell_inconclusive():
    result = abstats.cell_verdict(cell(4, cand_e2e=0.90, second_base_e2e=1.10))
    assert result["baseline_drift"] > 0.05
    assert result["metrics"]["e2e_s"]["verdict"] == "inconclusive"
    assert any("drifted" in r for r in result["reasons"])


def test_contract_violation_makes_the_cell_ineligible_not_timed():
    data = cell(5, cand_e2e=0.8)
    data["contract_violations"] = [{"request": 3, "words": 33}]
    result = abstats.cell_verdict(data)
    assert result["eligible"] is False and result["verdict"] == "ineligible" and result["metrics"] == {}
    assert abstats.decide([result])["reasons"] == ["no eligible cell"]


def test_failures_are_counted_not_dropped():
    data = cell(6, cand_e2e=0.9)
    data["candidate"][0] = {"ttft_s": None, "e2e_s": None, "decode_tps": None, "error": "HTTP 500"}
    result = abstats.cell_verdict(data)
    assert result["failures"] == {"baseline": 0, "candidate": 1}
    assert result["metrics"]["e2e_s"]["candidate"]["n"] == 11


def test_summary_percentiles_only_where_n_allows():
    assert "p90" not in abstats.summarize(range(9)) and "p90" in abstats.summarize(range(10))
    assert "p99" in abstats.summarize(range(100))


def test_decision_acceptable_needs_one_better_and_none_worse():
    better = abstats.cell_verdict(cell(7, cand_e2e=0.9))
    same = abstats.cell_verdict(cell(8))
    assert abstats.decide([better, same])["decision"] == "acceptable"


def test_too_few_values_are_refused():
    with pytest.raises(ValueError, match="need at least 2 values per arm, got 1 and 3"):
        abstats.bootstrap_median_delta([1.0], [1.0, 2.0, 3.0])
