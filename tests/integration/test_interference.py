"""Interference that hits one arm only (the double's burst_cells fault: two busy processes on the
host and every latency 30 % longer from the candidate's first cell request on) is re-measured or
makes the cell inconclusive, never a reject; the card and decision say what was spent."""

import json
import tempfile
from pathlib import Path

import pytest
from conftest import CPU_SHARED_WITH_OTHER_JOBS, LAB_HOST, lab, only_run_dir, run_playbook

LAB = LAB_HOST  # this test worker's lab host (conftest)
FAULT = "/etc/engine-double/faults/sglang-candidate.service"


def rollout_with_candidate_fault(fault, **extra):
    """A rollout of one 1k cell on the lab host with the double's fault in the candidate; its run dir."""
    lab("sh", "-c", f"mkdir -p /etc/engine-double/faults && echo {fault} > {FAULT}")
    evidence = tempfile.mkdtemp(prefix="interference-")
    try:
        result = run_playbook("candidate.yml", {
            "rollout_evidence_dir": evidence, "rollout_cells": [{"name": "1k", "prompt_tokens": 1000}], **extra},
            inventory="inventory/lab", local=False)
    finally:
        lab("rm", "-f", FAULT, check=False)
    assert result.returncode == 0, result.stdout[-4000:]
    return only_run_dir(evidence, "lab-gpu-1", "rollout")


# Alone on the machine: the other test worker's load comes and goes between the arms (a real vLLM
# start, another rollout's cells) and can mask the burst or raise the baseline above it.
@pytest.mark.machine_alone
def test_a_burst_in_the_candidate_arm_is_never_a_reject():
    # The neighbour arrives with the candidate's first cell request and stays for 16 of them (two
    # chunks and their re-measuring), however long the gates took on a loaded machine.
    run = rollout_with_candidate_fault("burst_cells:16:0.3", rollout_cell_requests=8, rollout_remeasure_max=1)
    decision = json.loads((run / "decision.json").read_text())
    verdict = json.loads((run / "ab-verdict.json").read_text())
    cell = verdict["cells"][0]
    assert decision["verdict"] != "reject", decision
    assert decision["verdict"] == "inconclusive" and any(
        "disturbed" in r or "different conditions" in r for r in cell["reasons"]), cell["reasons"]
    cells = json.loads((run / "cells.json").read_text())["arms"]
    assert cells["candidate"][0]["remeasured"], "the disturbed chunks were measured again first"
    # The burst shows as CPU busy and more runnable processes; which crosses its limit depends on
    # what else the machine runs (a busy neighbour already raises the baseline's runnable count).
    why = json.dumps(cells["candidate"][0]["remeasured"])
    assert "host CPU busy" in why or "runnable processes" in why, why
    # What was spent counts the discarded attempts too.
    kept = len(cells["candidate"][0]["requests"])
    assert "Holm" in decision["method"] and decision["requests_per_arm"]["candidate"] > kept
    assert "Requests spent per arm" in Path(run, "result-card.md").read_text()


def test_a_clear_gain_stops_the_candidates_cell_early_and_the_second_bracket_is_one_chunk():
    # Latencies halved in the candidate: far outside any noise, so the first or second look is clear.
    run = rollout_with_candidate_fault("speedup:0.5", rollout_cell_requests=12, **CPU_SHARED_WITH_OTHER_JOBS)
    cell = json.loads((run / "ab-verdict.json").read_text())["cells"][0]
    look = cell["look"]
    assert look["against"] == "first bracket" and look["look"] < look["looks"] == 3, look
    spent = json.loads((run / "decision.json").read_text())["requests_per_arm"]
    # First bracket two thirds of 12; the candidate stopped at its look; the second bracket one chunk.
    assert spent == {"baseline-1": 8, "candidate": 4 * look["look"], "baseline-2": 4}, spent
    assert json.loads((run / "decision.json").read_text())["verdict"] == "acceptable"
