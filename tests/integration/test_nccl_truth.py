"""NCCL truth on the lab host: the effective NCCL configuration of the serving unit from every
source, the refusals it makes possible, and whole rollouts at TP 4 and TP 8 (the engine double
prints ring and tree connections as a real multi-rank NCCL log does)."""

import json
import os
import re
import subprocess
import tempfile

import pytest
from conftest import LAB_HOST, REPO, lab, run_playbook

LAB = LAB_HOST  # this test worker's lab host (conftest)
SITECUSTOMIZE = "/etc/python3.11/sitecustomize.py"  # /usr/lib/python3.11/sitecustomize.py links here
EVIDENCE = tempfile.mkdtemp(prefix="nccl-truth-evidence-")


def recipe_of(unit="sglang.service"):
    """The serving_recipe module's result for a unit, run ad hoc over SSH as a playbook would."""
    env = {**os.environ, "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json"}
    out = subprocess.run([str(REPO / ".venv" / "bin" / "ansible"), "lab-gpu-1", "-i", "inventory/lab",
                          "-m", "serving_recipe", "-a", f"unit={unit}"],
                         cwd=REPO, env=env, capture_output=True, text=True)
    result = json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"]["lab-gpu-1"]
    assert not result.get("failed"), result.get("msg")
    return result


@pytest.fixture
def planted():
    """Plant files on the lab host; put every one back byte for byte afterwards."""
    saved = {}

    def plant(path, text, append=False):
        if path not in saved:
            old = lab("cat", path, check=False)
            saved[path] = old.stdout if old.returncode == 0 else None
        subprocess.run(["podman", "exec", "-i", LAB, "sh", "-c", f"cat {'>>' if append else '>'} {path}"],
                       input=text, text=True, check=True)
    yield plant
    for path, text in saved.items():
        if text is None:
            lab("rm", "-f", path)
        else:
            subprocess.run(["podman", "exec", "-i", LAB, "sh", "-c", f"cat > {path}"], input=text, text=True,
                           check=True)


def test_effective_configuration_names_every_source_and_the_running_truth(planted):
    planted("/etc/nccl.conf", "NCCL_DEBUG=WARN\nNCCL_P2P_LEVEL=PXB\nNCCL_P2P_DISABLE=0\n")
    planted("/root/.nccl.conf", "NCCL_DEBUG=INFO\n")
    config = recipe_of()["recipe"]["nccl_config"]
    effective = config["effective"]
    assert effective["NCCL_P2P_DISABLE"]["value"] == "1" and effective["NCCL_P2P_DISABLE"]["source"] == "process-env"
    assert effective["NCCL_P2P_DISABLE"]["overrides"] == [
        {"source": "nccl-conf-system", "path": "/etc/nccl.conf", "value": "0"}]
    assert effective["NCCL_DEBUG"] == {"source": "nccl-conf-user", "path": "/root/.nccl.conf", "value": "INFO",
                                       "overrides": [{"source": "nccl-conf-system", "path": "/etc/nccl.conf",
                                                      "value": "WARN"}]}
    assert effective["NCCL_P2P_LEVEL"]["source"] == "nccl-conf-system"
    # The running original's own environment, read from /proc: it agrees with the unit.
    assert config["running"]["main"] == {"NCCL_P2P_DISABLE": "1", "NCCL_CUMEM_ENABLE": "0", "NCCL_NVLS_ENABLE": "0"}
    assert config["drift"] == []
    assert any("start-up hooks of /usr/bin/python3 searched" in note for note in config["notes"])
    # Only NCCL_* values are ever carried: the planted secrets of the EnvironmentFile are absent.
    assert "lab-secret" not in json.dumps(config) and "hf_lab" not in json.dumps(config)


def test_a_sitecustomize_that_disables_p2p_is_found_and_the_candidate_refused(planted):
    planted(SITECUSTOMIZE, "import os\nos.environ['NCCL_P2P_DISABLE'] = '1'  # persisted tuning\n", append=True)
    config = recipe_of()["recipe"]["nccl_config"]
    assert config["effective"]["NCCL_P2P_DISABLE"]["source"] == "python-hook"
    assert config["effective"]["NCCL_P2P_DISABLE"]["path"] == SITECUSTOMIZE
    result = run_playbook("candidate-render.yml", {"serving_recipe_evidence_dir": EVIDENCE},
                          inventory="inventory/lab", local=False)
    assert result.returncode != 0
    text = re.sub(r"\s+", " ", result.stdout)
    assert (f"candidate refused: NCCL_P2P_DISABLE is set by a Python start-up hook of the serving interpreter "
            f"({SITECUSTOMIZE}: NCCL_P2P_DISABLE=1)") in text, text[-2000:]
    assert lab("test", "-e", "/etc/systemd/system/sglang-candidate.service", check=False).returncode == 1


NO_DISABLE_UNIT = """[Unit]
Description=a unit that never disables P2P

[Service]
Environment=NCCL_CUMEM_ENABLE=0
ExecStart=/usr/bin/python3 -m sglang.launch_server --model-path test/model --tp-size 4

[Install]
WantedBy=multi-user.target
"""


def test_p2p_candidate_on_a_unit_that_never_disables_p2p_is_a_refused_no_op(planted):
    planted("/etc/systemd/system/p2p-default.service", NO_DISABLE_UNIT)
    lab("systemctl", "daemon-reload")
    try:
        result = run_playbook("candidate-render.yml", {"serving_recipe_unit": "p2p-default.service"},
                              inventory="inventory/lab", local=False)
        text = re.sub(r"\s+", " ", result.stdout)
        assert result.returncode != 0
        assert ("the candidate does not change the effective NCCL_P2P_DISABLE: '0' before (from NCCL's default), "
                "'0' after") in text, text[-2000:]
        assert lab("test", "-e", "/etc/systemd/system/p2p-default-candidate.service", check=False).returncode == 1
    finally:
        lab("rm", "-rf", "/var/lib/serving-rollout/p2p-default.service")
        lab("systemctl", "daemon-reload")


@pytest.mark.parametrize("tp", [8])  # 2 (the lab's unit) and 8 ranks; 4 ranks' logs are unit tests
def test_whole_rollout_at_tp_n_proves_p2p_from_ring_and_tree_lines(tp):
    unit, port = f"sglang-tp{tp}.service", 30000 + tp
    provision = run_playbook("lab-provision.yml", {"lab_serving_host_unit_name": unit, "lab_serving_host_tp_size": tp,
                                                   "lab_serving_host_port": port},
                             inventory="inventory/lab", local=False)
    assert provision.returncode == 0, provision.stdout[-2000:]
    try:
        before = lab("sha256sum", f"/etc/systemd/system/{unit}").stdout
        expected = {"model": "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8",
                    "model_revision": "2c9ba0a5b9c2d5c7b2a4e1f0a7d3c6e9b8f1a2d4", "tp_size": tp,
                    "context_length": 32768, "nccl_version": "2.28.9", "gpu_count": tp, "power_limit_w": 700}
        result = run_playbook("candidate.yml", {
            "serving_recipe_unit": unit, "rollout_engine_port": port, "serving_expected": expected,
            # Only this unit's engine processes count as its GPU workers (the TP 2 original runs beside it).
            "rollout_gpu_process_pattern": f"engine_double.py .*--port {port}",
            "rollout_cells": [{"name": "1k", "prompt_tokens": 1000}], "rollout_cell_requests": 3,
            "rollout_evidence_dir": EVIDENCE}, inventory="inventory/lab", local=False)
        assert result.returncode == 0, result.stdout[-4000:]
        assert lab("sha256sum", f"/etc/systemd/system/{unit}").stdout == before
        state = lab("systemctl", "show", "-p", "ActiveState,NRestarts", unit).stdout
        assert "ActiveState=active" in state and "NRestarts=0" in state
        runs = sorted((REPO / EVIDENCE / "lab-gpu-1").glob("rollout-*"), key=lambda p: p.stat().st_mtime)
        journal = json.loads((runs[-1] / "journal-excerpts.json").read_text())
        # The ring closes one way (tp-1 -> 0 only), and the proof still holds for every rank.
        proven = journal["candidate"]["nccl"]
        assert proven["p2p_in_effect"] and proven["ranks"] == list(range(tp)) and proven["p2p_reasons"] == []
        assert f"0<->{tp - 1}: 0->{tp - 1} none, {tp - 1}->0 P2P/IPC, no SHM" in proven["summary"]
        assert not journal["restored"]["nccl"]["p2p_in_effect"]  # the original runs with P2P disabled
    finally:
        lab("systemctl", "disable", "--now", unit, check=False)
        lab("rm", "-rf", f"/etc/systemd/system/{unit}", f"/var/lib/serving-rollout/{unit}")
        lab("systemctl", "daemon-reload")
