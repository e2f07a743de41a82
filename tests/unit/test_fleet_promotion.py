"""The fleet promotion's plan and its batch loop (serving_rollout/fleet_promotion.py). The steps (promote.yml,
bake.yml, rollback.yml through ansible-runner) are TEST DOUBLES here that answer per host; the lab runs the real ones
(tests/integration/test_fleet_promotion.py)."""

import json

import pytest
from test_gpu_ab_fixture import RUN as UNSEALED_RUN

from serving_rollout import evidence as evidence_tool
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
    assert lines[4] == "  skipped c: c has no acceptable run" and lines[6].startswith("  rule: a host is promoted only")
    assert lines[5] == ("  bake's metric rule: min_effect 2%, alpha 0.05, error rate rise at most 1% points, at least "
                        "20 finished requests in each window")


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


def record(e2e_s=0.25, requests=40, errors=0):
    """A bake record as bake.yml keeps it without a Prometheus: the engine's readings at the window's two ends, its
    requests spread around e2e_s (TEST DOUBLE numbers, shaped as module_utils/engine_metrics.reading gives them)."""
    bounds = ["0.1", "0.2", "0.4", "0.6", "0.8", "+Inf"]
    spread = [e2e_s * f for f in (0.7, 0.85, 1.0, 1.15, 1.3)]
    per_request = [next(b for b in bounds if b == "+Inf" or v <= float(b)) for v in spread] * (requests // 5)
    buckets = {b: float(sum(1 for r in per_request if r == "+Inf" or (b == "+Inf" or float(r) <= float(b))))
               for b in bounds}
    zero = {b: 0.0 for b in bounds}
    start = {"at": 100.0, "ok": True, "series": {"ttft": zero, "e2e": zero, "requests": 0.0, "errors": 0.0}}
    end = {"at": 160.0, "ok": True, "series": {"ttft": buckets, "e2e": buckets, "requests": float(requests + errors),
                                               "errors": float(errors)}}
    return {"engine": "sglang", "prometheus": {"url": "", "labels": {}},
            "bake": {"window": {"start": 100.0, "end": 160.0}, "metrics": {"start": start, "end": end}}}


class Steps:  # TEST DOUBLES of promote.yml, bake.yml and rollback.yml per host
    def __init__(self, promote=None, bake=None, promoted=None):
        self.promote_answers, self.bake_answers, self.calls = promote or {}, bake or {}, []
        self.promoted = promoted or {}  # host: the promoted unit's bake record (default: like its original's)

    def step(self, name, answers):
        def run(hosts):
            self.calls.append((name, list(hosts)))
            return {h: answers.get(h, {"outcome": "ok"}) for h in hosts}
        return run

    def bake(self, hosts, phase):
        self.calls.append(("bake" if phase == "promoted" else "watch", list(hosts)))
        answers = self.bake_answers if phase == "promoted" else {}
        out = {}
        for host in hosts:  # each record kept as bake.yml keeps it, in a file the state can name
            kept = self.promoted.get(host, record()) if phase == "promoted" else record()
            path = self.folder / f"{host}-{phase}-{len(self.calls)}.json"
            path.write_text(json.dumps(kept))
            out[host] = {**answers.get(host, {"outcome": "ok"}), "record": kept, "record_path": str(path)}
        return out

    def run(self, plan, tmp_path, approved=None):
        self.folder = tmp_path
        return fleet_promotion.run(plan, tmp_path, approved or plan["plan_id"], self.step("promote",
                                   self.promote_answers), self.bake, self.step("rollback", {}),
                                   say=lambda line: None)


def plan_of(tmp_path, monkeypatch, hosts=("a", "b", "c", "d")):
    monkeypatch.setattr(fleet_promotion, "why_not", fleet(tmp_path, list(hosts), set(hosts)))
    monkeypatch.setenv(evidence_tool.KEY_ENV, str(tmp_path / "evidence.key"))  # the seal's key, the test's own
    return fleet_promotion.plan_of(tmp_path, "R1", canary=1, batch_size=2, bake_s=5)


def test_every_batch_baked_before_the_next_is_promoted(tmp_path, monkeypatch):
    steps = Steps()
    state = steps.run(plan_of(tmp_path, monkeypatch), tmp_path)
    assert steps.calls == [("watch", ["a"]), ("promote", ["a"]), ("bake", ["a"]), ("watch", ["b", "c"]),
                           ("promote", ["b", "c"]), ("bake", ["b", "c"]), ("watch", ["d"]), ("promote", ["d"]),
                           ("bake", ["d"])]
    assert state["ended"] == "every batch passed its bake" and state["promoted_left"] == ["a", "b", "c", "d"]
    saved = json.loads((tmp_path / "fleet-promotion-R1" / "state.json").read_text())
    assert {h: s["state"] for h, s in saved["hosts"].items()} == dict.fromkeys("abcd", "passed")
    assert saved["hosts"]["a"]["metrics"]["verdict"] == "pass" and saved["hosts"]["a"]["metrics"]["judged"][0] \
        .startswith("TTFT p50 ")


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
    assert {k: v for k, v in state["hosts"]["b"].items() if k != "original_window"} == {
        "state": "refused", "batch": 2, "why": why}


def test_an_approval_of_another_plan_is_refused_before_any_step(tmp_path, monkeypatch):
    steps = Steps()
    with pytest.raises(fleet_promotion.PromotionError, match="the approval names plan 'abc', and the plan now is"):
        steps.run(plan_of(tmp_path, monkeypatch), tmp_path, approved="abc")
    assert steps.calls == [] and not (tmp_path / "fleet-promotion-R1").exists()


def test_a_promoted_engine_slower_than_its_original_fails_the_bake_by_its_metrics_and_is_rolled_back(tmp_path,
                                                                                                     monkeypatch):
    steps = Steps(promoted={"c": record(e2e_s=0.45)})
    state = steps.run(plan_of(tmp_path, monkeypatch), tmp_path)
    assert steps.calls[-1] == ("rollback", ["b", "c"]) and state["hosts"]["b"]["state"] == "rolled back"
    why = state["hosts"]["c"]["why"]
    assert why.startswith("bake failed: TTFT p50 ") and "E2E p50 " in why and "worse by at least 2%" in why, why
    assert state["hosts"]["b"]["metrics"]["verdict"] == "pass"  # its batch goes back with it all the same


def test_an_error_rate_rise_or_a_window_without_its_readings_fails_the_bake_by_name(tmp_path, monkeypatch):
    unread = record()
    unread["bake"]["metrics"]["end"] = {"at": 160.0, "ok": False, "error": "GET /metrics: connection refused"}
    steps = Steps(promoted={"b": record(errors=4), "c": unread})
    state = steps.run(plan_of(tmp_path, monkeypatch), tmp_path)
    assert "the error rate rose from 0.00% to 9.09%" in state["hosts"]["b"]["why"]
    assert "the window the promoted unit's cannot be read: GET /metrics: connection refused" in \
        state["hosts"]["c"]["why"]


def test_an_original_that_fails_its_watch_stops_the_promotion_before_its_batch_is_touched(tmp_path, monkeypatch):
    steps = Steps()
    original_bake = steps.bake

    def bake(hosts, phase):
        answers = original_bake(hosts, phase)
        if phase == "original" and "c" in hosts:
            answers["c"] = {"outcome": "failed", "why": "bake of the original unit failed: the unit restarted"}
        return answers

    steps.bake = bake
    state = steps.run(plan_of(tmp_path, monkeypatch), tmp_path)
    assert ("promote", ["b", "c"]) not in steps.calls and state["ended"] == "stopped at batch 2"
    assert state["hosts"]["c"]["state"] == "not promoted: its original failed its watch"
    assert state["hosts"]["b"]["state"] == "not started" and state["promoted_left"] == ["a"]


def test_an_interrupted_promotion_resumes_where_it_stopped_against_the_originals_windows_it_kept(tmp_path, monkeypatch):
    plan = plan_of(tmp_path, monkeypatch)

    class Lost(Exception):
        """The controller lost while batch 2's promoted units bake."""

    first = Steps()
    baked = first.bake

    def bake(hosts, phase):
        if phase == "promoted" and hosts == ["b", "c"]:
            raise Lost
        return baked(hosts, phase)

    first.bake = bake
    with pytest.raises(Lost):
        first.run(plan, tmp_path)
    left = json.loads((tmp_path / "fleet-promotion-R1" / "state.json").read_text())
    assert left["ended"] == "running" and {h: s["state"] for h, s in left["hosts"].items()} == {
        "a": "passed", "b": "baking", "c": "baking", "d": "planned"}
    again = Steps()
    state = again.run(plan, tmp_path)
    # batch 1 stays as it passed; batch 2 goes on from its promotion (promote.yml changes nothing where it is in
    # place), judged against the originals' windows watched before the interruption; batch 3 from the start
    assert again.calls == [("promote", ["b", "c"]), ("bake", ["b", "c"]), ("watch", ["d"]), ("promote", ["d"]),
                           ("bake", ["d"])]
    assert state["ended"] == "every batch passed its bake" and state["hosts"]["b"]["metrics"]["verdict"] == "pass"
    assert state["hosts"]["b"]["original_window"] == left["hosts"]["b"]["original_window"]


def test_an_interrupted_promotion_of_another_plan_is_refused_by_name_before_any_step(tmp_path, monkeypatch):
    plan = plan_of(tmp_path, monkeypatch)
    fleet_promotion.save(tmp_path / "fleet-promotion-R1", {"schema": fleet_promotion.SCHEMA, "run_id": "R1",
                                                           "plan_id": "other", "ended": "running",
                                                           "hosts": {"a": {"state": "baking", "batch": 1}}})
    steps = Steps()
    with pytest.raises(fleet_promotion.PromotionError, match="an interrupted promotion of plan other is in .*"
                                                             r"\(a baking\): resume it with --approve other"):
        steps.run(plan, tmp_path)
    assert steps.calls == []


def test_a_finished_promotion_is_sealed_and_kept_whole_when_a_new_approval_starts_again(tmp_path, monkeypatch):
    plan = plan_of(tmp_path, monkeypatch)
    Steps(promoted={"c": record(e2e_s=0.45)}).run(plan, tmp_path)
    folder = tmp_path / "fleet-promotion-R1"
    kept = json.loads((folder / "hosts" / "c.json").read_text())  # the bake's series and verdict, per host
    assert kept["judgement"]["verdict"] == "fail" and kept["promoted_bake"]["bake"]["metrics"]["end"]["ok"]
    assert evidence_tool.verify(folder, sealed=True) == []
    (folder / "hosts" / "c.json").write_text(json.dumps({**kept, "judgement": {"verdict": "pass"}}))
    assert evidence_tool.verify(folder, sealed=True) == [("hosts/c.json", "changed")]
    again = Steps()
    again.run(plan, tmp_path)  # ended: a new approval of the plan starts from the first batch's watch
    assert again.calls[:2] == [("watch", ["a"]), ("promote", ["a"])]
    assert json.loads((tmp_path / "fleet-promotion-R1.1" / "hosts" / "c.json").read_text())["judgement"] == {
        "verdict": "pass"}  # the earlier record set aside whole, never overwritten
    assert evidence_tool.verify(folder, sealed=True) == []
