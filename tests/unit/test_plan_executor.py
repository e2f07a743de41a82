"""The plan executor's logic with a stand-in for the rollout runs: order, refusals, stop and
skip policies, resume after a controller kill, starting over when the original changed."""

import json

import pytest

from serving_rollout import plan as executor


def write_plan(tmp_path, ids, controls=None):
    plan = {"schema": "anvil-serving.followup-candidate-plan/v1",
            "ordered_candidates": [{"id": i, "change": f"change {i}", "gate": f"gate {i}",
                                    **({"control": controls[i]} if controls and i in controls else {})}
                                   for i in ids]}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    return path


class Runs:
    """Stands in for candidate.yml runs: each candidate's outcome on one host, in call order."""

    def __init__(self, outcomes, kill_at=None):
        self.outcomes, self.kill_at, self.calls, self.rollbacks = outcomes, kill_at, [], 0

    def run(self, cid, run_id, extravars):
        self.calls.append((cid, extravars))
        if cid == self.kill_at:
            self.kill_at = None
            raise KeyboardInterrupt("controller killed")
        return [{"host": "h1", "outcome": self.outcomes[cid], "duration_s": 30.0,
                 "verdict": "acceptable" if self.outcomes[cid] == "acceptable" else "reject"}]

    def rollback(self):
        self.rollbacks += 1


def run(tmp_path, path, runs, originals=None, policy="stop"):
    return executor.run_plan(path, tmp_path / "ev", lambda: originals or {"h1": "a" * 64}, runs.run, runs.rollback,
                             policy=policy, say=lambda line: None)


@pytest.mark.parametrize("ids, controls, problem", [
    (["p2p", "nvlink-magic"], None, "$.ordered_candidates[1].id: 'nvlink-magic' is not in the controls catalog"),
    (["scheduler-and-speculation", "p2p"], {"scheduler-and-speculation": {"chunked_prefill_size": 4096}},
     "$.ordered_candidates[0]: scheduler-and-speculation needs a transport candidate"),
    (["p2p", "scheduler-and-speculation"], None,
     '$.ordered_candidates[1]: scheduler-and-speculation needs its setting: add "control" to the entry with exactly '
     'one of {"chunked_prefill_size": N} or {"speculative": {"--speculative-*": value}}; got no setting'),
    (["p2p", "p2p"], None, "$.ordered_candidates[1].id: duplicate id 'p2p'"),
])
def test_plans_are_refused_before_any_change_naming_why(tmp_path, ids, controls, problem):
    runs = Runs({})
    with pytest.raises(executor.PlanError) as error:
        run(tmp_path, write_plan(tmp_path, ids, controls), runs)
    assert problem in str(error.value) and runs.calls == []


def test_stops_at_the_first_candidate_that_does_not_pass(tmp_path):
    runs = Runs({"p2p": "acceptable", "custom-all-reduce": "not acceptable", "cumem": "acceptable"})
    doc = run(tmp_path, write_plan(tmp_path, ["p2p", "custom-all-reduce", "cumem"]), runs)
    assert [c for c, _ in runs.calls] == ["p2p", "custom-all-reduce"]
    assert [(c["id"], c["status"], c.get("outcome")) for c in doc["candidates"]] == [
        ("p2p", "decided", "acceptable"), ("custom-all-reduce", "decided", "not acceptable"),
        ("cumem", "not run", None)]
    assert doc["recommended_promotion_order"] == ["p2p"]
    # Each candidate against the original, never stacked: only its own id goes to the run.
    assert runs.calls[1][1]["serving_recipe_candidate_id"] == "custom-all-reduce"
    folder = tmp_path / "ev" / next(p.name for p in (tmp_path / "ev").iterdir())
    assert "Recommended promotion order: p2p" in (folder / "report.md").read_text()


def test_a_rerun_skips_decided_candidates_and_a_killed_one_is_rolled_back_then_run_again(tmp_path):
    path = write_plan(tmp_path, ["p2p", "cumem", "custom-all-reduce"])
    runs = Runs({"p2p": "acceptable", "cumem": "acceptable", "custom-all-reduce": "acceptable"}, kill_at="cumem")
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, path, runs)
    doc = run(tmp_path, path, runs)
    assert [c for c, _ in runs.calls] == ["p2p", "cumem", "cumem", "custom-all-reduce"]
    assert runs.rollbacks == 1
    assert doc["recommended_promotion_order"] == ["p2p", "cumem", "custom-all-reduce"]
    assert any("cumem interrupted; rolled back" in h["event"] for h in doc["history"])
    again = run(tmp_path, path, runs)  # everything decided for this original: nothing runs
    assert len(runs.calls) == 4 and again["recommended_promotion_order"] == doc["recommended_promotion_order"]


def test_a_changed_original_starts_the_plan_over(tmp_path):
    path = write_plan(tmp_path, ["p2p", "cumem"])
    runs = Runs({"p2p": "acceptable", "cumem": "acceptable"})
    run(tmp_path, path, runs)
    doc = run(tmp_path, path, runs, originals={"h1": "b" * 64})
    assert [c for c, _ in runs.calls] == ["p2p", "cumem", "p2p", "cumem"]
    assert doc["originals"] == {"h1": "b" * 64}
    assert "original changed on h1: started over" in doc["history"][0]["event"]


def test_skip_dependents_runs_what_does_not_depend_on_the_failure(tmp_path):
    controls = {"scheduler-and-speculation": {"chunked_prefill_size": 8192}}
    path = write_plan(tmp_path, ["p2p", "cumem", "scheduler-and-speculation"], controls)
    runs = Runs({"p2p": "not acceptable", "cumem": "acceptable", "scheduler-and-speculation": "acceptable"})
    doc = run(tmp_path, path, runs, policy="skip-dependents")
    assert [c for c, _ in runs.calls] == ["p2p", "cumem", "scheduler-and-speculation"]
    # The scheduler candidate's prerequisite is met by the plan's own decision, and its setting passed.
    extravars = runs.calls[2][1]
    assert extravars["serving_recipe_plan_evidence"]["transport_stable"].startswith("cumem acceptable")
    assert extravars["serving_recipe_custom_change"] == {"chunked_prefill_size": 8192}
    assert doc["recommended_promotion_order"] == ["cumem", "scheduler-and-speculation"]
    both_fail = Runs({"p2p": "not acceptable", "cumem": "failed, restored", "scheduler-and-speculation": "acceptable"})
    doc = run(tmp_path / "b", path, both_fail, policy="skip-dependents")
    assert [c for c, _ in both_fail.calls] == ["p2p", "cumem"]
    assert doc["candidates"][2]["status"] == "skipped" and "depends on a transport candidate" in \
        doc["candidates"][2]["reason"]


def test_a_plan_entry_that_accepts_a_kv_loss_says_so_to_its_run_only(tmp_path):
    path = write_plan(tmp_path, ["p2p", "cumem"])
    plan = json.loads(path.read_text())
    plan["ordered_candidates"][1]["accept_kv_loss"] = True  # cuMem's buffers take memory: a known cost
    path.write_text(json.dumps(plan))
    runs = Runs({"p2p": "acceptable", "cumem": "acceptable"})
    run(tmp_path, path, runs)
    assert [(c, extravars.get("rollout_kv_loss_accepted")) for c, extravars in runs.calls] == [
        ("p2p", None), ("cumem", True)]


def write_capture(evidence, host, run_id, iommu):
    folder = evidence / host / f"capture-{run_id}"
    folder.mkdir(parents=True)
    (folder / "iommu-observation.json").write_text(json.dumps({"host": host, "iommu": iommu}))
    (folder / "p2p-support-observation.json").write_text(json.dumps({"host": host, "nvml": {}, "verdict": {}}))


def host_change_plan(tmp_path, fact="iommu_translated"):
    """A p2p entry as propose.yml writes it for a PCIe host under translated IOMMU domains."""
    plan = {"schema": "anvil-serving.followup-candidate-plan/v1", "ordered_candidates": [
        {"id": "p2p", "change": "NCCL_P2P_DISABLE 1 -> 0", "gate": "the rollout's gates", "prerequisites": [
            {"kind": "evidence", "need": "capture", "what": "the host's capture", "met": True, "evidence": "h1/c"},
            {"kind": "host-change", "fact": fact, "what": "the GPUs' IOMMU domains are translated (DMA-FQ)",
             "met": False, "to_do": "a human changes the host first"}]}]}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    return path


TRANSLATED = {"gpus": [{"translated": True, "group_type": "DMA-FQ"}], "translated_gpu_groups": [17],
              "acs_redirecting_bridges": []}
PASSTHROUGH = {"gpus": [{"translated": False, "group_type": "identity"}], "translated_gpu_groups": [],
               "acs_redirecting_bridges": []}


def test_an_unmet_host_change_refuses_the_plan_before_any_run_or_rollback(tmp_path):
    write_capture(tmp_path / "ev", "h1", "20261207T010000Z-aaaa", TRANSLATED)
    runs = Runs({"p2p": "acceptable"})
    with pytest.raises(executor.PlanError) as error:
        run(tmp_path, host_change_plan(tmp_path), runs)
    assert "refused before any change" in str(error.value)
    assert "$.ordered_candidates[0] (p2p): unmet host change on h1: the GPUs' IOMMU domains are translated" \
        in str(error.value)
    assert runs.calls == [] and runs.rollbacks == 0
    assert not list((tmp_path / "ev").glob("plan-*"))  # not even the plan's state was written


def test_a_host_without_a_capture_cannot_meet_a_host_change(tmp_path):
    runs = Runs({"p2p": "acceptable"})
    with pytest.raises(executor.PlanError, match="unmet host change on h1"):
        run(tmp_path, host_change_plan(tmp_path), runs)
    assert runs.calls == []


def test_a_newer_capture_that_shows_the_host_changed_meets_it_and_the_plan_runs(tmp_path):
    write_capture(tmp_path / "ev", "h1", "20261207T010000Z-aaaa", TRANSLATED)
    write_capture(tmp_path / "ev", "h1", "20261207T020000Z-bbbb", PASSTHROUGH)  # after the operator's change
    runs = Runs({"p2p": "acceptable"})
    doc = run(tmp_path, host_change_plan(tmp_path), runs)
    assert [c for c, _ in runs.calls] == ["p2p"] and doc["candidates"][0]["outcome"] == "acceptable"


def test_a_prerequisite_marked_unmet_in_prose_is_refused(tmp_path):
    path = write_plan(tmp_path, ["p2p"])
    plan = json.loads(path.read_text())
    plan["ordered_candidates"][0]["prerequisites"] = ["ACS off: UNMET - a human changes the host first"]
    path.write_text(json.dumps(plan))
    runs = Runs({"p2p": "acceptable"})
    with pytest.raises(executor.PlanError, match="is UNMET, in prose no machine can check"):
        run(tmp_path, path, runs)
    assert runs.calls == []
