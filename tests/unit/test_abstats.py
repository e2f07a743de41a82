"""A/B statistics: verdicts per metric, drift, contract, failures, decision rule."""

import numpy as np
import pytest
from scipy import stats

from serving_rollout.play import abstats


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


FAILED = {"ttft_s": None, "e2e_s": None, "decode_tps": None, "error": "connection refused"}


def test_a_candidate_that_fails_requests_is_rejected_even_when_what_answered_was_faster():
    """The field case: the candidate crashed at its third request; 3 answers were faster, 5 failed,
    and the second cell failed every request. Never acceptable."""
    fast = cell(11, cand_e2e=0.8, n=8)
    fast["candidate"][3:] = [FAILED] * 5
    dead = cell(12, n=8)
    dead["candidate"] = [FAILED] * 8
    verdicts = [abstats.cell_verdict(fast), abstats.cell_verdict(dead)]
    decision = abstats.decide(verdicts)
    assert decision["decision"] == "reject", decision
    assert decision["reasons"] == ["4k candidate failed 5 of 8 request(s) (limit 0)",
                                   "4k candidate failed 8 of 8 request(s) (limit 0)"]
    # a limit the operator allows: one failure is tolerated, a cell it cannot time is not judged
    one = cell(13, cand_e2e=0.9)
    one["candidate"][0] = FAILED
    assert abstats.decide([abstats.cell_verdict(one)], max_failed=1)["decision"] == "acceptable"
    assert abstats.decide(verdicts, max_failed=8)["decision"] == "inconclusive"


def test_a_cell_an_arm_could_not_be_timed_in_makes_the_decision_inconclusive_at_best():
    better = abstats.cell_verdict(cell(14, cand_e2e=0.9))
    blind = cell(15)
    blind["baseline"] = [[FAILED] * 12, [FAILED] * 12]
    decision = abstats.decide([better, abstats.cell_verdict(blind)])
    assert decision["decision"] == "inconclusive"
    assert decision["reasons"][0] == "4k could not be timed: too few successful requests in an arm"


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


DESIGN = abstats.sequential_design(12, 4, 8)  # the default cell: 12 at most, chunks of 4, first bracket 8


def test_a_sequential_cell_looks_after_every_chunk_and_last_against_both_brackets():
    assert DESIGN == ((4, 8), (8, 8), (12, 12))
    assert abstats.sequential_design(10, 4, 3) == ((4, 3), (8, 3), (10, 6))  # second bracket: one chunk at most
    with pytest.raises(ValueError, match="requests, chunk and bracket >= 1, got 12, 0, 8"):
        abstats.sequential_design(12, 0, 8)


def crossing_chance(design, nominal, draws, seed, distribution):
    """The chance that one test crosses `nominal` at any look under identical arms, by an independent
    simulation (another seed, another latency distribution than the boundary's uniform ranks)."""
    rng = np.random.default_rng(seed)
    candidate = distribution(rng, (draws, design[-1][0]))
    baseline = distribution(rng, (draws, design[-1][1]))
    crossed = np.zeros(draws, dtype=bool)
    for n_candidate, n_baseline in design:
        p = stats.mannwhitneyu(candidate[:, :n_candidate], baseline[:, :n_baseline], axis=1, alternative="less",
                               method=abstats.mann_whitney_method(n_candidate, n_baseline)).pvalue
        crossed |= p <= nominal
    return crossed.mean()


@pytest.mark.parametrize("level", [0.025 / 4, 0.025])
def test_the_sequential_boundary_keeps_a_test_within_its_level_over_all_looks(level):
    nominal = abstats.look_boundary(DESIGN, level)
    assert nominal >= level / 3  # never below Bonferroni over the three looks
    # Latencies skewed and heavy-tailed (lognormal): ranks alone decide, so the chance holds for them too.
    chance = crossing_chance(DESIGN, nominal, 100_000, 7, lambda rng, size: rng.lognormal(0, 1, size))
    assert chance <= level + 3 * np.sqrt(level / 100_000), (nominal, chance)
    assert abstats.look_boundary(((12, 24),), level) == level  # one look: the level itself


@pytest.mark.parametrize("n_candidate, n_baseline", [(4, 8), (12, 12), (60, 44)])  # exact, exact, asymptotic
def test_the_boundarys_p_value_of_each_u_is_scipys(n_candidate, n_baseline):
    rng = np.random.default_rng(n_candidate)
    table = abstats._p_by_u(n_candidate, n_baseline)
    for _ in range(20):
        candidate, baseline = rng.random(n_candidate), rng.random(n_baseline)
        u = int((candidate[:, None] > baseline[None, :]).sum())
        assert table[u] == pytest.approx(abstats.one_sided_p(list(baseline), list(candidate))["better"], rel=1e-9)


def test_holm_with_a_boundary_uses_each_steps_level():
    levels = {3: 0.01, 2: 0.02, 1: 0.04}
    assert abstats.holm({"a": 0.005, "b": 0.015, "c": 0.05}, levels.get) == {"a", "b"}


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
    look = abstats.sequential_look(baseline, large, 1, DESIGN, 0.05, cells=2)
    assert look["stop"] and look["metrics"]["e2e_s"] == "better" and look["alpha"] == pytest.approx(0.025)
    assert look["boundary"] == abstats.look_boundary(DESIGN, 0.025 / 4)  # Holm's first step over 4 tests
    same = requests(rng, 8, 1.0)
    assert not abstats.sequential_look(baseline, same, 2, DESIGN, 0.05, cells=2)["stop"]
    assert not abstats.sequential_look(baseline, large, 3, DESIGN, 0.05, cells=2)["stop"]  # the last look decides
    with pytest.raises(ValueError, match="look must be within 1..3, got 4"):
        abstats.sequential_look(baseline, large, 4, DESIGN, 0.05, cells=2)


def test_a_cell_stops_on_one_better_metric_only_once_the_other_guard_is_shown_no_worse():
    def rows(e2e, ttft):
        return [{"ttft_s": t, "e2e_s": e, "error": None} for e, t in zip(e2e, ttft, strict=True)]

    baseline = rows([0.99, 1.0, 1.01, 1.0, 0.995, 1.005, 0.998, 1.002],
                    [0.0499, 0.0500, 0.0501, 0.0500, 0.04995, 0.05005, 0.04998, 0.05002])
    faster = [0.80, 0.81, 0.79, 0.80]  # E2E 20 % faster: better at look 1 of 3
    # TTFT unchanged and tight: shown no worse than +2 %, though not better -> the cell stops
    same_ttft = abstats.sequential_look(baseline, rows(faster, [0.0500, 0.0501, 0.0499, 0.0500]), 1, DESIGN, 0.05, 1)
    assert same_ttft["metrics"]["e2e_s"] == "better" and same_ttft["metrics"]["ttft_s"] == "inconclusive"
    assert same_ttft["noninferior_p"]["ttft_s"] <= 0.05 and same_ttft["stop"] is True
    # TTFT spread around +2 %: neither worse nor shown no worse -> the cell goes on to test it with more
    unsure_ttft = abstats.sequential_look(baseline, rows(faster, [0.045, 0.049, 0.053, 0.057]), 1, DESIGN, 0.05, 1)
    assert unsure_ttft["metrics"]["e2e_s"] == "better" and unsure_ttft["metrics"]["ttft_s"] == "inconclusive"
    assert unsure_ttft["noninferior_p"]["ttft_s"] > 0.05 and unsure_ttft["stop"] is False


def test_non_inferiority_points_the_right_way_for_latency_and_rate():
    base = [1.0, 1.01, 0.99, 1.0, 1.005, 0.995]
    assert abstats.noninferior_p(base, [1.001, 0.999, 1.0, 1.002], 0.02) < 0.05  # same latency: no worse by 2 %
    assert abstats.noninferior_p(base, [1.05, 1.06, 1.04, 1.05], 0.02) > 0.95  # 5 % slower: worse by more than 2 %
    assert abstats.noninferior_p(base, [1.0, 0.999, 1.001, 1.0], 0.02, lower_is_better=False) < 0.05
    assert abstats.noninferior_p(base, [0.95, 0.94, 0.96, 0.95], 0.02, lower_is_better=False) > 0.95


def test_a_cell_judged_at_its_stopping_look_against_the_first_bracket():
    data = cell(12, cand_e2e=0.8)
    data["candidate"] = data["candidate"][:4]
    data["sequential"] = {"look": 1, "looks": 3, "design": DESIGN}
    result = abstats.cell_verdict(data, cells=2)
    assert result["look"]["against"] == "first bracket" and result["alpha"] == pytest.approx(0.025)
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


def test_the_ab_verdict_action_judges_in_process_and_names_a_bad_cell():
    """action_plugins/ab_verdict.py on the controller: its arguments checked and defaulted by its spec."""
    from types import SimpleNamespace

    from ansible.errors import AnsibleActionFail
    from test_host_steps import action_class

    def run(args):
        task = SimpleNamespace(args=args, async_val=0, check_mode=False, action="ab_verdict")
        connection = SimpleNamespace(_shell=SimpleNamespace(tmpdir="/tmp/unused"))
        return action_class("ab_verdict")(task, connection, None, None, None).run(task_vars={})

    def arms(matched):  # the arms' cells as latency_arm returns them
        return {"baseline-1": [{"name": matched["name"], "requests": matched["baseline"][0],
                                "contract_violations": []}],
                "candidate": [{"name": matched["name"], "requests": matched["candidate"], "contract_violations": []}],
                "baseline-2": [{"name": matched["name"], "requests": matched["baseline"][1],
                                "contract_violations": []}]}

    result = run({"arms": arms(cell(31, cand_e2e=0.90))})
    assert result["changed"] is False and result["decision"]["decision"] == "acceptable"
    assert result["cells"][0]["metrics"]["e2e_s"]["verdict"] == "better"
    with pytest.raises(AnsibleActionFail, match=r"cell '4k' is missing from arms \['candidate'\]"):
        run({"arms": {**arms(cell(33)), "candidate": [{"name": "other", "requests": []}]}})
    with pytest.raises(AnsibleActionFail, match=r"missing \['baseline-2'\]"):
        run({"arms": {k: v for k, v in arms(cell(34)).items() if k != "baseline-2"}})
    with pytest.raises(AnsibleActionFail, match="alpha.*given: {'alpha': 'not a number'}"):
        run({"arms": arms(cell(32)), "alpha": "not a number"})


UPGRADE_RULE = {"guard": ["ttft_s", "e2e_s"], "need_better": [], "noninferior_margin": 0.05}


def test_an_upgrade_no_worse_is_acceptable_without_any_cell_better():
    # identical arms: never better, but shown within 5 % on both guard metrics (non-inferiority)
    same = abstats.cell_verdict(cell(11), rule=UPGRADE_RULE, cells=2)
    other = abstats.cell_verdict(cell(12, cand_e2e=1.01), rule=UPGRADE_RULE, cells=2)
    assert same["metrics"]["e2e_s"]["noninferior"] and same["metrics"]["ttft_s"]["p_noninferior"] < 0.025
    decision = abstats.decide([same, other], UPGRADE_RULE)
    assert decision["decision"] == "acceptable", decision
    assert any("4k e2e_s shown at most 5% worse" in reason for reason in decision["reasons"]), decision
    assert "intersection" not in decision["method"] and "noninferior_margin worse" in decision["method"]
    # the flag rule on the same cells: no cell better, so never acceptable
    assert abstats.decide([abstats.cell_verdict(cell(11)), abstats.cell_verdict(cell(12, cand_e2e=1.01))])[
        "decision"] == "inconclusive"


def test_an_upgrade_not_shown_within_its_margin_is_inconclusive_and_a_worse_one_rejected():
    # 1.5 % slower: below min_effect, so never worse; beyond a 1 % margin, so never shown no worse
    tight = {**UPGRADE_RULE, "noninferior_margin": 0.01}
    slower = abstats.cell_verdict(cell(13, cand_e2e=1.015), rule=tight)
    decision = abstats.decide([slower], tight)
    assert decision["decision"] == "inconclusive" and "4k e2e_s not shown at most 1% worse" in decision["reasons"]
    worse = abstats.cell_verdict(cell(14, cand_e2e=1.10), rule=UPGRADE_RULE)
    assert abstats.decide([worse], UPGRADE_RULE)["decision"] == "reject"
