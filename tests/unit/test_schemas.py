"""The plan and decision schemas in schemas/: what plan producers and readers validate against."""

import json

import candidate_plan_filters
import jsonschema
import pytest
from ansible.errors import AnsibleFilterError
from conftest import FIXTURES, REPO

from serving_rollout import candidate_plan

PLAN = json.loads((REPO / "plans" / "candidate-plan-example.json").read_text())


def test_the_real_plan_is_valid():
    assert candidate_plan.candidate_plan_errors(PLAN) == []
    jsonschema.validate(PLAN, json.loads((REPO / "schemas" / "candidate-plan.schema.json").read_text()))


def test_every_error_is_named_by_its_path():
    plan = json.loads(json.dumps(PLAN))
    del plan["ordered_candidates"][1]["id"]
    plan["ordered_candidates"][2]["gate"] = ""
    plan["ordered_candidates"].append(dict(plan["ordered_candidates"][0]))
    plan["schema"] = "something/v0"
    assert candidate_plan.candidate_plan_errors(plan) == [
        "$.ordered_candidates[1].id: required, missing",
        "$.ordered_candidates[2].gate: must be a non-empty string, got ''",
        "$.schema: expected 'anvil-serving.followup-candidate-plan/v1', got 'something/v0'",
        "$.ordered_candidates[4].id: duplicate id 'p2p'",
    ]
    assert candidate_plan.candidate_plan_errors([]) == ["$: [] is not of type 'object'"]


def test_broken_json_names_the_file():
    with pytest.raises(candidate_plan.PlanError, match="plan file /x/plan.json is not valid JSON: Expecting"):
        candidate_plan.candidate_plan_load("{", "/x/plan.json")
    # the playbooks' filter says the same, as Ansible's filter error
    with pytest.raises(AnsibleFilterError, match="plan file /x/plan.json is not valid JSON: Expecting"):
        candidate_plan_filters.candidate_plan_load("{", "/x/plan.json")
    with pytest.raises(AnsibleFilterError, match="unknown candidate id 'nope'"):
        candidate_plan_filters.candidate_change(PLAN, "nope")


def test_decision_records_follow_their_schema():
    schema = json.loads((REPO / "schemas" / "decision.schema.json").read_text())
    for path in FIXTURES.rglob("decision.json"):
        jsonschema.validate(json.loads(path.read_text()), schema)
    bad = {**json.loads(next(FIXTURES.rglob("decision.json")).read_text()), "verdict": "maybe"}
    with pytest.raises(jsonschema.ValidationError, match="'maybe' is not one of"):
        jsonschema.validate(bad, schema)
