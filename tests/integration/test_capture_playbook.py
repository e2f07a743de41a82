"""capture.yml, run with ansible-playbook against fixture trees and the lab host."""

import json
import re

import pytest
from conftest import LAB_HOST, only_run_dir, run_playbook
from make_sysfs_tree import pcie_8gpu


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "host"
    pcie_8gpu(root)
    return root


def capture(tree, evidence, **extra):
    return run_playbook("capture.yml", {"capture_hosts": "localhost", "host_facts_sysfs_root": str(tree),
                                        "observation_writer_dir": str(evidence), **extra})


def test_capture_of_the_8gpu_fixture_writes_schema_versioned_observations(tree, tmp_path):
    result = capture(tree, tmp_path / "evidence")
    assert result.returncode == 0, result.stdout + result.stderr
    run = only_run_dir(tmp_path / "evidence", "localhost", "capture")
    assert re.match(r"capture-\d{8}T\d{6}Z-[a-z0-9]{4}$", run.name)
    docs = {p.name: json.loads(p.read_text()) for p in run.iterdir()}
    assert set(docs) == {"iommu-observation.json", "p2p-support-observation.json", "versions.json"}
    assert docs["iommu-observation.json"]["schema"] == "serving-rollout.iommu-observation/v1"
    assert docs["iommu-observation.json"]["iommu"]["gpu_count"] == 8
    verdict = docs["p2p-support-observation.json"]["verdict"]
    assert verdict["support_evidence"] is False
    assert sum("DMA-FQ" in b for b in verdict["blockers"]) == 8
    assert sum("ACS RR/CR" in b for b in verdict["blockers"]) == 8
    assert "not proven" in verdict["proof"]
    assert docs["versions.json"]["nccl_loaded"]["found"] is False


def test_capture_in_check_mode_changes_nothing_anywhere(tree, tmp_path):
    result = run_playbook("capture.yml", {"capture_hosts": "localhost", "host_facts_sysfs_root": str(tree),
                                          "observation_writer_dir": str(tmp_path / "evidence")}, check=True)
    assert result.returncode == 0, result.stdout
    assert not (tmp_path / "evidence" / "localhost").exists() or \
        not any((tmp_path / "evidence" / "localhost").iterdir())


def test_secrets_on_the_kernel_command_line_never_reach_evidence(tree, tmp_path):
    (tree / "proc/cmdline").write_text("intel_iommu=on rd.luks.key=SuperSecret123 auth_token=tok-999\n")
    assert capture(tree, tmp_path / "evidence").returncode == 0
    run = only_run_dir(tmp_path / "evidence", "localhost", "capture")
    text = "".join(p.read_text() for p in run.iterdir())
    assert "SuperSecret123" not in text and "tok-999" not in text
    assert "rd.luks.key=<redacted>" in text


def test_unpinned_image_is_refused_before_anything_runs(tree, tmp_path):
    result = capture(tree, tmp_path / "evidence", host_facts_nccl_runtime="docker",
                     host_facts_nccl_image="lmsysorg/sglang:latest")
    assert result.returncode != 0
    assert "lmsysorg/sglang:latest" in result.stdout and "pinned by digest" in result.stdout
    assert not (tmp_path / "evidence").exists()


def test_capture_against_the_lab_host_is_read_only(tmp_path):
    before = run_state()
    result = run_playbook("capture.yml", {"observation_writer_dir": str(tmp_path / "evidence"),
                                          "observation_writer_redact_host_identifiers": True},
                          inventory="inventory/lab", local=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"lab-gpu-1\s+: ok=\d+\s+changed=1 ", result.stdout)  # the run folder, on the controller
    run = only_run_dir(tmp_path / "evidence", "lab-gpu-1", "capture")
    support = json.loads((run / "p2p-support-observation.json").read_text())
    assert support["nvml"]["available"] is False and "nvidia-ml-py" in support["nvml"]["reason"]
    # Identifiers redacted on request (the controller's folder still names the host).
    assert re.match(r"<id-\d+>$", support["host"])
    assert not any("lab-gpu-1" in p.read_text() for p in run.iterdir())
    assert run_state() == before  # same invocation: the serving unit was not touched


def run_state():
    import subprocess

    return subprocess.run(["podman", "exec", LAB_HOST, "systemctl", "show", "-p",
                           "InvocationID,ActiveState,NRestarts", "sglang.service"],
                          capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("module, args, option", [
    ("nvml_info", "include_readings=perhaps", "include_readings"),
    ("p2p_check", "gpus=[0", "gpus"),
    ("nccl_info", "runtime=docker", "runtime, image"),
])
def test_wrong_option_types_fail_naming_the_option(module, args, option):
    import subprocess
    import sys
    from pathlib import Path

    from conftest import REPO

    result = subprocess.run([str(Path(sys.executable).parent / "ansible"), "-i", "localhost,", "-c", "local",
                             "-e", "ansible_python_interpreter=/usr/bin/python3", "localhost", "-m", module,
                             "-a", args], cwd=REPO, capture_output=True, text=True)
    assert result.returncode != 0 and option in result.stdout + result.stderr
