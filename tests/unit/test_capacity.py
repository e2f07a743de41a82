"""KV capacity per arm (serving_rollout/play/capacity.py) and how the decision record uses it: a candidate
that fits fewer tokens than the original, beyond the limit, is a reject unless accepted."""

import json

import jsonschema
import pytest
from conftest import REPO

from serving_rollout import evidence
from serving_rollout.play.capacity import arm_capacity, kv_judgement

ARMS = {"baseline-1": {"kv_cache_tokens": 500000, "max_concurrency": 3906},
        "candidate": {"kv_cache_tokens": 400000, "max_concurrency": 3125},
        "baseline-2": {"kv_cache_tokens": 500000, "max_concurrency": 3906}}


def test_a_loss_beyond_the_limit_is_named_with_its_figures():
    judged = kv_judgement(ARMS, 0.05)
    assert judged["verdict"] == "lost" and judged["change"] == -0.2 and not judged["accepted"]
    assert judged["reason"] == "KV capacity lost: 400000 tokens against the baseline's 500000 (-20.0%; limit -5%)"
    assert judged["max_concurrency"] == {"baseline-1": 3906, "candidate": 3125, "baseline-2": 3906}
    assert kv_judgement(ARMS, 0.25)["verdict"] == "kept"
    assert kv_judgement(ARMS, 0.05, accepted=True)["reason"].endswith("(a loss the operator accepted: "
                                                                       "rollout_kv_loss_accepted)")


def test_the_restored_original_is_the_baseline_when_the_first_was_not_read_and_unknown_is_not_judged():
    arms = {**ARMS, "baseline-1": {"kv_cache_tokens": None, "max_concurrency": None}}
    assert kv_judgement(arms)["baseline_tokens"] == 500000
    unknown = kv_judgement({"candidate": {"kv_cache_tokens": None}, "baseline-1": ARMS["baseline-1"]})
    assert unknown["verdict"] == "unknown" and unknown["change"] is None
    assert unknown["reason"] == "KV capacity not judged: the candidate engine reported no KV cache size"
    assert arm_capacity({"kv_cache_tokens": 7, "max_concurrency": 2.5, "phase": "ready"}) == {
        "kv_cache_tokens": 7, "max_concurrency": 2.5}
    assert arm_capacity({}) == {"kv_cache_tokens": None, "max_concurrency": None}


@pytest.mark.parametrize("bad", [1.0, -0.1, "0.05", True])
def test_a_bad_limit_is_refused_by_name(bad):
    with pytest.raises(ValueError, match=f"max_loss must be a fraction from 0 to below 1, got {bad!r}"):
        kv_judgement(ARMS, bad)


def run_dir(tmp_path, accepted):
    """A run folder whose cells decided acceptable and whose candidate lost 20 % of its KV tokens."""
    documents = {
        "outcome.json": {"run_id": "r1", "host": "h1", "candidate_id": "cumem", "failure": None, "restored": True},
        "ab-verdict.json": {"cells": [], "decision": {"decision": "acceptable", "reasons": ["1k e2e_s better"]}},
        "capacity.json": {"policy": {"kv_max_loss": 0.05, "kv_loss_accepted": accepted}, "arms": ARMS}}
    for name, body in documents.items():
        (tmp_path / name).write_text(json.dumps(body))
    return tmp_path


def test_a_lost_kv_capacity_turns_an_acceptable_latency_verdict_into_a_reject(tmp_path):
    record = evidence.decision_record(run_dir(tmp_path, accepted=False))
    assert record["verdict"] == "reject" and not record["promotion_allowed"]
    assert record["reasons"][-1].startswith("KV capacity lost: 400000 tokens")
    assert record["kv_capacity"]["verdict"] == "lost"
    jsonschema.validate(record, json.loads((REPO / "schemas" / "decision.schema.json").read_text()))


def test_an_accepted_kv_loss_keeps_the_latency_verdict_and_says_so(tmp_path):
    record = evidence.decision_record(run_dir(tmp_path, accepted=True))
    assert record["verdict"] == "acceptable" and record["promotion_allowed"]
    assert "accepted: rollout_kv_loss_accepted" in record["reasons"][-1]


def test_single_stream_decode_is_the_median_per_arm_of_the_concurrency_1_cells(tmp_path):
    def cell(name, rates, concurrency=1):
        return {"name": name, "concurrency": concurrency,
                "requests": [{"decode_tps": r, "error": None} for r in rates] + [{"decode_tps": None, "error": "x"}]}

    run = run_dir(tmp_path, accepted=False)
    (run / "cells.json").write_text(json.dumps({"arms": {
        "baseline-1": [cell("1k", [100.0, 110.0, 120.0]), cell("c8", [50.0], concurrency=8)],
        "candidate": [cell("1k", [130.0, 140.0]), cell("c8", [60.0], concurrency=8)]}}))
    record = evidence.decision_record(run)
    assert record["single_stream_decode_tps"] == {"1k": {"baseline-1": 110.0, "candidate": 135.0}}
    jsonschema.validate(record, json.loads((REPO / "schemas" / "decision.schema.json").read_text()))
