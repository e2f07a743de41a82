"""What decides a promotion beyond a latency cell, on the lab host (the engine double, TEST DOUBLE of
SGLang): a speculative candidate's accept length, verify step and break-even against the no-spec
original (the handoff's case: accept length 2.0 under a break-even of 2.5, so speculation is slower);
and the endurance cell under load (a hang or drift that shows only after minutes)."""

import json
import re
import tempfile

from conftest import CPU_SHARED_WITH_OTHER_JOBS, lab, only_run_dir, run_playbook

FAULT = "/etc/engine-double/faults/sglang-candidate.service"
SPECULATIVE = {"--speculative-algorithm": "EAGLE", "--speculative-num-steps": "3", "--speculative-eagle-topk": "1",
               "--speculative-num-draft-tokens": "4"}


def rollout(fault=None, **extra):
    if fault:
        lab("sh", "-c", f"mkdir -p /etc/engine-double/faults && echo {fault} > {FAULT}")
    evidence = tempfile.mkdtemp(prefix="measurement-")
    try:
        result = run_playbook("candidate.yml", {
            "rollout_evidence_dir": evidence, "rollout_cells": [{"name": "1k", "prompt_tokens": 1000}],
            "rollout_cell_requests": 8, **CPU_SHARED_WITH_OTHER_JOBS, **extra}, inventory="inventory/lab", local=False)
    finally:
        lab("rm", "-f", FAULT, check=False)
    return result, evidence


def assert_restored(before):
    after = lab("systemctl", "show", "-p", "InvocationID,ActiveState,NRestarts", "sglang.service").stdout
    assert "ActiveState=active" in after and "NRestarts=0" in after and before not in after, after
    assert lab("test", "-e", "/etc/systemd/system/sglang-candidate.service", check=False).returncode == 1


def invocation():
    return lab("systemctl", "show", "-p", "InvocationID", "--value", "sglang.service").stdout.strip()


def test_a_speculative_candidate_shows_its_accept_length_against_the_break_even():
    before = invocation()
    # no_spec_metrics: the candidate's /metrics say nothing of speculation (SGLang without --enable-metrics),
    # so its accept length is the one its decode lines log
    result, evidence = rollout("no_spec_metrics", serving_recipe_candidate_id="speculative",
                               serving_recipe_control_value=SPECULATIVE)
    assert result.returncode == 0, result.stdout[-4000:]
    run = only_run_dir(evidence, "lab-gpu-1", "rollout")
    decision = json.loads((run / "decision.json").read_text())
    spec = decision["speculation"]
    assert spec["baseline_has_speculation"] is False, spec  # the no-spec original is the baseline
    row = spec["cells"]["1k"]
    # The double: a 12.5 ms verify step (2.5 decode steps of 5 ms) yielding 2.0 tokens, against 5 ms a token.
    assert row["accept_length"] == 2.0 and row["accept_length_source"] == "engine log", row
    assert 2.2 < row["break_even"] < 2.8 and row["pays"] is False, row
    assert decision["verdict"] != "acceptable", decision  # slower per token: never promoted
    card = (run / "result-card.md").read_text()
    assert re.search(r"Speculation \(1k\): accept length 2 \(the engine's log\), verify step [\d.]+ ms, "
                     r"break-even accept length [\d.]+ against the baseline's [\d.]+ tokens/s: it does not pay",
                     card), card
    assert_restored(before)


def test_a_candidate_that_hangs_under_load_fails_its_endurance_cell_and_is_restored():
    """The double's stall_after fault: after its 40th request no request gets a token (its gates, the
    numerics probe and the cells come before, so the hang meets the endurance cell, whatever the
    machine's speed: the cell runs until its first failure)."""
    before = invocation()
    result, evidence = rollout("stall_after:40", rollout_endurance_s=120, rollout_endurance_hang_s=5)
    assert result.returncode != 0
    message = re.sub(r"\s+", " ", result.stdout)
    assert "failed and the original was restored and proven" in message, message[-3000:]
    assert "endurance: a hang: request " in message and "got no answer within 5 s" in message, message[-3000:]
    run = only_run_dir(evidence, "lab-gpu-1", "rollout")
    decision = json.loads((run / "decision.json").read_text())
    assert decision["verdict"] == "reject" and decision["endurance"]["ok"] is False, decision["endurance"]
    assert "Endurance: a hang: request " in (run / "result-card.md").read_text()
    assert_restored(before)
