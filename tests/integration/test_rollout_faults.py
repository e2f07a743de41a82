"""candidate.yml and rollback.yml on the lab host, under the engine double's faults.

Every case ends with the original restored and proven (or, when the original was edited
during the run, nothing overwritten), and a message naming the cause.
"""

import json
import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from conftest import run_playbook, start_lab_playbook, wait_for_lab_phase

LAB = "serving-lab-gpu-1"
UNIT = "/etc/systemd/system/sglang.service"
FAULTS = "/etc/engine-double/faults/sglang-candidate.service"
LOCK = "/var/lib/serving-rollout/sglang.service.lock"
STATE = "/var/lib/serving-rollout/sglang.service/state.json"
EVIDENCE = tempfile.mkdtemp(prefix="rollout-faults-evidence-")
FAST = {"rollout_ready_timeout_s": 10, "rollout_gpu_free_timeout_s": 20, "rollout_evidence_dir": EVIDENCE,
        "rollout_cell_requests": 3}


def lab(*command, check=True):
    return subprocess.run(["podman", "exec", LAB, *command], capture_output=True, text=True, check=check)


def show(unit="sglang.service"):
    out = lab("systemctl", "show", "-p", "ActiveState,UnitFileState,NRestarts,InvocationID", unit).stdout
    return dict(line.split("=", 1) for line in out.splitlines())


def files_hash():
    return lab("sha256sum", UNIT, "/etc/sglang/sglang.env", "/etc/sglang/engine-double.env").stdout


def inject(fault):
    lab("sh", "-c", f"mkdir -p /etc/engine-double/faults && echo '{fault}' > {FAULTS}")


def rollout(**extra):
    return run_playbook("candidate.yml", {**FAST, **extra}, inventory="inventory/lab", local=False)


def assert_restored(before_invocation, before_hash):
    state = show()
    assert state["ActiveState"] == "active" and state["UnitFileState"] == "enabled", state
    assert state["NRestarts"] == "0" and state["InvocationID"] != before_invocation, state
    assert files_hash() == before_hash
    assert lab("test", "-e", "/etc/systemd/system/sglang-candidate.service", check=False).returncode == 1
    assert lab("test", "-e", LOCK, check=False).returncode == 1
    assert json.loads(lab("cat", STATE).stdout)["phase"] == "restored"


@pytest.fixture(autouse=True)
def lab_baseline():
    lab("rm", "-f", FAULTS, LOCK)
    if show()["ActiveState"] != "active":
        lab("systemctl", "start", "sglang.service")
    before = (show()["InvocationID"], files_hash())
    yield before
    lab("rm", "-f", FAULTS)
    lab("pkill", "-f", "engine-double-worker", check=False)


def test_success_runs_the_candidate_with_p2p_and_restores(lab_baseline):
    result = rollout(rollout_cell_progress_every=2, rollout_bracket_requests=3)
    assert result.returncode == 0, result.stdout[-3000:]
    assert_restored(*lab_baseline)
    assert "FAILED" not in result.stdout  # waits for health and GPUs print no failed retries on success
    # Progress between the chunks of each cell (request k of n, elapsed, running median), then a summary;
    # the second baseline bracket is one chunk (2 requests).
    output = re.sub(r"\s+", " ", result.stdout)
    for arm, n in (("baseline-1", 3), ("candidate", 3), ("baseline-2", 2)):
        if n > 2:
            assert re.search(rf"cell 1k {arm}: request 2 of {n}, elapsed [0-9.]+ s, running median E2E [0-9.]+ ms",
                             output), output[-3000:]
        assert re.search(rf"cell 1k {arm}: n={n}, median TTFT [0-9.]+ ms, median E2E [0-9.]+ ms, prompt tokens \d+, "
                         r"0 failed, 0 contract violations", output), output[-3000:]
    candidate_log = lab("journalctl", "-u", "sglang-candidate.service", "-o", "cat", "--no-pager").stdout
    assert "via P2P/IPC" in candidate_log


@pytest.mark.parametrize("fault, cause", [
    ("fail_at_start", "Wait for the candidate's health endpoint"),
    ("hang_before_ready", "Wait for the candidate's health endpoint"),
    ("crash_after:1", "gate json failed (candidate)"),
    ("ignore_p2p",
     "no effect: nccl_p2p not seen in the candidate's log; NCCL transport ['0<->1: SHM both directions']"),
    ("fail_requests", "gate smoke failed (candidate): HTTP 500"),
])
def test_candidate_faults_restore_the_original_and_name_the_cause(lab_baseline, fault, cause):
    inject(fault)
    result = rollout()
    assert result.returncode != 0
    message = re.sub(r"\s+", " ", result.stdout)
    assert "failed and the original was restored and proven; cause:" in message
    assert cause in message, message[-3000:]
    assert_restored(*lab_baseline)


def test_a_candidate_that_crashes_during_its_cells_fails_the_run_and_is_never_acceptable(lab_baseline):
    """The field case: the candidate passes its gates, then dies in its cells and systemd restarts it.
    Its process identity changed, so the run fails with that cause, restores, and decides reject."""
    inject("crash_after:8")  # the gates send fewer; the cells meet the crash
    result = rollout(rollout_cell_requests=6, rollout_cell_progress_every=2, rollout_bracket_requests=4)
    assert result.returncode != 0
    message = re.sub(r"\s+", " ", result.stdout)
    assert "failed and the original was restored and proven; cause:" in message, message[-3000:]
    assert re.search(r"the candidate engine (restarted|exited) during the (cells|last cell): ActiveState \w+, "
                     r"MainPID \d+ -> \d+, NRestarts \d+ -> \d+", message), message[-3000:]
    assert_restored(*lab_baseline)
    run = sorted(Path(EVIDENCE).glob("lab-gpu-1/rollout-*"), key=lambda p: p.stat().st_mtime)[-1]
    decision = json.loads((run / "decision.json").read_text())
    assert decision["verdict"] == "reject" and decision["promotion_allowed"] is False, decision
    card = (run / "result-card.md").read_text()
    assert "Retained failures: the run failed: " in card and ("restarted" in card or "exited" in card), card


def test_straggler_after_stop_is_waited_for(lab_baseline):
    # The straggler outlives any delay between the stop and the wait on a loaded machine (25 s),
    # and the wait's limit is far above that (90 s): no timing margin a busy machine can erase.
    inject("straggler:25")
    result = rollout(rollout_gpu_free_timeout_s=90)
    assert result.returncode == 0, result.stdout[-3000:]
    waits = re.findall(r"waited ([0-9.]+) s for GPU workers to exit", result.stdout)
    journal = lab("journalctl", "-u", "sglang-candidate.service", "-n", "20", "--no-pager", "-o", "cat",
                  check=False).stdout
    assert waits and max(float(w) for w in waits) >= 1, (waits, journal)
    assert "FAILED - RETRYING" not in result.stdout  # a wait that ends well prints no failures
    assert_restored(*lab_baseline)


def test_second_concurrent_run_is_refused_naming_the_holder(lab_baseline):
    lock = json.dumps({"run_id": "20261129T000000Z", "holder": "alice@ops-1 candidate.yml",
                       "since": "2026-11-29T00:00:00Z"})
    lab("sh", "-c", f"mkdir -p /var/lib/serving-rollout && echo '{lock}' > {LOCK}")
    try:
        result = rollout()
        assert result.returncode != 0
        assert ("another rollout holds /var/lib/serving-rollout/sglang.service.lock: run 20261129T000000Z "
                "by alice@ops-1 candidate.yml since 2026-11-29T00:00:00Z") in result.stdout
        assert show()["InvocationID"] == lab_baseline[0]  # nothing touched
    finally:
        lab("rm", "-f", LOCK)


def start_background(**extra):
    return start_lab_playbook("candidate.yml", {**FAST, **extra})


def wait_for_phase(phase, timeout=90):
    wait_for_lab_phase(STATE, phase, timeout)


def test_killed_mid_candidate_then_rollback_restores(lab_baseline):
    inject("startup:15")
    proc = start_background()
    wait_for_phase("candidate-starting")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert show()["ActiveState"] != "active"  # the original is down, the candidate starting
    result = run_playbook("rollback.yml", inventory="inventory/lab", local=False)
    assert result.returncode == 0, result.stdout[-3000:]
    assert_restored(*lab_baseline)
    restored = show()["InvocationID"]
    again = run_playbook("rollback.yml", inventory="inventory/lab", local=False)
    assert again.returncode == 0 and show()["InvocationID"] == restored
    # A second rollback proves again and changes nothing.
    assert re.search(r"lab-gpu-1\s+: ok=\d+\s+changed=0 ", again.stdout), again.stdout[-2000:]


def test_lost_controller_the_host_watchdog_restores_within_its_lease(lab_baseline):
    """The controller loses the host while the candidate serves (sshd stopped, the controller gone):
    nothing renews the lease, so the host-side watchdog restores the original itself; rollback.yml
    afterwards proves it and changes nothing."""
    proc = start_background(rollout_lease_s=15, rollout_cell_requests=12, rollout_cell_progress_every=2)
    try:
        wait_for_phase("candidate-running")
        lab("systemctl", "stop", "ssh.service", "ssh.socket", check=False)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 180  # the lease (15 s) and a restart, on a loaded machine too
        while time.monotonic() < deadline:
            if lab("test", "-e", LOCK, check=False).returncode == 1 and show()["ActiveState"] == "active":
                break
            time.sleep(1)
        assert show()["ActiveState"] == "active", show()
        records = lab("sh", "-c", "cat /var/lib/serving-rollout/sglang.service/watchdog-*.json").stdout
        assert '"original": "active"' in records, records
        journal = lab("journalctl", "-u", "serving-rollout-watchdog-sglang.service", "-o", "cat", "--no-pager").stdout
        assert "the controller is gone; restoring sglang.service" in journal, journal[-2000:]
    finally:
        lab("systemctl", "start", "ssh.service", check=False)
        lab("sh", "-c", "rm -f /var/lib/serving-rollout/sglang.service/watchdog-*.json")
    result = run_playbook("rollback.yml", inventory="inventory/lab", local=False)
    assert result.returncode == 0, result.stdout[-3000:]
    assert re.search(r"lab-gpu-1\s+: ok=\d+\s+changed=0 ", result.stdout), result.stdout[-3000:]
    assert_restored(*lab_baseline)


CRASH_REQUEST = """
import json, time, urllib.request
for _ in range(100):
    try:
        urllib.request.urlopen("http://127.0.0.1:30000/health_generate", timeout=2)
        break
    except OSError:
        time.sleep(0.2)
env = open("/etc/sglang/sglang.env").read().split()
key = dict(line.split("=", 1) for line in env if "=" in line)["SGLANG_API_KEY"]
body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).encode()
request = urllib.request.Request("http://127.0.0.1:30000/v1/chat/completions", body,
                                 {"Content-Type": "application/json", "Authorization": "Bearer " + key})
urllib.request.urlopen(request, timeout=10).read()
"""


def test_rollback_restarts_an_original_that_crashed_and_came_back(lab_baseline):
    lab("sh", "-c", "echo crash_after:1 > /etc/engine-double/faults/sglang.service")
    try:
        lab("systemctl", "restart", "sglang.service")
        lab("python3", "-c", CRASH_REQUEST, check=False)
    finally:
        lab("rm", "-f", "/etc/engine-double/faults/sglang.service")
    for _ in range(60):  # systemd brings it back after RestartSec
        if show()["NRestarts"] != "0" and show()["ActiveState"] == "active":
            break
        time.sleep(0.5)
    assert show()["NRestarts"] == "1", show()
    result = run_playbook("rollback.yml", inventory="inventory/lab", local=False)
    assert result.returncode == 0, result.stdout[-3000:]
    state = show()
    assert state["ActiveState"] == "active" and state["NRestarts"] == "0", state
    assert files_hash() == lab_baseline[1]


def test_original_edited_during_the_run_is_never_overwritten(lab_baseline):
    inject("startup:6")
    proc = start_background()
    wait_for_phase("candidate-starting")
    lab("sh", "-c", f"cp {UNIT} /tmp/unit.bak && echo '# edited by an operator during the run' >> {UNIT}")
    try:
        output, _ = proc.communicate(timeout=180)
        assert proc.returncode != 0
        text = re.sub(r"\s+", " ", output)
        assert "the original changed since its snapshot; nothing was overwritten: /etc/systemd/system/sglang.service" \
            in text
        assert "+# edited by an operator during the run" in output  # both versions shown
        assert "edited by an operator" in lab("cat", UNIT).stdout  # not overwritten
        assert show()["ActiveState"] != "active"  # nothing started from a changed original
    finally:
        lab("sh", "-c", f"cp /tmp/unit.bak {UNIT} && rm -f /tmp/unit.bak && systemctl daemon-reload")
    result = run_playbook("rollback.yml", inventory="inventory/lab", local=False)
    assert result.returncode == 0, result.stdout[-3000:]
    assert_restored(*lab_baseline)


@pytest.mark.parametrize("extra, named", [
    ({"rollout_cell_progress_every": 0}, "rollout_cell_progress_every=0"),
    ({"rollout_cells": [{"name": "4k", "prompt_tokens": 40}, {"name": "4k", "prompt_tokens": 80}]},
     "rollout_cells names ['4k', '4k']"),
    ({"rollout_cells": [{"name": "4k; rm", "prompt_tokens": 40}]}, "bad cell {'name': '4k; rm'"),
    ({"rollout_bracket_requests": 1}, "rollout_bracket_requests=1 (at least 2 in a sequential cell)"),
])
def test_bad_cell_settings_are_refused_before_any_change(lab_baseline, extra, named):
    result = rollout(**extra)
    assert result.returncode != 0
    assert named in result.stdout, result.stdout[-3000:]
    state = show()
    assert state["InvocationID"] == lab_baseline[0] and files_hash() == lab_baseline[1]
    assert lab("test", "-e", LOCK, check=False).returncode == 1


def test_failed_preflight_stops_before_any_change_and_releases_the_lock(lab_baseline):
    expected = {"model": "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "tp_size": 4}
    result = rollout(rollout_expected=expected)
    assert result.returncode != 0
    message = re.sub(r"\s+", " ", result.stdout)
    assert "stopped before any change; the original sglang.service was not touched; cause:" in message
    assert "preflight check 'TP size' failed: observed 2, expected 4" in message, message[-3000:]
    state = show()
    assert state["InvocationID"] == lab_baseline[0] and files_hash() == lab_baseline[1]
    assert lab("test", "-e", LOCK, check=False).returncode == 1
    assert lab("test", "-e", "/etc/systemd/system/sglang-candidate.service", check=False).returncode == 1
    # The next run is not refused by a lock left behind.
    assert rollout(rollout_cell_requests=2).returncode == 0
