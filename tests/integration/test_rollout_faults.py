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
from conftest import (
    LAB_HOST,
    REPO,
    lab,
    lab_files_hash,
    lab_unit_state,
    run_playbook,
    start_lab_playbook,
    wait_for_lab_phase,
)

LAB = LAB_HOST  # this test worker's lab host (conftest)
UNIT = "/etc/systemd/system/sglang.service"
FAULTS = "/etc/engine-double/faults/sglang-candidate.service"
LOCK = "/var/lib/serving-rollout/sglang.service.lock"
STATE = "/var/lib/serving-rollout/sglang.service/state.json"
EVIDENCE = tempfile.mkdtemp(prefix="rollout-faults-evidence-")
# One small cell and no endurance cell: these tests are about faults and restoration; the cells' statistics and
# the endurance cell have their own tests (test_measurement_lab.py, test_evidence_promotion.py).
FAST = {"rollout_ready_timeout_s": 10, "rollout_gpu_free_timeout_s": 20, "rollout_evidence_dir": EVIDENCE,
        "rollout_cell_requests": 3, "rollout_cells": [{"name": "1k", "prompt_tokens": 1000}], "rollout_endurance_s": 0}


def inject(fault):
    lab("sh", "-c", f"mkdir -p /etc/engine-double/faults && echo '{fault}' > {FAULTS}")


def rollout(**extra):
    return run_playbook("candidate.yml", {**FAST, **extra}, inventory="inventory/lab", local=False)


def assert_restored(before_invocation, before_hash):
    state = lab_unit_state()
    assert state["ActiveState"] == "active" and state["UnitFileState"] == "enabled", state
    assert state["NRestarts"] == "0" and state["InvocationID"] != before_invocation, state
    assert lab_files_hash() == before_hash
    assert lab("test", "-e", "/etc/systemd/system/sglang-candidate.service", check=False).returncode == 1
    assert lab("systemctl", "is-failed", "--quiet", "sglang-candidate.service", check=False).returncode != 0, \
        "a killed or crashed candidate left systemd degraded"
    assert lab("test", "-e", LOCK, check=False).returncode == 1
    assert json.loads(lab("cat", STATE).stdout)["phase"] == "restored"


def clean_baseline():
    """The host as a test starts from it: no fault, no lock, no candidate, the original serving; its identity."""
    lab("rm", "-f", FAULTS, LOCK)
    lab("systemctl", "stop", "sglang-candidate.service", check=False)  # what a failed test may have left running
    if lab_unit_state()["ActiveState"] != "active":
        lab("systemctl", "start", "sglang.service")
    return lab_unit_state()["InvocationID"], lab_files_hash()


def clean_up():
    lab("rm", "-f", FAULTS)
    lab("pkill", "-f", "engine-double-worker", check=False)


@pytest.fixture(autouse=True)
def lab_baseline():
    yield clean_baseline()
    clean_up()


# One successful rollout for the cases that each end in one (the plain success's progress lines, a slow start
# that logs its loading, a candidate that ignores its stop): a lab rollout costs about half a minute of this
# machine's CPU, so the cases that need the same run share it (docs/testing.md); they run on one worker.
SHARED_SUCCESS = pytest.mark.xdist_group("test_rollout_faults_success")


@pytest.fixture(scope="module")
def successful_run():
    """candidate.yml with a candidate that needs 16 s to start, logging a line each second (over a 10 s stall
    limit), and that ignores SIGTERM (its stop is the tool's 5 s deadline); the original restored and proven.
    (the run, the candidate's journal)"""
    before = clean_baseline()
    since = lab("date", "+@%s").stdout.strip()  # this run's journal only (the host keeps earlier tests' runs)
    inject("startup:16,ignore_sigterm")
    try:
        result = rollout(rollout_cell_progress_every=2, rollout_bracket_requests=3, rollout_ready_timeout_s=120,
                         rollout_boot_stall_s=10, rollout_stop_timeout_s=5)
        assert result.returncode == 0, result.stdout[-3000:]
        assert_restored(*before)
        return result, lab("journalctl", "-u", "sglang-candidate.service", "--since", since, "-o", "cat",
                           "--no-pager").stdout
    finally:
        clean_up()


@SHARED_SUCCESS
def test_success_runs_the_candidate_with_p2p_and_restores(successful_run):
    result, candidate_log = successful_run
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
    assert "via P2P/IPC" in candidate_log


@pytest.mark.parametrize("fault, cause", [
    ("fail_at_start", "cause: RuntimeError: injected fault: fail_at_start"),
    ("crash_after:1", "gate json failed (candidate)"),
    ("ignore_p2p",
     "no effect: p2p (nccl_p2p): expected NCCL P2P both directions on every rank pair, no SHM; the engine showed "
     "NCCL transport ['0<->1: SHM both directions']"),
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


def test_a_failure_after_the_first_lease_but_before_the_stop_leaves_the_original_serving_and_says_so(lab_baseline):
    """A failure inside the candidate phase before the original was stopped (here a folder where the
    host-side watchdog's script goes, which would have taken the script inside it and left no watchdog):
    the original never stopped, so the same invocation serving is the proof, never a false 'NOT restored'."""
    watchdog = "/var/lib/serving-rollout/sglang.service/watchdog.py"
    lab("sh", "-c", f"rm -rf {watchdog} && mkdir -p {watchdog}")  # a folder where the script goes
    try:
        result = rollout()
    finally:
        lab("rm", "-rf", watchdog, check=False)
    assert result.returncode != 0
    message = re.sub(r"\s+", " ", result.stdout)
    assert ("failed and the original was restored and proven; cause: Arm the host-side watchdog (its first lease) "
            "and record the phase stopping-original: start the host-side watchdog") in message \
        and "the watchdog goes to /var/lib/serving-rollout/sglang.service/watchdog.py, where a folder is " \
            "(remove it)" in message, message[-3000:]
    state = lab_unit_state()
    assert state["ActiveState"] == "active" and state["InvocationID"] == lab_baseline[0], state  # never stopped
    assert lab_files_hash() == lab_baseline[1]
    assert lab("test", "-e", "/etc/systemd/system/sglang-candidate.service", check=False).returncode == 1
    assert lab("test", "-e", LOCK, check=False).returncode == 1


def test_a_candidate_that_crashes_during_its_cells_fails_the_run_and_is_never_acceptable(lab_baseline):
    """The field case: the candidate passes its gates, then dies in its cells and systemd restarts it.
    Its process identity changed, so the run fails with that cause, restores, and decides reject."""
    # the five gates and the numerics probe's eight prompts come first: the cells' second request meets the crash
    inject("crash_after:15")
    result = rollout(rollout_cell_requests=6, rollout_cell_progress_every=2, rollout_bracket_requests=4,
                     rollout_numerics_prompts=8)
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


@SHARED_SUCCESS
def test_boot_watchdog_a_slow_start_that_progresses_is_not_a_hang(successful_run):
    """A candidate that needs 16 s and logs its loading is slow, not hung: it passes under a 10 s stall limit."""
    _, candidate_log = successful_run  # the run passed (the fixture asserts it)
    # its 16 one-second shards, each a line: 16 s of start-up, longer than the stall limit
    assert "Loading safetensors checkpoint shards: 16/16" in candidate_log, candidate_log[-2000:]


# hang_before_ready: named as a hang in its phase, restored (the slow start that passes is the shared run's).
def test_boot_watchdog_a_hang_is_named_in_its_phase(lab_baseline):
    """One that logs one line and then nothing is a hang, named with that line, long before the time-out."""
    inject("hang_before_ready")
    started = time.monotonic()
    hung = rollout(rollout_ready_timeout_s=900, rollout_boot_stall_s=8)
    assert hung.returncode != 0 and time.monotonic() - started < 600
    message = re.sub(r"\s+", " ", hung.stdout)
    assert re.search(r"hang: the engine logged nothing for \d+ s \(stall limit 8\.0 s\) with its process alive",
                     message), message[-3000:]
    # named with its phase (the engine adapter's reading of the start so far) and its last line
    assert "last log line: '[distributed-init] waiting for workers (injected fault: hang_before_ready)'" in message, \
        message[-3000:]
    assert "failed and the original was restored and proven" in message
    state = lab_unit_state()
    assert state["ActiveState"] == "active" and state["UnitFileState"] == "enabled"


def test_a_crash_signature_under_a_living_process_stops_the_wait_with_its_cause(lab_baseline):
    """A rank's collective times out and the server lives on, never ready (vLLM's shape of it: a worker
    dies under a living API server). The boot watchdog reads the crash in the log and stops the wait at
    once (not at the 240 s stall limit or the 300 s time-out), naming phase and cause."""
    inject("worker_died_at_start")
    result = rollout(rollout_ready_timeout_s=300, rollout_boot_stall_s=240)
    assert result.returncode != 0
    message = re.sub(r"\s+", " ", result.stdout)
    assert re.search(r"sglang-candidate\.service logged a crash \(phase [\w-]+\) with its process alive; cause: "
                     r"\[E ProcessGroupNCCL\.cpp:563\] \[Rank 1\] Watchdog caught collective operation "
                     r"timeout", message), message[-3000:]
    assert "failed and the original was restored and proven" in message
    assert_restored(*lab_baseline)


def test_warnings_of_the_originals_own_start_are_noise_and_a_new_one_fails_the_candidate(lab_baseline):
    """An NCCL WARN the healthy original also prints (its baseline) is shown, not fatal; the same WARN
    only in the candidate's start is an error new against the original: the candidate fails at start."""
    original_faults = "/etc/engine-double/faults/sglang.service"
    lab("sh", "-c", f"mkdir -p /etc/engine-double/faults && echo warn_at_start > {original_faults}")
    try:
        lab("systemctl", "restart", "sglang.service")
        inject("warn_at_start")
        both = rollout()
        assert both.returncode == 0, both.stdout[-3000:]
        run = sorted(Path(EVIDENCE).glob("lab-gpu-1/rollout-*"), key=lambda p: p.stat().st_mtime)[-1]
        checks = json.loads((run / "preflight.json").read_text())["checks"]
        journal = next(c for c in checks if c["check"] == "no crash in the current invocation's journal")
        assert journal["verdict"] == "pass", journal
        noise = journal["observed"]["warnings (baseline noise)"]
        assert any("NCCL WARN Failed to find CUDA library" in w for w in noise), journal
    finally:
        lab("rm", "-f", original_faults)
        lab("systemctl", "restart", "sglang.service")
    before = (lab_unit_state()["InvocationID"], lab_files_hash())
    inject("warn_at_start")
    only_candidate = rollout()
    assert only_candidate.returncode != 0
    message = re.sub(r"\s+", " ", only_candidate.stdout)
    assert re.search(r"candidate failed at start: [\w-]+: error lines new against the original: .*"
                     r"NCCL WARN Failed to find CUDA library", message), message[-3000:]
    assert_restored(*before)


@SHARED_SUCCESS
def test_a_candidate_that_ignores_its_stop_is_killed_at_the_tools_deadline(successful_run):
    """A vLLM API server with an open client stream never exits on SIGTERM. The tool's own deadline (5 s
    here) escalates long before the unit's TimeoutStopSec (30 s) would, and the original is restored."""
    result, journal = successful_run
    message = re.sub(r"\s+", " ", result.stdout)
    took = re.search(r"sglang-candidate\.service ignored its stop for 5 s \(an engine waiting for open streams does\); "
                     r"killed \(SIGKILL to every process of the unit\), stopped in ([0-9.]+) s", message)
    assert took and float(took.group(1)) < 30, message[-3000:]
    assert "waiting for the open client streams to close (injected fault)" in journal


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


def test_a_straggler_that_outlives_the_wait_is_terminated_named_and_the_original_serves(lab_baseline):
    """The commonest real failure: an orphaned worker of the stopped candidate keeps the GPUs. It is
    the engine's own (its title), so after the wait it is terminated and named, and the original
    serves again: never a host left serving nothing."""
    inject("straggler:600")
    result = rollout(rollout_gpu_free_timeout_s=3, rollout_straggler_grace_s=5)
    assert result.returncode == 0, result.stdout[-3000:]
    message = re.sub(r"\s+", " ", result.stdout)
    named = re.search(r"terminated 1 process\(es\) of the stopped engine still holding the GPUs: "
                      r"(\d+) by SIG(TERM|KILL)", message)
    assert named, message[-3000:]
    assert lab("pgrep", "-f", "engine-double-worker", check=False).returncode == 1  # nothing of it left
    assert_restored(*lab_baseline)
    run = sorted(Path(EVIDENCE).glob("lab-gpu-1/rollout-*"), key=lambda p: p.stat().st_mtime)[-1]
    restoration = json.loads((run / "restoration.json").read_text())
    assert [p["pid"] for p in restoration["stragglers_terminated"]] == [int(named.group(1))]


@pytest.mark.parametrize("free_kib, min_free_mib, said", [
    (0, 0, "cannot write the lock /var/lib/serving-rollout/sglang.service.lock: No space left on device"),
    (200, 5, "cannot take the lock: the state folder /var/lib/serving-rollout has"),
])
def test_a_full_state_folder_refuses_naming_the_path_and_leaves_nothing_behind(lab_baseline, free_kib, min_free_mib,
                                                                              said):
    """The host's state folder full (a small filesystem, filled up): no room even for the lock (the free-space
    check switched off), or less room than a run needs. Refused before any change, the path and its free
    space named; no lock, partial snapshot, secret-bearing copy or temporary file left."""
    state = "/var/lib/serving-rollout"
    lab("sh", "-c", f"mount -t tmpfs -o size=256k tmpfs {state} && "
                    f"dd if=/dev/zero of={state}/filler bs=1k count={256 - free_kib} 2>/dev/null; df -k {state}")
    try:
        result = rollout(rollout_state_min_free_mib=min_free_mib)
        left = lab("find", state, "-type", "f", "-not", "-name", "filler").stdout.split()
    finally:
        lab("systemctl", "stop", "serving-rollout-watchdog-sglang.service", check=False)
        lab("umount", "-l", state, check=False)
    assert result.returncode != 0
    message = re.sub(r"\s+", " ", result.stdout)
    assert said in message and re.search(rf"{state}(:| has) [0-9.]+ MiB free", message), message[-3000:]
    assert left == [], left  # no lock, no partial snapshot, no copy of the secret-bearing env file, no temp file
    assert lab_unit_state()["InvocationID"] == lab_baseline[0]  # the original was never touched


def test_second_concurrent_run_is_refused_naming_the_holder(lab_baseline):
    lock = json.dumps({"run_id": "20261129T000000Z", "holder": "alice@ops-1 candidate.yml",
                       "since": "2026-11-29T00:00:00Z"})
    lab("sh", "-c", f"mkdir -p /var/lib/serving-rollout && echo '{lock}' > {LOCK}")
    try:
        result = rollout()
        assert result.returncode != 0
        assert ("another rollout holds /var/lib/serving-rollout/sglang.service.lock: run 20261129T000000Z "
                "by alice@ops-1 candidate.yml since 2026-11-29T00:00:00Z") in result.stdout
        # the controller's own look at the holder (an older lock names no controller process)
        message = re.sub(r"\s+", " ", result.stdout)
        assert "Holder: the lock names no controller process" in message, message[-3000:]
        assert lab_unit_state()["InvocationID"] == lab_baseline[0]  # nothing touched
    finally:
        lab("rm", "-f", LOCK)


def test_a_stale_lock_whose_candidate_runs_anyway_is_refused_and_removed(lab_baseline):
    """A lock from before this boot, but its candidate runs (someone started it after the reboot): the run
    refuses, naming the candidate's state and rollback.yml, removes the stale lock, and touches nothing else."""
    lock = json.dumps({"token": "t-old", "run_id": "20261129T000000Z", "holder": "alice@ops-1 candidate.yml",
                       "boot": "another-boot/1", "since": "2026-11-29T00:00:00Z"})
    lab("sh", "-c", f"mkdir -p /var/lib/serving-rollout && echo '{lock}' > {LOCK}")
    # a stand-in process under the candidate's unit name (the real candidate would contend for the port)
    lab("systemd-run", "--unit=sglang-candidate.service", "--collect", "sleep", "600")
    try:
        result = rollout()
        assert result.returncode != 0
        message = re.sub(r"\s+", " ", result.stdout)
        assert ("the host rebooted under run 20261129T000000Z, but its candidate sglang-candidate.service is active: "
                "run rollback.yml") in message, message[-3000:]
        assert lab("test", "-e", LOCK, check=False).returncode == 1  # the stale lock is gone
        assert lab("systemctl", "is-active", "sglang-candidate.service", check=False).stdout.strip() == "active"
        assert lab_unit_state()["InvocationID"] == lab_baseline[0]  # the original was never touched
    finally:
        lab("systemctl", "stop", "sglang-candidate.service", check=False)
        lab("rm", "-f", LOCK)


def start_background(**extra):
    return start_lab_playbook("candidate.yml", {**FAST, **extra})


def wait_for_phase(phase, timeout=90):
    wait_for_lab_phase(STATE, phase, timeout)


def state_run_id():
    found = lab("cat", STATE, check=False).stdout
    return json.loads(found).get("run_id") if found.strip() else None


def wait_for_new_run_phase(phase, before, timeout=120):
    """Until a run other than `before` (the state's run id when the test began) records `phase`."""
    wait_for_lab_phase(STATE, phase, timeout, not_run=before)


def read_output_past_task(proc, task_name):
    """The playbook's output up to the banner of the task after `task_name`: by then every callback has
    had the named task's result. Fails if the playbook ends first."""
    seen, in_task = [], False
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("TASK ["):
            if in_task:
                return "".join(seen)
            in_task = f": {task_name}]" in line
    raise AssertionError(f"the playbook ended before the task after {task_name!r}: {''.join(seen)[-3000:]}")


def test_killed_mid_candidate_then_rollback_restores(lab_baseline):
    inject("startup:15")
    proc = start_background()
    wait_for_phase("candidate-starting")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert lab_unit_state()["ActiveState"] != "active"  # the original is down, the candidate starting
    result = run_playbook("rollback.yml", inventory="inventory/lab", local=False)
    assert result.returncode == 0, result.stdout[-3000:]
    assert_restored(*lab_baseline)
    restored = lab_unit_state()["InvocationID"]
    again = run_playbook("rollback.yml", inventory="inventory/lab", local=False)
    assert again.returncode == 0 and lab_unit_state()["InvocationID"] == restored
    # A second rollback proves again and changes nothing.
    assert re.search(r"lab-gpu-1\s+: ok=\d+\s+changed=0 ", again.stdout), again.stdout[-2000:]


def test_lost_controller_the_host_watchdog_restores_within_its_lease(lab_baseline):
    """The controller loses the host while the candidate serves (sshd stopped, the controller gone):
    nothing renews the lease, so the host-side watchdog restores the original itself; rollback.yml
    afterwards proves it and changes nothing."""
    before = state_run_id()
    proc = start_background(rollout_lease_s=15, rollout_cell_requests=12, rollout_cell_progress_every=2)
    try:
        wait_for_new_run_phase("candidate-running", before)
        lab("systemctl", "stop", "ssh.service", "ssh.socket", check=False)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 180  # the lease (15 s) and a restart, on a loaded machine too
        while time.monotonic() < deadline:
            if lab("test", "-e", LOCK, check=False).returncode == 1 and lab_unit_state()["ActiveState"] == "active":
                break
            time.sleep(1)
        assert lab_unit_state()["ActiveState"] == "active", lab_unit_state()
        records = lab("sh", "-c", "cat /var/lib/serving-rollout/sglang.service/watchdog-*.json").stdout
        assert '"original": "active"' in records, records
        journal = lab("journalctl", "-u", "serving-rollout-watchdog-sglang.service", "-o", "cat", "--no-pager").stdout
        assert "its holder is gone; restoring sglang.service" in journal, journal[-2000:]
    finally:
        lab("systemctl", "start", "ssh.service", check=False)
        lab("sh", "-c", "rm -f /var/lib/serving-rollout/sglang.service/watchdog-*.json")
    result = run_playbook("rollback.yml", inventory="inventory/lab", local=False)
    assert result.returncode == 0, result.stdout[-3000:]
    assert re.search(r"lab-gpu-1\s+: ok=\d+\s+changed=0 ", result.stdout), result.stdout[-3000:]
    assert_restored(*lab_baseline)


def test_ctrl_c_of_ansible_playbook_names_the_hosts_state_and_the_recovery(lab_baseline):
    """Ctrl-C mid-cells: Ansible runs no rescue, so the run says what it left (the phase) and the one
    command that recovers it, and the evidence records "interrupted"; rollback.yml then restores."""
    evidence = tempfile.mkdtemp(prefix="interrupted-")
    proc = start_background(rollout_cell_requests=12, rollout_cell_progress_every=2, rollout_evidence_dir=evidence)
    # The host's state file says candidate-running before the controller has the task's result; the
    # interrupt must come once the controller has it, which the next task's banner shows (not a sleep).
    # (the candidate's start records candidate-running as its last step)
    seen = read_output_past_task(proc, "Start the candidate, wait for its health endpoint, keep its identity, and "
                                       "prove a clean start and the control's effect")
    os.killpg(proc.pid, signal.SIGINT)
    output = re.sub(r"\s+", " ", seen + proc.communicate(timeout=120)[0])
    assert proc.returncode != 0
    said = re.search(r"INTERRUPTED: lab-gpu-1 was at phase 'candidate-running' of run (\S+); this run restored "
                     r"nothing\. .* To restore and prove it now: ansible-playbook -i \S*inventory/lab "
                     r"playbooks/rollback\.yml --limit lab-gpu-1", output)
    assert said, output[-3000:]
    note = json.loads((Path(evidence) / "lab-gpu-1" / f"rollout-{said.group(1)}" / "interrupted.json").read_text())
    assert note["phase"] == "candidate-running"
    fleet = json.loads((Path(evidence) / f"fleet-{said.group(1)}" / "summary.json").read_text())
    assert fleet["hosts"][0]["outcome"] == "interrupted", fleet
    result = run_playbook("rollback.yml", inventory="inventory/lab", local=False)
    assert result.returncode == 0, result.stdout[-3000:]
    assert_restored(*lab_baseline)


def test_ctrl_c_of_serving_rollout_restores_the_original_before_it_exits(lab_baseline):
    evidence = tempfile.mkdtemp(prefix="interrupted-cli-")
    before = state_run_id()
    proc = subprocess.Popen([str(REPO / "bin" / "serving-rollout"), "run", "candidate", "-i", "inventory/lab",
                             "--evidence", evidence, "-e",
                             json.dumps({**{k: v for k, v in FAST.items() if k != "rollout_evidence_dir"},
                                         "rollout_cell_requests": 12, "rollout_cell_progress_every": 2})],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    wait_for_new_run_phase("candidate-running", before)
    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=600)[0]
    assert proc.returncode == 4, output[-3000:]
    assert "interrupted (run" in output and "lab-gpu-1: interrupted, rollback ok" in output, output[-3000:]
    assert_restored(*lab_baseline)
    summary = json.loads(next(Path(evidence).glob("fleet-*/summary.json")).read_text())
    assert summary["hosts"][0]["outcome"] == "interrupted", summary


def test_after_a_reboot_mid_candidate_the_next_run_cleans_the_stale_lock_and_candidate(lab_baseline):
    """The host reboots while the candidate serves (the controller killed with it): the original comes up
    (the candidate is never enabled); the lock and the candidate unit stay. The next run recognises the
    lock as taken before this boot, removes the stale candidate unit, and runs."""
    before = state_run_id()
    proc = start_background()
    wait_for_new_run_phase("candidate-running", before)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    subprocess.run(["podman", "restart", "-t", "10", LAB], check=True, capture_output=True)
    up = subprocess.run([str(REPO / "lab" / "up.sh")], capture_output=True, text=True)
    assert up.returncode == 0, up.stdout + up.stderr
    deadline = time.monotonic() + 120
    while lab_unit_state()["ActiveState"] != "active" and time.monotonic() < deadline:
        time.sleep(1)
    assert lab_unit_state()["ActiveState"] == "active"  # the original came up at boot
    assert lab("test", "-e", LOCK, check=False).returncode == 0  # what the reboot left
    assert lab("test", "-e", "/etc/systemd/system/sglang-candidate.service", check=False).returncode == 0
    lock = json.loads(lab("cat", LOCK).stdout)
    result = rollout()
    assert result.returncode == 0, result.stdout[-3000:]
    message = re.sub(r"\s+", " ", result.stdout)
    assert f"took over the stale lock of run {lock['run_id']}" in message and "the host rebooted after it was taken" \
        in message, message[-3000:]
    state = lab_unit_state()
    assert state["ActiveState"] == "active" and state["UnitFileState"] == "enabled"
    assert lab("test", "-e", LOCK, check=False).returncode == 1


def test_a_rollback_during_a_run_stops_its_measuring_at_once(lab_baseline):
    """rollback.yml takes the lock over mid-cells and restores; the run checks its lock before every chunk,
    so it measures nothing against the restored original and changes nothing further."""
    before = state_run_id()
    proc = start_background(rollout_cell_requests=30, rollout_cell_progress_every=2)
    wait_for_new_run_phase("candidate-running", before)
    result = run_playbook("rollback.yml", inventory="inventory/lab", local=False)
    assert result.returncode == 0, result.stdout[-3000:]
    restored = lab_unit_state()["InvocationID"]
    output = re.sub(r"\s+", " ", proc.communicate(timeout=300)[0])
    assert proc.returncode != 0
    assert re.search(r"the lock was taken over by \S+@\S+ pid \d+ .*this run stops measuring", output), output[-3000:]
    assert "the original was left to the run that took the lock over" in output, output[-3000:]
    assert lab_unit_state()["InvocationID"] == restored  # the run touched nothing after the take-over
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
        if lab_unit_state()["NRestarts"] != "0" and lab_unit_state()["ActiveState"] == "active":
            break
        time.sleep(0.5)
    assert lab_unit_state()["NRestarts"] == "1", lab_unit_state()
    result = run_playbook("rollback.yml", inventory="inventory/lab", local=False)
    assert result.returncode == 0, result.stdout[-3000:]
    state = lab_unit_state()
    assert state["ActiveState"] == "active" and state["NRestarts"] == "0", state
    assert lab_files_hash() == lab_baseline[1]


def test_original_edited_during_the_run_is_never_overwritten_and_is_started_as_it_is(lab_baseline):
    """An operator edits the original during the run (its stop timeout, 30 -> 45 s): the run overwrites nothing,
    starts the edited original as it is (the tool's rule: the operator's edit wins), removes the candidate and
    fails naming the edit and renew.yml; renew.yml then adopts it and rollback.yml proves it - never nothing
    serving, never a renew/rollback circle (docs/trust.md)."""
    inject("startup:6")
    proc = start_background()
    wait_for_phase("candidate-starting")
    lab("sh", "-c", f"sed -i 's/^TimeoutStopSec=30$/TimeoutStopSec=45/' {UNIT}")
    try:
        output, _ = proc.communicate(timeout=300)
        assert proc.returncode != 0
        text = re.sub(r"\s+", " ", output)
        assert "NOT restored exactly: sglang.service was edited during the run (/etc/systemd/system/sglang.service: " \
               "snapshot" in text and "playbooks/renew.yml" in text, text[-3000:]
        assert "+TimeoutStopSec=45" in output  # both versions shown
        assert "TimeoutStopSec=45" in lab("cat", UNIT).stdout  # not overwritten
        state = lab_unit_state()
        assert state["ActiveState"] == "active" and state["NRestarts"] == "0", state  # a unit that serves is back
        assert lab("systemctl", "show", "-p", "TimeoutStopUSec", "--value", "sglang.service").stdout.strip() == "45s"
        assert lab("test", "-e", "/etc/systemd/system/sglang-candidate.service", check=False).returncode == 1
        assert lab("test", "-e", LOCK, check=False).returncode == 1
        renewed = run_playbook("renew.yml", inventory="inventory/lab", local=False)
        assert renewed.returncode == 0, renewed.stdout[-3000:]
        proof = run_playbook("rollback.yml", inventory="inventory/lab", local=False)
        assert proof.returncode == 0 and "ROLLBACK: sglang.service restored and proven" in proof.stdout, \
            proof.stdout[-3000:]
    finally:  # the lab's original as it was, adopted again
        lab("sh", "-c", f"sed -i 's/^TimeoutStopSec=45$/TimeoutStopSec=30/' {UNIT} && systemctl daemon-reload")
        assert run_playbook("renew.yml", inventory="inventory/lab", local=False).returncode == 0
    assert lab_files_hash() == lab_baseline[1]


@pytest.mark.parametrize("extra, named", [
    ({"rollout_cell_progress_every": 0}, "rollout_cell_progress_every=0"),
    ({"rollout_cells": [{"name": "4k", "prompt_tokens": 40}, {"name": "4k", "prompt_tokens": 80}]},
     "rollout_cells names ['4k', '4k']"),
    ({"rollout_cells": [{"name": "4k; rm", "prompt_tokens": 40}]}, "bad cell {'name': '4k; rm'"),
    ({"rollout_bracket_requests": 1}, "rollout_bracket_requests=1 (at least 2 in a sequential cell)"),
    ({"rollout_kv_max_loss": 1.5}, "bad rollout_kv_max_loss=1.5: a fraction from 0 to below 1"),
])
def test_bad_cell_settings_are_refused_before_any_change(lab_baseline, extra, named):
    result = rollout(**extra)
    assert result.returncode != 0
    assert named in result.stdout, result.stdout[-3000:]
    state = lab_unit_state()
    assert state["InvocationID"] == lab_baseline[0] and lab_files_hash() == lab_baseline[1]
    assert lab("test", "-e", LOCK, check=False).returncode == 1


def test_an_original_that_fails_its_own_first_bracket_is_never_swapped_out(lab_baseline):
    """The lab's real vLLM at TP 2 died on its first long prompt (its engine core, under a healthy /health):
    the original's own cells failing is a stop before any change, never a candidate run against it."""
    original_fault = "/etc/engine-double/faults/sglang.service"
    ready = ("for i in $(seq 120); do python3 -c 'import urllib.request as u; "
             "u.urlopen(\"http://127.0.0.1:30000/health\")' 2>/dev/null && exit 0; sleep 0.5; done; exit 1")
    lab("sh", "-c", f"mkdir -p /etc/engine-double/faults && echo fail_requests > {original_fault}")
    lab("systemctl", "restart", "sglang.service")
    try:
        lab("sh", "-c", ready)
        before = lab_unit_state()["InvocationID"]
        result = rollout()
        after = lab_unit_state()["InvocationID"]
    finally:
        lab("rm", "-f", original_fault)
        lab("systemctl", "restart", "sglang.service")
        lab("sh", "-c", ready)
    message = re.sub(r"\s+", " ", result.stdout)
    assert result.returncode != 0
    assert "stopped before any change; the original sglang.service was not touched; cause:" in message, message[-3000:]
    assert "the original sglang.service failed requests in its own first bracket (1k: failed 2)" in message, \
        message[-3000:]
    assert "first error: HTTP 500" in message and "Nothing was changed: fix the original first" in message
    assert after == before  # never stopped
    assert lab("test", "-e", "/etc/systemd/system/sglang-candidate.service", check=False).returncode == 1
    assert lab("test", "-e", LOCK, check=False).returncode == 1


def test_failed_preflight_stops_before_any_change_and_releases_the_lock(lab_baseline):
    expected = {"model": "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "tp_size": 4}
    result = rollout(rollout_expected=expected)
    assert result.returncode != 0
    message = re.sub(r"\s+", " ", result.stdout)
    assert "stopped before any change; the original sglang.service was not touched; cause:" in message
    assert "preflight check 'TP size' failed: observed 2, expected 4" in message, message[-3000:]
    state = lab_unit_state()
    assert state["InvocationID"] == lab_baseline[0] and lab_files_hash() == lab_baseline[1]
    assert lab("test", "-e", LOCK, check=False).returncode == 1
    assert lab("test", "-e", "/etc/systemd/system/sglang-candidate.service", check=False).returncode == 1
    # The next run is not refused by a lock left behind.
    assert rollout(rollout_cell_requests=2).returncode == 0
