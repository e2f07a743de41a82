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


def test_holm_steps_down_and_stops_at_the_first_kept_hypothesis():
    assert abstats.holm({"a": 0.001, "b": 0.02, "c": 0.03}, 0.05) == {"a", "b", "c"}  # .05/3, .05/2, .05
    assert abstats.holm({"a": 0.001, "b": 0.03, "c": 0.04}, 0.05) == {"a"}  # b > .05/2: stop there
    assert abstats.holm({}, 0.05) == set()


def test_alpha_is_shared_equally_over_the_looks():
    assert [abstats.look_alpha(k, 3, 0.025) for k in (1, 2, 3)] == pytest.approx([0.025 / 3] * 3)
    with pytest.raises(ValueError, match="look must be within 1..3, got 4"):
        abstats.look_alpha(4, 3, 0.05)


def test_one_sided_p_values_point_the_right_way():
    fast, slow = [1.0, 1.1, 1.2, 1.3, 1.4, 1.5], [2.0, 2.1, 2.2, 2.3, 2.4, 2.5]
    latency = abstats.one_sided_p(slow, fast, lower_is_better=True)
    assert latency["better"] < 0.01 < 0.99 < latency["worse"]
    rate = abstats.one_sided_p(slow, fast, lower_is_better=False)  # a lower rate is worse
    assert rate["worse"] < 0.01 and rate["better"] > 0.99


def test_a_sequential_cell_stops_early_on_a_large_effect_and_runs_on_an_identical_one():
    rng = np.random.default_rng(11)
    baseline = requests(rng, 12, 1.0)
    large = requests(rng, 4, 0.8, ttft=0.04)  # 20 % faster, far outside 2 % noise: clear at the first look
    look = abstats.sequential_look(baseline, large, 1, 3, 0.05, cells=2)
    assert look["stop"] and look["metrics"]["e2e_s"] == "better" and look["alpha"] == pytest.approx(0.025 / 3)
    same = requests(rng, 8, 1.0)
    assert not abstats.sequential_look(baseline, same, 2, 3, 0.05, cells=2)["stop"]
    assert not abstats.sequential_look(baseline, large, 3, 3, 0.05, cells=2)["stop"]  # the last look decides


def test_a_cell_judged_at_its_stopping_look_against_the_first_bracket():
    data = cell(12, cand_e2e=0.8)
    data["candidate"] = data["candidate"][:4]
    data["sequential"] = {"look": 1, "looks": 3}
    result = abstats.cell_verdict(data, cells=2)
    assert result["look"]["against"] == "first bracket" and result["alpha"] == pytest.approx(0.025 / 3)
    assert result["metrics"]["e2e_s"]["verdict"] == "better"


@pytest.mark.parametrize("conditions, disturbed, reason", [
    ({"baseline": {"cpu_busy": 0.5}, "candidate": {"cpu_busy": 0.95}}, [], "host CPU busy 50% (baseline) vs 95%"),
    ({"baseline": {"clock_events": []}, "candidate": {"clock_events": ["SwThermalSlowdown"]}}, [],
     "clock events [] vs ['SwThermalSlowdown']"),
    ({"baseline": {"gpu_processes": 2}, "candidate": {"gpu_processes": 3}}, [], "processes on the GPUs 2 vs 3"),
    ({}, ["candidate: host CPU busy 50% (baseline) vs 97% (candidate)"], "a chunk stayed disturbed"),
])
def test_interference_makes_a_cell_inconclusive_never_better_or_worse(conditions, disturbed, reason):
    data = cell(13, cand_e2e=1.2)  # what interference looks like: the candidate slower
    data.update(conditions=conditions, disturbed=disturbed)
    result = abstats.cell_verdict(data)
    assert result["metrics"]["e2e_s"]["verdict"] == "inconclusive"
    assert any(reason in r for r in result["reasons"]), result["reasons"]
    assert abstats.decide([result])["decision"] == "inconclusive"


def test_the_decision_states_its_error_control():
    assert "Holm" in abstats.decide([abstats.cell_verdict(cell(14))])["method"]
