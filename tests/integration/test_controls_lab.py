"""Catalog controls rolled out on the lab host (the engine double, TEST DOUBLE of SGLang): an NCCL
tuning control proven from NCCL's own setting line, the same control made to do nothing ("no
effect", restored, no A/B spent), and NCCL_ALGO=Tree failing at CUDA-graph capture as the 8-GPU
PCIe handoff host did (its cause named, the original restored and proven)."""

import json
import re
import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import CPU_SHARED_WITH_OTHER_JOBS, LAB_HOST, run_playbook

FAULTS = "/etc/engine-double/faults/sglang-candidate.service"
UNIT = "/etc/systemd/system/sglang.service"
# One small cell: these tests are about the control's setter and proof, not the statistics.
SMALL = {"rollout_ready_timeout_s": 10, "rollout_gpu_free_timeout_s": 20, "rollout_cell_requests": 3,
         "rollout_cells": [{"name": "1k", "prompt_tokens": 1000}], **CPU_SHARED_WITH_OTHER_JOBS}


def lab(*command, check=True):
    return subprocess.run(["podman", "exec", LAB_HOST, *command], capture_output=True, text=True, check=check)


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
    assert json.loads((run / "decision.json").read_text())["candidate_id"] == "nccl-algo"
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
