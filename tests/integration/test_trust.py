"""Trust under misuse on the lab host: a lock that two runs cannot share (same run id or not),
a killed run that the next run names, a candidate orphaned while running, and rollback.yml
recovering every one of them with its own one-line outcome."""

import contextlib
import json
import os
import re
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import LAB_HOST, run_playbook, start_lab_playbook, wait_for_lab_phase

LAB = LAB_HOST  # this test worker's lab host (conftest)
UNIT = "/etc/systemd/system/sglang.service"
CANDIDATE = "/etc/systemd/system/sglang-candidate.service"
FAULTS = "/etc/engine-double/faults/sglang-candidate.service"
LOCK = "/var/lib/serving-rollout/sglang.service.lock"
STATE = "/var/lib/serving-rollout/sglang.service/state.json"
EVIDENCE = tempfile.mkdtemp(prefix="trust-evidence-")
HOLD = "/run/serving-rollout-test-hold-ready"
FAST = {"rollout_ready_timeout_s": 30, "rollout_gpu_free_timeout_s": 20, "rollout_evidence_dir": EVIDENCE,
        "rollout_cell_requests": 2, "rollout_cells": [{"name": "1k", "prompt_tokens": 1000}]}


def lab(*command, check=True):
    return subprocess.run(["podman", "exec", LAB, *command], capture_output=True, text=True, check=check)


def show(unit="sglang.service"):
    out = lab("systemctl", "show", "-p", "ActiveState,UnitFileState,NRestarts,InvocationID,LoadState", unit).stdout
    return dict(line.split("=", 1) for line in out.splitlines())


def files_hash():
    return lab("sha256sum", UNIT, "/etc/sglang/sglang.env", "/etc/sglang/engine-double.env").stdout


def start_background(**extra):
    return start_lab_playbook("candidate.yml", {**FAST, **extra})


def wait_for_phase(phase, timeout=90):
    wait_for_lab_phase(STATE, phase, timeout)


def assert_restored(before_invocation, before_hash):
    state = show()
    assert state["ActiveState"] == "active" and state["UnitFileState"] == "enabled", state
    assert state["NRestarts"] == "0" and state["InvocationID"] != before_invocation, state
    assert files_hash() == before_hash
    assert lab("test", "-e", CANDIDATE, check=False).returncode == 1
    assert lab("test", "-e", LOCK, check=False).returncode == 1
    assert show("sglang-candidate.service")["ActiveState"] in ("inactive", "failed")


@pytest.fixture(autouse=True)
def lab_baseline():
    lab("rm", "-f", FAULTS, LOCK)
    if show()["ActiveState"] != "active":
        lab("systemctl", "start", "sglang.service")
    yield show()["InvocationID"], files_hash()
    lab("rm", "-f", FAULTS)


@contextlib.contextmanager
def candidate_held_before_ready():
    """The candidate is not ready until the block ends (the double's ready_after_removed fault): a run
    stays in candidate-starting for as long as the test needs, however long a loaded machine takes."""
    lab("sh", "-c", f"touch {HOLD} && mkdir -p /etc/engine-double/faults && "
                    f"echo ready_after_removed:{HOLD} > {FAULTS}")
    try:
        yield
    finally:
        lab("rm", "-f", HOLD)


def test_two_runs_with_the_same_run_id_cannot_share_the_lock(lab_baseline):
    with candidate_held_before_ready():
        first = start_background(run_id="20261130T120000Z", rollout_ready_timeout_s=300)
        wait_for_phase("candidate-starting")
        second = run_playbook("candidate.yml", {**FAST, "run_id": "20261130T120000Z"}, inventory="inventory/lab",
                              local=False)
        text = re.sub(r"\s+", " ", second.stdout)
        assert second.returncode != 0
        assert "another rollout holds /var/lib/serving-rollout/sglang.service.lock: run 20261130T120000Z by" in text
        assert "last recorded phase 'candidate-starting'" in text
        assert lab("test", "-e", CANDIDATE).returncode == 0  # the first run's candidate is untouched
    out, _ = first.communicate(timeout=300)
    assert first.returncode == 0, out[-3000:]
    assert_restored(*lab_baseline)


def test_killed_run_is_named_by_the_next_run_and_rollback_recovers(lab_baseline):
    with candidate_held_before_ready():
        proc = start_background(rollout_ready_timeout_s=300)
        wait_for_phase("candidate-starting")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        refused = run_playbook("candidate.yml", FAST, inventory="inventory/lab", local=False)
        text = re.sub(r"\s+", " ", refused.stdout)
        assert refused.returncode != 0
        assert "last recorded phase 'candidate-starting'" in text and "if it was killed, run rollback.yml" in text
        result = run_playbook("rollback.yml", {"rollout_evidence_dir": EVIDENCE}, inventory="inventory/lab",
                              local=False)
    assert result.returncode == 0, result.stdout[-3000:]
    assert_restored(*lab_baseline)
    assert "ROLLBACK: sglang.service restored and proven" in result.stdout


def test_a_candidate_whose_unit_file_vanished_while_running_is_still_stopped(lab_baseline):
    proc = start_background(rollout_cell_requests=40)
    wait_for_phase("candidate-running")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    lab("rm", "-f", CANDIDATE)
    lab("systemctl", "daemon-reload")
    orphan = show("sglang-candidate.service")
    assert orphan["LoadState"] == "not-found" and orphan["ActiveState"] == "active", orphan
    result = run_playbook("rollback.yml", {"rollout_evidence_dir": EVIDENCE}, inventory="inventory/lab", local=False)
    assert result.returncode == 0, result.stdout[-3000:]
    assert_restored(*lab_baseline)


def test_a_rotated_key_blocks_runs_until_the_original_is_renewed(lab_baseline):
    env = "/etc/sglang/sglang.env"
    saved = lab("cat", env).stdout
    assert run_playbook("renew.yml", inventory="inventory/lab", local=False).returncode == 0  # a snapshot to block
    try:
        lab("sh", "-c", f"sed -i 's/^SGLANG_API_KEY=.*/SGLANG_API_KEY=rotated-key-0b9f7c1e55d2/' {env}")
        blocked = run_playbook("candidate-render.yml", inventory="inventory/lab", local=False, check=True)
        text = re.sub(r"\s+", " ", blocked.stdout)
        assert blocked.returncode != 0 and "the original changed since its snapshot" in text
        assert "adopt the current original as the new restore recipe with playbooks/renew.yml" in text
        renewed = run_playbook("renew.yml", inventory="inventory/lab", local=False)
        text = re.sub(r"\s+", " ", renewed.stdout)
        assert renewed.returncode == 0, renewed.stdout[-3000:]
        assert f"{env}: variables changed: SGLANG_API_KEY" in text and "RENEWED: the current sglang.service" in text
        assert "rotated-key-0b9f7c1e55d2" not in renewed.stdout + renewed.stderr  # names only, never values
        again = run_playbook("candidate-render.yml", inventory="inventory/lab", local=False, check=True)
        assert again.returncode == 0, again.stdout[-3000:]
    finally:
        subprocess.run(["podman", "exec", "-i", LAB, "sh", "-c", f"cat > {env} && chmod 600 {env}"], input=saved,
                       text=True, check=True)
        assert run_playbook("renew.yml", inventory="inventory/lab", local=False).returncode == 0


def test_renew_is_refused_while_a_candidate_runs(lab_baseline):
    lab("sh", "-c", f"mkdir -p /etc/engine-double/faults && echo startup:10 > {FAULTS}")
    proc = start_background()
    wait_for_phase("candidate-starting")
    refused = run_playbook("renew.yml", inventory="inventory/lab", local=False)
    assert refused.returncode != 0 and "another rollout holds" in refused.stdout
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]
    assert_restored(*lab_baseline)


def test_renew_is_refused_while_a_candidate_unit_is_loaded_and_changes_nothing(lab_baseline):
    """No run holds the lock, but a candidate unit is installed (loaded, not running): renew refuses by name
    before it reads or writes anything, and releases its lock."""
    assert run_playbook("renew.yml", inventory="inventory/lab", local=False).returncode == 0  # a snapshot to keep
    manifest = lab("sha256sum", "/var/lib/serving-rollout/sglang.service/manifest.json").stdout
    lab("sh", "-c", f"printf '[Service]\\nExecStart=/bin/sleep infinity\\n' > {CANDIDATE} && systemctl daemon-reload")
    try:
        refused = run_playbook("renew.yml", inventory="inventory/lab", local=False)
        text = re.sub(r"\s+", " ", refused.stdout)
        assert refused.returncode != 0, text[-3000:]
        assert "sglang-candidate.service is loaded/inactive: run rollback.yml first, then renew" in text, text[-3000:]
        assert lab("sha256sum", "/var/lib/serving-rollout/sglang.service/manifest.json").stdout == manifest
        assert lab("test", "-e", LOCK, check=False).returncode == 1
        assert show()["InvocationID"] == lab_baseline[0] and files_hash() == lab_baseline[1]
    finally:
        lab("sh", "-c", f"rm -f {CANDIDATE} && systemctl daemon-reload")


def test_rollback_with_a_malformed_snapshot_manifest_fails_naming_it_and_changes_nothing(lab_baseline):
    """A snapshot whose manifest is not JSON (a disk fault, a hand edit): rollback.yml names the file and
    stops before it stops or starts anything; its lock is released."""
    manifest = "/var/lib/serving-rollout/sglang.service/manifest.json"
    assert run_playbook("renew.yml", inventory="inventory/lab", local=False).returncode == 0
    saved = lab("cat", manifest).stdout
    lab("sh", "-c", f"printf '{{\"unit\": \"sglang.service\", \"files\": [' > {manifest}")
    try:
        failed = run_playbook("rollback.yml", inventory="inventory/lab", local=False)
        text = re.sub(r"\s+", " ", failed.stdout)
        assert failed.returncode != 0, text[-3000:]
        assert f"cannot read the snapshot {manifest}: " in text, text[-3000:]
        assert show()["InvocationID"] == lab_baseline[0] and show()["ActiveState"] == "active"
        assert files_hash() == lab_baseline[1] and lab("test", "-e", LOCK, check=False).returncode == 1
    finally:
        subprocess.run(["podman", "exec", "-i", LAB, "sh", "-c", f"cat > {manifest}"], input=saved, text=True,
                       check=True)


@pytest.fixture
def small_disk():
    """A tmpfs for the evidence folder, of a given size or read-only (root on the controller)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root on the controller")
    mounts = []

    def mount(options):
        path = tempfile.mkdtemp(prefix="evidence-disk-")
        subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", path], check=True)
        mounts.append(path)
        return path
    yield mount
    for path in mounts:
        subprocess.run(["umount", path], check=False)


def test_read_only_evidence_folder_is_refused_before_any_change(lab_baseline, small_disk):
    folder = small_disk("ro,size=1m")
    result = run_playbook("candidate.yml", {**FAST, "rollout_evidence_dir": folder}, inventory="inventory/lab",
                          local=False)
    text = re.sub(r"\s+", " ", result.stdout)
    assert result.returncode != 0
    assert f"evidence folder {folder} is not writable: Read-only file system" in text, text[-2000:]
    assert show()["InvocationID"] == lab_baseline[0]  # nothing on the host changed
    assert "Traceback" not in result.stdout + result.stderr


def test_full_evidence_disk_mid_run_says_restored_first_and_keeps_the_record_on_the_host(lab_baseline, small_disk):
    folder = small_disk("size=24k")
    result = run_playbook("candidate.yml", {**FAST, "rollout_evidence_dir": folder,
                                            "rollout_evidence_min_free_mib": 0},
                          inventory="inventory/lab", local=False)
    text = re.sub(r"\s+", " ", result.stdout)
    assert result.returncode != 0
    host_line = text.index("HOST: sglang.service was restored and proven")
    assert host_line < text.index("EVIDENCE NOT WRITTEN: cannot write")
    assert "No space left on device" in text and "Traceback" not in result.stdout + result.stderr
    assert "the original sglang.service was restored and proven; the evidence could not be written" in text
    record = json.loads(lab("cat", "/var/lib/serving-rollout/sglang.service/last-run.json").stdout)
    assert record["restored"] is True and record["decision"]["decision"] in ("acceptable", "reject", "inconclusive")
    assert record["restoration"]["state_after"]["ActiveState"] == "active"
    assert_restored(*lab_baseline)
    # No truncated document is left behind: every file there parses.
    for path in Path(folder).rglob("*.json"):
        json.loads(path.read_text())
