"""The fleet promotion's plan and its batch loop (serving_rollout/fleet_promotion.py). The steps (promote.yml,
bake.yml, rollback.yml through ansible-runner) are TEST DOUBLES here that answer per host; the lab runs the real ones
(tests/integration/test_fleet_promotion.py)."""

import json

import pytest
from test_gpu_ab_fixture import RUN as UNSEALED_RUN

from serving_rollout import fleet_promotion


def fleet(tmp_path, hosts, allowed):
    """An evidence folder with a fleet run of `hosts`; why_not answers from `allowed` (a TEST DOUBLE of the trust)."""
    folder = tmp_path / "fleet-R1"
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps({"hosts": [{"host": h} for h in hosts]}))
    return lambda evidence, host, run_id: None if host in allowed else f"{host} has no acceptable run"


def test_the_plan_puts_the_canary_first_then_batches_and_skips_each_host_without_its_own_run(tmp_path, monkeypatch):
    monkeypatch.setattr(fleet_promotion, "why_not", fleet(tmp_path, ["a", "b", "c", "d", "e"], {"a", "b", "d", "e"}))
    plan = fleet_promotion.plan_of(tmp_path, "R1", canary=1, batch_size=2, bake_s=60)
    assert plan["batches"] == [["a"], ["b", "d"], ["e"]] and plan["skipped"] == {"c": "c has no acceptable run"}
    again = fleet_promotion.plan_of(tmp_path, "R1", canary=1, batch_size=2, bake_s=60)
    assert again["plan_id"] == plan["plan_id"]  # the same plan, the same id: what an approval names
    assert fleet_promotion.plan_of(tmp_path, "R1", canary=1, batch_size=2, bake_s=120)["plan_id"] != plan["plan_id"]
    lines = fleet_promotion.plan_lines(plan)
    assert lines[:4] == [f"fleet promotion of run R1, plan {plan['plan_id']}:",
                         "  batch 1 (canary): a; then a 60 s bake", "  batch 2 (batch): b, d; then a 60 s bake",
                         "  batch 3 (batch): e; then a 60 s bake"]
    assert lines[4] == "  skipped c: c has no acceptable run" and lines[5].startswith("  rule: a host is promoted only")


def test_a_host_is_promotable_only_on_its_own_sealed_acceptable_run(tmp_path):
    assert fleet_promotion.why_not(tmp_path, "h1", "R1").startswith("no run R1 of its own")
    evidence, host = UNSEALED_RUN.parent.parent, UNSEALED_RUN.parent.name
    why = fleet_promotion.why_not(evidence, host, UNSEALED_RUN.name.removeprefix("rollout-"))
    assert why.startswith("its run's evidence is not trusted: manifest.hmac: missing"), why


def test_a_missing_fleet_run_or_bad_sizes_are_refused_by_value(tmp_path):
    with pytest.raises(fleet_promotion.PromotionError, match="no fleet run R9: .*fleet-R9/summary.json is missing"):
        fleet_promotion.plan_of(tmp_path, "R9")
    with pytest.raises(fleet_promotion.PromotionError, match="got 0, 1 and 60"):
        fleet_promotion.plan_of(tmp_path, "R1", canary=0, bake_s=60)


class Steps:  # TEST DOUBLES of promote.yml, bake.yml and rollback.yml per host
    def __init__(self, promote=None, bake=None):
        self.promote_answers, self.bake_answers, self.calls = promote or {}, bake or {}, []

    def step(self, name, answers):
        def run(hosts):
            self.calls.append((name, list(hosts)))
            return {h: answers.get(h, {"outcome": "ok"}) for h in hosts}
        return run

    def run(self, plan, tmp_path, approved=None):
        return fleet_promotion.run(plan, tmp_path, approved or plan["plan_id"], self.step("promote",
                                   self.promote_answers), self.step("bake", self.bake_answers),
                                   self.step("rollback", {}), say=lambda line: None)


def plan_of(tmp_path, monkeypatch, hosts=("a", "b", "c", "d")):
    monkeypatch.setattr(fleet_promotion, "why_not", fleet(tmp_path, list(hosts), set(hosts)))
    return fleet_promotion.plan_of(tmp_path, "R1", canary=1, batch_size=2, bake_s=5)


def test_every_batch_baked_before_the_next_is_promoted(tmp_path, monkeypatch):
    steps = Steps()
    state = steps.run(plan_of(tmp_path, monkeypatch), tmp_path)
    assert steps.calls == [("promote", ["a"]), ("bake", ["a"]), ("promote", ["b", "c"]), ("bake", ["b", "c"]),
                           ("promote", ["d"]), ("bake", ["d"])]
    assert state["ended"] == "every batch passed its bake" and state["promoted_left"] == ["a", "b", "c", "d"]
    saved = json.loads((tmp_path / "fleet-promotion-R1" / "state.json").read_text())
    assert {h: s["state"] for h, s in saved["hosts"].items()} == dict.fromkeys("abcd", "passed")


def test_a_failed_bake_rolls_its_whole_batch_back_and_no_later_batch_is_touched(tmp_path, monkeypatch):
    steps = Steps(bake={"c": {"outcome": "failed", "why": "bake failed: the unit restarted: NRestarts 0 -> 1"}})
    state = steps.run(plan_of(tmp_path, monkeypatch), tmp_path)
    assert steps.calls[-1] == ("rollback", ["b", "c"]) and ("promote", ["d"]) not in steps.calls
    hosts = {h: s["state"] for h, s in state["hosts"].items()}
    assert hosts == {"a": "passed", "b": "rolled back", "c": "rolled back", "d": "not started"}
    assert state["hosts"]["c"]["why"] == "bake failed: the unit restarted: NRestarts 0 -> 1"
    assert state["ended"] == "stopped at batch 2" and state["promoted_left"] == ["a"]
    report = (tmp_path / "fleet-promotion-R1" / "report.md").read_text()
    assert "bin/serving-rollout rollback -i INVENTORY -e rollout_hosts=a" in report


def test_a_host_promote_refuses_is_left_unchanged_and_never_baked_or_rolled_back(tmp_path, monkeypatch):
    why = "refused before any change: promotion of run R1: the original on the host is not the one that run measured"
    steps = Steps(promote={"b": {"outcome": "refused", "why": why}})
    state = steps.run(plan_of(tmp_path, monkeypatch), tmp_path)
    assert ("bake", ["c"]) in steps.calls and not any(name == "rollback" for name, _ in steps.calls)
    assert state["hosts"]["b"] == {"state": "refused", "batch": 2, "why": why}


def test_an_approval_of_another_plan_is_refused_before_any_step(tmp_path, monkeypatch):
    steps = Steps()
    with pytest.raises(fleet_promotion.PromotionError, match="the approval names plan 'abc', and the plan now is"):
        steps.run(plan_of(tmp_path, monkeypatch), tmp_path, approved="abc")
    assert steps.calls == [] and not (tmp_path / "fleet-promotion-R1").exists()
