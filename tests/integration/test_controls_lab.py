"""Catalog controls rolled out on the lab host (the engine double, TEST DOUBLE of SGLang): an NCCL
tuning control proven from NCCL's own setting line, the same control made to do nothing ("no
effect", restored, no A/B spent), and NCCL_ALGO=Tree failing at CUDA-graph capture as the 8-GPU
PCIe handoff host did (its cause named, the original restored and proven)."""

import json
import re
import tempfile
from pathlib import Path

import pytest
from conftest import CPU_SHARED_WITH_OTHER_JOBS, lab, run_playbook

FAULTS = "/etc/engine-double/faults/sglang-candidate.service"
UNIT = "/etc/systemd/system/sglang.service"
# One small cell: these tests are about the control's setter and proof, not the statistics.
SMALL = {"rollout_ready_timeout_s": 10, "rollout_gpu_free_timeout_s": 20, "rollout_cell_requests": 3,
         "rollout_cells": [{"name": "1k", "prompt_tokens": 1000}], **CPU_SHARED_WITH_OTHER_JOBS}


def state():
    out = lab("systemctl", "show", "-p", "ActiveState,NRestarts,InvocationID", "sglang.service").stdout
    return dict(line.split("=", 1) for line in out.splitlines()), lab("sha256sum", UNIT).stdout


@pytest.fixture
def evidence():
    lab("rm", "-f", FAULTS, "/var/lib/serving-rollout/sglang.service.lock")
    if state()[0]["ActiveState"] != "active":
        lab("systemctl", "start", "sglang.service")
    yield tempfile.mkdtemp(prefix="controls-lab-")
    lab("rm", "-f", FAULTS)


def rollout(evidence, algo):
    return run_playbook("candidate.yml", {**SMALL, "rollout_evidence_dir": evidence,
                                          "serving_recipe_candidate_id": "nccl-algo",
                                          "serving_recipe_control_value": algo},
                        inventory="inventory/lab", local=False, timeout=900)


def failed_rollout(evidence, fault, algo):
    """The rollout with the double's fault on the candidate only: its output (one line) and its run folder."""
    lab("sh", "-c", f"mkdir -p {Path(FAULTS).parent} && echo {fault} > {FAULTS}")
    result = rollout(evidence, algo)
    assert result.returncode != 0
    run, = sorted(Path(evidence).glob("*/rollout-*"))
    return re.sub(r"\s+", " ", result.stdout), run


def assert_restored(before):
    (now, digest), (then, then_digest) = state(), before
    assert now["ActiveState"] == "active" and now["NRestarts"] == "0", now
    assert now["InvocationID"] != then["InvocationID"] and digest == then_digest
    assert lab("test", "-e", "/etc/systemd/system/sglang-candidate.service", check=False).returncode == 1


def test_an_nccl_tuning_control_is_proven_by_nccls_own_setting_line(evidence):
    before = state()
    result = rollout(evidence, "Ring")
    assert result.returncode == 0, result.stdout[-4000:]
    run, = sorted(Path(evidence).glob("*/rollout-*"))
    proof = json.loads((run / "journal-excerpts.json").read_text())["candidate"]["proof"]
    assert proof == {"kind": "nccl_setting", "proven": True, "saw": "",
                     "expected": "NCCL INFO NCCL_ALGO set by environment to Ring"}, proof
    decision = json.loads((run / "decision.json").read_text())
    assert decision["candidate_id"] == "nccl-algo"
    # the numerical-equivalence probe ran on all three arms: the candidate within NCCL tuning's
    # tolerance, the restored original identical to its own reference (the A/A)
    numerics = decision["numerics"]
    assert numerics["tolerance"] == "reduction-order" and numerics["candidate"]["verdict"] == "pass", numerics
    assert numerics["original_self"]["identical"] == numerics["prompts"] == 8, numerics
    assert "Numerical equivalence (8 fixed prompts x 16 greedy tokens, tolerance reduction-order): numerics pass" \
        in (run / "result-card.md").read_text()
    assert_restored(before)


def test_a_control_the_engine_drops_is_no_effect_restored_without_an_ab(evidence):
    # The engine's own start-up removes NCCL_ALGO before NCCL reads it (as vLLM's env override does
    # with NCCL_CUMEM_ENABLE): the unit sets it, NCCL never does.
    before = state()
    message, run = failed_rollout(evidence, "drop_env:NCCL_ALGO", "Ring")
    assert "no effect: nccl-algo (nccl_setting): expected NCCL INFO NCCL_ALGO set by environment to Ring; the " \
           "engine showed no 'NCCL_ALGO set by environment' line (NCCL settings logged: " in message, message[-3000:]
    arms = json.loads((run / "cells.json").read_text())["arms"]
    assert list(arms) == ["baseline-1"], f"an A/B was spent on a control that did nothing: {list(arms)}"
    assert_restored(before)


def test_tree_failing_at_graph_capture_is_named_by_its_cause_and_restored(evidence):
    before = state()
    message, run = failed_rollout(evidence, "capture_fails_on:NCCL_ALGO=Tree", "Tree")
    cause = "Exception: Capture cuda graph failed: NCCL error: invalid usage (run with NCCL_DEBUG=WARN for details)"
    assert "failed and the original was restored and proven" in message, message[-3000:]
    assert cause in message, message[-3000:]
    card = (run / "result-card.md").read_text()
    assert "cuda-graph-capture" in card and cause in card, card
    assert_restored(before)


def test_silent_corruption_on_the_changed_path_fails_the_numerics_probe_and_is_restored(evidence):
    """Every gate passes and every latency is unchanged (the double's corrupt_tokens fault, as zeroed
    peer copies under the IOMMU): only the greedy answers show it. No A/B is spent on it."""
    before = state()
    message, run = failed_rollout(evidence, "corrupt_tokens:0.2", "Ring")
    assert "failed and the original was restored and proven" in message, message[-3000:]
    assert "numerics (nccl-algo): numerics differ beyond reduction-order: prompt " in message, message[-3000:]
    assert "-> 'garbled" in message and "where the original's choice led by" in message, message[-3000:]
    gates = json.loads((run / "gates.json").read_text())["candidate"]
    assert gates and all(g["verdict"] == "pass" for g in gates), gates  # the gates alone would have passed it
    assert list(json.loads((run / "cells.json").read_text())["arms"]) == ["baseline-1"]
    decision = json.loads((run / "decision.json").read_text())
    assert decision["verdict"] == "reject" and decision["numerics"]["candidate"]["verdict"] == "fail", decision
    assert decision["numerics"]["original_self"]["verdict"] == "pass"  # the original was not what moved
    assert_restored(before)
