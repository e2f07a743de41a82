"""The fleet records on the controller: outcomes, when a batch may start, the summary, the lock, and the
fleet_record action that writes them inside a play (in-process)."""

import json
from types import SimpleNamespace

import pytest
from ansible.errors import AnsibleActionFail
from test_host_steps import action_class

from serving_rollout import fleet


def fleet_action(**args):
    """action_plugins/fleet_record.py run in-process, as a task would."""
    task = SimpleNamespace(args=args, async_val=0, check_mode=False, action="fleet_record")
    connection = SimpleNamespace(_shell=SimpleNamespace(tmpdir="/tmp/unused"))
    return action_class("fleet_record")(task, connection, None, None, None).run(task_vars={})


@pytest.mark.parametrize("facts, outcome", [
    ({"failure": None, "entered_candidate_phase": True, "restored": True, "decision": {"decision": "acceptable"}},
     "acceptable"),
    ({"failure": None, "entered_candidate_phase": True, "restored": True, "decision": {"decision": "reject"}},
     "not acceptable"),
    ({"failure": None, "entered_candidate_phase": True, "restored": True, "decision": {"decision": "inconclusive"}},
     "not acceptable"),
    ({"failure": "lock held by another run", "entered_candidate_phase": False}, "refused"),
    ({"failure": "gate json failed", "entered_candidate_phase": True, "restored": True}, "failed, restored"),
    ({"failure": "gate json failed", "entered_candidate_phase": True, "restored": False}, "failed, NOT restored"),
])
def test_outcome_of_a_hosts_rollout(facts, outcome):
    assert fleet.outcome_of(facts) == outcome


def begin(tmp_path, batch, hosts=("h1", "h2", "h3")):
    return fleet.begin(tmp_path, "R1", list(hosts), list(batch))


def test_a_batch_starts_only_when_every_earlier_host_passed(tmp_path):
    assert begin(tmp_path, ["h1"]) == {"stop": False, "stopped_by": None, "outcome": None}
    fleet.record(tmp_path, "R1", "h1", {"failure": None, "entered_candidate_phase": True, "restored": True,
                                        "decision": {"decision": "acceptable", "reasons": []}, "evidence": "e/h1"})
    assert begin(tmp_path, ["h2"])["stop"] is False
    fleet.record(tmp_path, "R1", "h2", {"failure": "gate json failed", "entered_candidate_phase": True,
                                        "restored": True, "evidence": "e/h2"})
    assert begin(tmp_path, ["h3"]) == {"stop": True, "stopped_by": "h2", "outcome": "failed, restored"}
    doc = json.loads((tmp_path / "fleet-R1" / "summary.json").read_text())
    assert [(h["host"], h["outcome"]) for h in doc["hosts"]] == \
        [("h1", "acceptable"), ("h2", "failed, restored"), ("h3", "not-started")]
    assert doc["stopped_at"] == "h2" and doc["hosts"][2]["stopped_by"] == "h2"
    text = (tmp_path / "fleet-R1" / "summary.md").read_text()
    assert "Stopped at **h2**" in text and "| h3 | not-started |" in text and "gate json failed" in text
    index = json.loads((tmp_path / "index.json").read_text())
    assert index["fleets"] == [{"run_id": "R1", "path": "fleet-R1", "stopped_at": "h2", "hosts": {
        "h1": "acceptable", "h2": "failed, restored", "h3": "not-started"}}]


def test_a_host_of_an_earlier_batch_that_never_finished_stops_the_next(tmp_path):
    begin(tmp_path, ["h1", "h2"])  # h2 killed or unreachable: its record stays "started"
    fleet.record(tmp_path, "R1", "h1", {"failure": None, "entered_candidate_phase": True, "restored": True,
                                        "decision": {"decision": "acceptable"}})
    assert begin(tmp_path, ["h3"]) == {"stop": True, "stopped_by": "h2", "outcome": "started"}


def test_hosts_never_reached_are_listed_not_started(tmp_path):
    begin(tmp_path, ["h1"])
    fleet.record(tmp_path, "R1", "h1", {"failure": "boom", "entered_candidate_phase": True, "restored": True})
    doc = json.loads((tmp_path / "fleet-R1" / "summary.json").read_text())
    assert doc["counts"] == {"failed, restored": 1, "not-started": 2}


def test_the_action_begins_records_and_refuses_an_outcome_that_is_not_a_mapping(tmp_path):
    began = fleet_action(op="begin", evidence_dir=str(tmp_path), run_id="R2", hosts=["a"], batch=["a"])
    assert began == {"changed": False, "begin": {"stop": False, "stopped_by": None, "outcome": None}}
    with pytest.raises(AnsibleActionFail, match="outcome"):
        fleet_action(op="record", evidence_dir=str(tmp_path), run_id="R2", host="a", outcome="not json")
    kept = fleet_action(op="record", evidence_dir=str(tmp_path), run_id="R2", host="a",
                        outcome={"failure": "boom", "entered_candidate_phase": True, "restored": True})
    assert kept["record"]["outcome"] == "failed, restored"


def test_an_unwritable_evidence_folder_is_named_without_a_traceback(tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    with pytest.raises(AnsibleActionFail) as refused:
        fleet_action(op="begin", evidence_dir=str(blocked), run_id="R3", hosts=["h1"], batch=["h1"])
    assert str(refused.value) == f"evidence folder {blocked} is not writable: File exists"
    # a host's outcome is never masked by its record: no failure, no record, the cause said
    unrecorded = fleet_action(op="record", evidence_dir=str(blocked), run_id="R3", host="h1",
                              outcome={"failure": None, "entered_candidate_phase": True, "restored": True})
    assert unrecorded == {"changed": False, "record": None,
                          "msg": f"evidence folder {blocked} is not writable: File exists"}


def test_a_record_links_only_to_an_evidence_folder_that_exists(tmp_path):
    begin(tmp_path, ["h1", "h2"], hosts=("h1", "h2"))
    (tmp_path / "h1" / "rollout-R1").mkdir(parents=True)
    kept = fleet.record(tmp_path, "R1", "h1", {"failure": None, "entered_candidate_phase": True, "restored": True,
                                               "decision": {"decision": "acceptable"},
                                               "evidence": str(tmp_path / "h1" / "rollout-R1")})
    refused = fleet.record(tmp_path, "R1", "h2", {"failure": "cannot write the lock", "entered_candidate_phase": False,
                                                  "evidence": str(tmp_path / "h2" / "rollout-R1")})
    assert kept["evidence"] == str(tmp_path / "h1" / "rollout-R1") and refused["evidence"] is None
    interrupted = fleet.record(tmp_path, "R1", "h2", {"interrupted": True, "failure": "interrupted at phase x"})
    assert interrupted["outcome"] == "interrupted"


def test_a_killed_runs_started_row_is_recorded_lost_and_an_ended_row_is_left(tmp_path):
    fleet.begin(str(tmp_path), "R1", ["a", "b"], ["a", "b"])
    fleet.record(str(tmp_path), "R1", "b", {"interrupted": True, "failure": "interrupted at phase candidate-running"})
    assert fleet.mark_lost(str(tmp_path), "R1", "a", "its controller was gone; rollback R2 restored it")["outcome"] \
        == "lost"
    assert fleet.mark_lost(str(tmp_path), "R1", "b", "x") is None  # already ended: interrupted stays
    assert fleet.mark_lost(str(tmp_path), "NOPE", "a", "x") is None  # no such fleet run here
    summary = json.loads((tmp_path / "fleet-R1" / "summary.json").read_text())
    assert [(h["host"], h["outcome"]) for h in summary["hosts"]] == [("a", "lost"), ("b", "interrupted")]
    again = fleet_action(op="lost", evidence_dir=str(tmp_path), run_id="R1", host="a", why="again")
    assert again == {"changed": False, "lost": None}  # lost already: left as it is
