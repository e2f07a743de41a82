"""The decode-size probe's prediction on the lab host: flagged (and refused on request) before
any change when below the A/B's minimum effect, and shown beside the measured deltas in the
evidence of a finished run."""

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from conftest import FIXTURES, LAB_HOST, lab, run_playbook

LAB = LAB_HOST  # this test worker's lab host (conftest)
FAST = {"rollout_cells": [{"name": "1k", "prompt_tokens": 1000}], "rollout_cell_requests": 3}


def evidence_with_prediction():
    """An evidence dir whose lab host has a peer-path run with a decode prediction: the real 2x H200
    measurements (graph probe) with a 32-layer, hidden-4096 model's decode size added."""
    import ansible.module_utils  # noqa: F401  (conftest put module_utils on its path)

    from serving_rollout.module_utils import decode_model
    root = Path(tempfile.mkdtemp(prefix="prediction-evidence-"))
    run = root / "lab-gpu-1" / "peer-path-20261130T000000Z"
    run.mkdir(parents=True)
    observation = json.loads((FIXTURES / "h200x2-decode-probe" / "peer-path-observation.json").read_text())
    shape = decode_model.shape_from_config({"num_hidden_layers": 32, "hidden_size": 7168})
    measured = {arm: {c["bytes"]: c[arm]["median_us"] for c in observation["peer_path"]["allreduce"]["comparison"]}
                for arm in ("no_p2p", "p2p")}
    prediction = decode_model.predict(shape, measured["no_p2p"], measured["p2p"], tokens=3)
    observation["peer_path"]["decode"] = {"source": "config.json (test)", "shape": shape,
                                          "call": decode_model.decode_allreduce(shape, 3), "prediction": prediction}
    (run / "peer-path-observation.json").write_text(json.dumps(observation))
    return root, prediction


def test_prediction_below_min_effect_is_refused_before_any_change():
    evidence, prediction = evidence_with_prediction()
    before = lab("systemctl", "show", "-p", "InvocationID", "sglang.service").stdout
    # 0.2 ms saved per token of a 100 ms token is 0.2 %: below the 2 % the A/B can call.
    result = run_playbook("candidate.yml", {**FAST, "rollout_evidence_dir": str(evidence),
                                            "rollout_refuse_below_predicted_effect": True,
                                            "rollout_decode_ms_per_token": 100},
                          inventory="inventory/lab", local=False)
    text = re.sub(r"\s+", " ", result.stdout)
    assert result.returncode != 0
    effect = prediction["saved_per_token_ms"] / 100
    assert f"predicted decode gain {effect:.1%} is below the A/B's minimum effect 2.0%" in text, text[-3000:]
    assert "the A/B would spend GPU time on an effect it cannot call" in text
    assert lab("systemctl", "show", "-p", "InvocationID", "sglang.service").stdout == before  # never stopped
    assert lab("test", "-e", "/var/lib/serving-rollout/sglang.service.lock", check=False).returncode == 1
    shutil.rmtree(evidence)


def test_finished_run_shows_predicted_beside_measured():
    evidence, prediction = evidence_with_prediction()
    # The lab double decodes at 4 ms per token (lab_serving_host_double_env).
    result = run_playbook("candidate.yml", {**FAST, "rollout_evidence_dir": str(evidence),
                                            "rollout_decode_ms_per_token": 4},
                          inventory="inventory/lab", local=False)
    assert result.returncode == 0, result.stdout[-3000:]
    shown = f"predicted decode gain {round(prediction['saved_per_token_ms'] / 4 * 100, 1)}%"
    assert shown in result.stdout  # shown before any change
    run = next((evidence / "lab-gpu-1").glob("rollout-*"))
    record = json.loads((run / "prediction.json").read_text())
    assert record["evidence"] == "lab-gpu-1/peer-path-20261130T000000Z/peer-path-observation.json"
    row = record["comparison"][0]
    assert row["compared"] and row["cell"] == "1k"
    assert row["predicted_decode_delta"] > 0 and row["measured_decode_delta"] is not None
    decision = json.loads((run / "decision.json").read_text())
    assert decision["predicted_vs_measured"] == record["comparison"]
    card = (run / "result-card.md").read_text()
    assert "## Predicted vs measured (decode-size all-reduce probe)" in card
    assert f"{prediction['per_step']} all-reduces of {prediction['bytes']:,} B per step" in card
    verify = subprocess.run([sys.executable, "-m", "serving_rollout.evidence", "verify", str(run)],
                            capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout
    shutil.rmtree(evidence)
