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
from conftest import (
    REPO,
    lab,
    lab_files_hash,
    lab_unit_state,
    run_playbook,
    start_lab_playbook,
    wait_for_lab_phase,
    wait_until,
)

UNIT = "/etc/systemd/system/sglang.service"
CANDIDATE = "/etc/systemd/system/sglang-candidate.service"
FAULTS = "/etc/engine-double/faults/sglang-candidate.service"
LOCK = "/var/lib/serving-rollout/sglang.service.lock"
STATE = "/var/lib/serving-rollout/sglang.service/state.json"
EVIDENCE = tempfile.mkdtemp(prefix="trust-evidence-")
HOLD = "/run/serving-rollout-test-hold-ready"
# No endurance cell: these tests are about misuse and restoration (the endurance cell has its own tests).
FAST = {"rollout_ready_timeout_s": 30, "rollout_gpu_free_timeout_s": 20, "rollout_evidence_dir": EVIDENCE,
        "rollout_cell_requests": 2, "rollout_cells": [{"name": "1k", "prompt_tokens": 1000}], "rollout_endurance_s": 0}


def state_now():
    found = lab("cat", STATE, check=False).stdout
    return json.loads(found) if found.strip() else {}


_started_after = {}  # the state's run id when the last background run started: a phase of that run is not new


def start_background(**extra):
    _started_after["run_id"] = state_now().get("run_id")
    return start_lab_playbook("candidate.yml", {**FAST, **extra})


def wait_for_phase(phase, timeout=90):
    """Until the run started last records `phase` (a phase an earlier run left in the state file is not it)."""
    wait_for_lab_phase(STATE, phase, timeout, not_run=_started_after.get("run_id"))


def assert_restored(before_invocation, before_hash):
    state = lab_unit_state()
    assert state["ActiveState"] == "active" and state["UnitFileState"] == "enabled", state
    assert state["NRestarts"] == "0" and state["InvocationID"] != before_invocation, state
    assert lab_files_hash() == before_hash
    assert lab("test", "-e", CANDIDATE, check=False).returncode == 1
    assert lab("test", "-e", LOCK, check=False).returncode == 1
    assert lab_unit_state("sglang-candidate.service")["ActiveState"] in ("inactive", "failed")


def clean_baseline():
    """The host as a test starts from it: no fault, no lock, the original serving; its identity."""
    lab("rm", "-f", FAULTS, LOCK)
    if lab_unit_state()["ActiveState"] != "active":
        lab("systemctl", "start", "sglang.service")
    return lab_unit_state()["InvocationID"], lab_files_hash()


@pytest.fixture(autouse=True)
def lab_baseline():
    yield clean_baseline()
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


# One run held in candidate-starting for the cases that each try something beside a living run (a second run
# with its run id, renew.yml): a lab rollout costs about half a minute of this machine's CPU, so the cases that
# need the same run share it (docs/testing.md); they run on one worker.
BESIDE_A_LIVING_RUN = pytest.mark.xdist_group("test_trust_beside_a_living_run")


@pytest.fixture(scope="module")
def beside_a_living_run():
    """A run (run id 20261130T120000Z) held in candidate-starting while a second run with the same run id and then
    renew.yml are tried; the first run then goes on to its end and restores the original (asserted here).
    (the second run, renew, whether the first run's candidate was untouched after both)"""
    before = clean_baseline()
    try:
        with candidate_held_before_ready():
            first = start_background(run_id="20261130T120000Z", rollout_ready_timeout_s=300)
            wait_for_phase("candidate-starting")
            second = run_playbook("candidate.yml", {**FAST, "run_id": "20261130T120000Z"}, inventory="inventory/lab",
                                  local=False)
            renew = run_playbook("renew.yml", inventory="inventory/lab", local=False)
            untouched = lab("test", "-e", CANDIDATE, check=False).returncode == 0
            status = subprocess.run([str(REPO / "bin" / "serving-rollout"), "status", "-i", "inventory/lab"],
                                    cwd=REPO, capture_output=True, text=True, timeout=300).stdout
        out, _ = first.communicate(timeout=300)
        assert first.returncode == 0, out[-3000:]  # the run the others were refused beside went on to its end
        assert_restored(*before)
        return second, renew, untouched, status
    finally:
        lab("rm", "-f", FAULTS)


@BESIDE_A_LIVING_RUN
def test_two_runs_with_the_same_run_id_cannot_share_the_lock(beside_a_living_run):
    second, _, untouched, _ = beside_a_living_run
    text = re.sub(r"\s+", " ", second.stdout)
    assert second.returncode != 0
    assert "another rollout holds /var/lib/serving-rollout/sglang.service.lock: run 20261130T120000Z by" in text
    assert "last recorded phase 'candidate-starting'" in text
    assert untouched  # the first run's candidate is untouched


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
    orphan = lab_unit_state("sglang-candidate.service")
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
        lab("sh", "-c", f"cat > {env} && chmod 600 {env}", stdin=saved)
        assert run_playbook("renew.yml", inventory="inventory/lab", local=False).returncode == 0


@BESIDE_A_LIVING_RUN
def test_renew_is_refused_while_a_candidate_runs(beside_a_living_run):
    _, refused, untouched, status = beside_a_living_run
    assert refused.returncode != 0 and "another rollout holds" in refused.stdout, refused.stdout[-3000:]
    assert untouched  # the run's candidate is untouched


@BESIDE_A_LIVING_RUN
def test_status_names_the_live_lock_of_a_run_on_its_host(beside_a_living_run):
    status = beside_a_living_run[3]
    assert re.search(r"^lab-gpu-1: on the host now: lock held by run 20261130T120000Z \(\S+@\S+ pid \d+ .*, since "
                     r"20\d\d-", status, re.M), status


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
        assert lab_unit_state()["InvocationID"] == lab_baseline[0] and lab_files_hash() == lab_baseline[1]
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
        assert lab_unit_state()["InvocationID"] == lab_baseline[0] and lab_unit_state()["ActiveState"] == "active"
        assert lab_files_hash() == lab_baseline[1] and lab("test", "-e", LOCK, check=False).returncode == 1
    finally:
        lab("sh", "-c", f"cat > {manifest}", stdin=saved)


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
    assert lab_unit_state()["InvocationID"] == lab_baseline[0]  # nothing on the host changed
    assert "Traceback" not in result.stdout + result.stderr


def test_full_evidence_disk_mid_run_says_restored_first_and_keeps_the_record_on_the_host(lab_baseline, small_disk):
    folder = small_disk("size=24k")
    result = run_playbook("candidate.yml", {**FAST, "rollout_evidence_dir": folder,
                                            "rollout_evidence_min_free_mib": 0,
                                            "rollout_endurance_s": ""},  # the catalog's endurance cell: its record too
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


# ---- issue 52: someone is always responsible for a stopped original -------------------------------------------

def lock_content():
    text = lab("cat", LOCK, check=False).stdout
    return json.loads(text) if text.strip() else {}


def test_a_second_ctrl_c_leaves_the_duty_to_the_watchdog_which_kills_a_candidate_ignoring_sigterm(lab_baseline):
    """bin/serving-rollout, Ctrl-C mid-cells: it starts its rollback, which takes the lock over (renewing the
    lease); a second Ctrl-C ends that rollback. The CLI says the duty is the watchdog's, and it is: the watchdog,
    which follows the lock, restores once that lease lapses - here against a candidate that ignores SIGTERM under
    TimeoutStopSec=infinity, killed at the restore's own deadline (10 s), never a plain stop that hangs. Checked
    on the host: the unit file byte for byte, ActiveState, NRestarts, no candidate, no lock."""
    lab("sh", "-c", f"mkdir -p /etc/engine-double/faults && echo ignore_sigterm > {FAULTS}")
    short = {"rollout_lease_s": 15, "rollout_stop_timeout_s": 10, "rollout_cell_requests": 40,
             "rollout_cell_progress_every": 2}
    before = lab("cat", STATE, check=False).stdout
    cli = subprocess.Popen([str(REPO / "bin" / "serving-rollout"), "run", "candidate", "-i", "inventory/lab",
                            "--evidence", EVIDENCE, "-e", json.dumps({**FAST, **short})],
                           cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True)
    try:
        wait_until(lambda: lab("cat", STATE, check=False).stdout != before
                   and '"candidate-running"' in lab("cat", STATE, check=False).stdout, 300, "candidate-running")
        lab("sh", "-c", "mkdir -p /etc/systemd/system/sglang-candidate.service.d && printf '[Service]\\n"
                        "TimeoutStopSec=infinity\\n' > /etc/systemd/system/sglang-candidate.service.d/"
                        "infinity.conf && systemctl daemon-reload")
        cli.send_signal(signal.SIGINT)
        wait_until(lambda: lock_content().get("restoring") is True, 180, "the rollback's take-over")
        cli.send_signal(signal.SIGINT)
        output = cli.communicate(timeout=300)[0]
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
    said = re.sub(r"\s+", " ", output)
    assert cli.returncode != 0
    assert "rollback interrupted too. Where the run had stopped an original, the host's watchdog holds the duty" \
        in said, said[-3000:]
    # the lease the take-over renewed (15 s), or the restore's own when it had begun (stop, GPUs, start: ~85 s)
    wait_until(lambda: lab("test", "-e", LOCK, check=False).returncode == 1
               and lab_unit_state()["ActiveState"] == "active", 300, "the watchdog's restore")
    journal = lab("journalctl", "-u", "serving-rollout-watchdog-sglang.service", "-o", "cat", "--no-pager").stdout
    assert "its holder is gone; restoring sglang.service" in journal, journal[-2000:]
    record = json.loads(lab("sh", "-c", "cat \"$(ls -t /var/lib/serving-rollout/sglang.service/watchdog-*.json | "
                                        "head -1)\"").stdout)  # this run's: the newest record
    assert record["original"] == "active" and record["failures"] == [], record
    assert "ignored its stop for 10 s" in record["candidate_stop"] or "already" in record["candidate_stop"], record
    assert lab_unit_state("sglang-candidate.service")["ActiveState"] in ("inactive", "failed")
    assert lab("test", "-e", CANDIDATE, check=False).returncode == 1
    assert lab("test", "-e", CANDIDATE + ".d", check=False).returncode == 1  # its drop-ins went with it
    assert lab_files_hash() == lab_baseline[1]
    lab("sh", "-c", "rm -f /var/lib/serving-rollout/sglang.service/watchdog-*.json")
    proof = run_playbook("rollback.yml", {"rollout_evidence_dir": EVIDENCE}, inventory="inventory/lab", local=False)
    assert proof.returncode == 0 and "ROLLBACK: sglang.service restored and proven" in proof.stdout, \
        proof.stdout[-3000:]
    assert_restored(*lab_baseline)


@pytest.mark.parametrize("bad", [{"run_id": "x\n$(touch /tmp/planted-run-id) ; touch /tmp/planted-run-id"},
                                 {"run_id": "fleet-X/x"}, {"run_id": "`touch /tmp/planted-run-id`"},
                                 {"serving_recipe_unit": "../sglang.service"},
                                 {"rollout_unit": "sglang.service\nExecStart=/bin/sh"}])
def test_a_planted_run_id_or_unit_name_is_refused_by_value_before_anything_changes(lab_baseline, bad):
    for playbook in ("candidate.yml", "rollback.yml"):
        result = run_playbook(playbook, {**FAST, **bad}, inventory="inventory/lab", local=False)
        text = re.sub(r"\s+", " ", result.stdout)
        assert result.returncode != 0
        assert "refused before any change" in text and json.dumps(next(iter(bad.values())))[1:-1] in text, text[-2000:]
    assert lab("test", "-e", "/tmp/planted-run-id", check=False).returncode == 1
    assert lab("sh", "-c", "ls /var/lib/*.lock /var/lib/serving-rollout/*.lock 2>/dev/null",
               check=False).stdout == ""
    assert lab_unit_state()["InvocationID"] == lab_baseline[0] and lab_files_hash() == lab_baseline[1]
    assert lab("test", "-e", CANDIDATE, check=False).returncode == 1
    assert not Path("/tmp/planted-run-id").exists()


def test_an_interrupt_in_the_first_bracket_leaves_nothing_that_blocks_the_next_run(lab_baseline):
    """Ctrl-C of ansible-playbook during the first baseline cells (before any change): its lock and rendered
    candidate unit stay on the host, but its holder is dead and recorded no phase, so the next run takes the lock
    over, removes the render and runs - one full rollout serves both halves."""
    proc = start_background(rollout_cell_requests=12, rollout_cell_progress_every=2)
    seen = []
    for line in proc.stdout:  # the banner of the first bracket's cells: the interrupt lands inside them
        seen.append(line)
        if line.startswith("TASK [") and "Time the baseline's first bracket" in line:
            break
    else:
        raise AssertionError("".join(seen)[-3000:])
    os.killpg(proc.pid, signal.SIGINT)
    proc.communicate(timeout=120)
    assert proc.returncode != 0
    left = lock_content()
    assert left.get("run_id") and lab_unit_state()["InvocationID"] == lab_baseline[0]  # the original never stopped
    result = run_playbook("candidate.yml", FAST, inventory="inventory/lab", local=False, timeout=600)
    text = re.sub(r"\s+", " ", result.stdout)
    assert result.returncode == 0, text[-3000:]
    assert (f"took over the stale lock of run {left['run_id']}" in text
            and "its controller process is gone and it never began to stop the original" in text), text[-3000:]
    assert re.search(r"ROLLOUT: lab-gpu-1 sglang\.service, candidate p2p: (acceptable|not acceptable|inconclusive|"
                     r"reject) \(.*\); the original restored and proven; evidence ", text), text[-3000:]
    assert_restored(*lab_baseline)


def test_an_inactive_disabled_original_is_refused_before_its_snapshot_is_written(lab_baseline):
    """A unit that does not serve (inactive, disabled) is refused by name before anything is written: no snapshot
    (a copy of its EnvironmentFiles among it), no candidate unit, no lock left."""
    off = "/etc/systemd/system/sglang-off.service"
    lab("sh", "-c", f"cp {UNIT} {off} && systemctl daemon-reload")
    try:
        result = run_playbook("candidate.yml", {**FAST, "serving_recipe_unit": "sglang-off.service"},
                              inventory="inventory/lab", local=False)
        text = re.sub(r"\s+", " ", result.stdout)
        assert result.returncode != 0
        assert ("refused before any change: sglang-off.service is not serving (ActiveState=inactive, SubState=dead, "
                "UnitFileState=disabled)") in text, text[-3000:]
        assert "has no attribute" not in text
        assert lab("test", "-e", "/var/lib/serving-rollout/sglang-off.service", check=False).returncode == 1
        assert lab("test", "-e", "/etc/systemd/system/sglang-off-candidate.service", check=False).returncode == 1
        assert lab("test", "-e", "/var/lib/serving-rollout/sglang-off.service.lock", check=False).returncode == 1
    finally:
        lab("sh", "-c", f"rm -rf {off} /var/lib/serving-rollout/sglang-off.service*; systemctl daemon-reload")
    assert lab_unit_state()["InvocationID"] == lab_baseline[0] and lab_files_hash() == lab_baseline[1]


def test_a_stalled_candidate_is_named_a_hang_and_ends_the_arm_while_the_watchdog_stays_out(lab_baseline):
    """The double's stall_after fault: from its 24th request on no request gets a token (the gates and the
    numerics probe come before, so the stall meets the candidate's first cell). Every request of a chunk then runs
    to its 5 s timeout - longer than the 15 s lease for a chunk of four - yet the lease renewed before each chunk
    covers the chunk's worst case, so the host's watchdog never acts behind the living run; the run names the hang
    after one stalled chunk, measures no further cell against it (docs/trust.md's bound) and restores."""
    lab("sh", "-c", "rm -f /var/lib/serving-rollout/sglang.service/watchdog-*.json")
    lab("sh", "-c", f"mkdir -p /etc/engine-double/faults && echo stall_after:24 > {FAULTS}")
    since = lab("date", "+%Y-%m-%d %H:%M:%S").stdout.strip()
    # Two cells, no early stop (sequential looks off): the stall meets the first cell's candidate arm.
    result = run_playbook("candidate.yml", {**FAST, "rollout_cell_requests": 40, "rollout_cell_progress_every": 4,
                                            "rollout_cell_request_timeout_s": 5, "rollout_lease_s": 15,
                                            "rollout_sequential": False,
                                            "rollout_cells": [{"name": "1k", "prompt_tokens": 1000},
                                                              {"name": "2k", "prompt_tokens": 2000}]},
                          inventory="inventory/lab", local=False, timeout=900)
    text = re.sub(r"\s+", " ", result.stdout)
    assert result.returncode != 0
    assert re.search(r"cell 1k candidate, requests \d+\.\.: the engine stalled \(a hang\): all \d+ requests of the "
                     r"last chunk timed out after 5 s each", text), text[-3000:]
    # the hang ends the arm at once: the second cell is never measured against the hung candidate
    assert "cell 2k candidate" not in text and "(item=2k)" not in text.split("Time the candidate")[-1], text[-3000:]
    assert "failed and the original was restored and proven" in text, text[-3000:]
    assert "the lock was taken over by" not in text, text[-3000:]
    journal = lab("journalctl", "-u", "serving-rollout-watchdog-sglang.service", "--since", since, "-o", "cat",
                  "--no-pager").stdout
    assert "restoring" not in journal, journal[-2000:]  # the watchdog never acted behind the living run
    assert lab("sh", "-c", "ls /var/lib/serving-rollout/sglang.service/watchdog-*.json",
               check=False).returncode != 0
    assert_restored(*lab_baseline)


def test_two_rollbacks_at_once_never_both_act_and_each_ends_with_its_rollback_line(lab_baseline):
    """A run killed mid-cells, then two rollback.yml started together: the take-over is a compare-and-swap and a
    living rollback's lock is never taken, so one restores while the other is refused naming it (or, started
    after the first released, proves a restored host); both end with their one ROLLBACK: line."""
    proc = start_background(rollout_cell_requests=40, rollout_cell_progress_every=2)
    wait_for_phase("candidate-running")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed = lock_content()["run_id"]
    both = [start_lab_playbook("rollback.yml", {"rollout_evidence_dir": EVIDENCE}) for _ in range(2)]
    outputs = [re.sub(r"\s+", " ", p.communicate(timeout=600)[0]) for p in both]
    lines = [re.findall(r"ROLLBACK: sglang\.service (restored and proven|NOT restored: [^\"]{0,300})", out)
             for out in outputs]
    assert all(len(found) == 1 for found in lines), [out[-2000:] for out in outputs]
    said = [found[0] for found in lines]
    assert "restored and proven" in said, said
    other = said[1 - said.index("restored and proven")]
    assert other == "restored and proven" or "is held by another rollback" in other \
        or "another rollout took" in other, said
    assert_restored(*lab_baseline)
    # the killed run's fleet row no longer says started
    row = json.loads((Path(EVIDENCE) / f"fleet-{killed}" / "summary.json").read_text())["hosts"][0]
    assert row["outcome"] == "lost" and "restored and proved the original" in row["failure"], row


@contextlib.contextmanager
def small_state_folder(size="8m"):
    """The host's state folder on a tmpfs of its own, its content carried in and back out (the lab host is a
    privileged container): a test can fill it without filling the machine's disk."""
    state = "/var/lib/serving-rollout"
    lab("sh", "-c", f"rm -rf /tmp/state-copy && cp -a {state} /tmp/state-copy && "
                    f"mount -t tmpfs -o size={size},mode=0700 tmpfs {state} && cp -a /tmp/state-copy/. {state}/")
    try:
        yield state
    finally:
        lab("sh", "-c", f"rm -f {state}/fill; rm -rf /tmp/state-copy && cp -a {state} /tmp/state-copy && "
                        f"umount {state} && cp -a /tmp/state-copy/. {state}/", check=False)


def test_a_state_folder_that_fills_mid_run_never_stops_the_restore(lab_baseline):
    """The host's state folder fills up while the candidate serves: the lease renewal hits ENOSPC, and the
    restore - whose lease, watchdog and phase records cannot be written - still stops the candidate and puts
    the original back, says what it could not record, and leaves no temporary lease file behind."""
    with small_state_folder() as state:
        proc = start_background(rollout_cell_requests=40, rollout_cell_progress_every=2)
        wait_for_phase("candidate-running")
        lab("sh", "-c", f"dd if=/dev/zero of={state}/fill bs=64k 2>/dev/null; true")
        out, _ = proc.communicate(timeout=600)
        text = re.sub(r"\s+", " ", out)
        assert proc.returncode != 0
        assert "No space left on device" in text, text[-3000:]
        assert "the original was restored and proven" in text or "the original sglang.service was restored and " \
            "proven" in text, text[-3000:]
        assert "(the restore goes on without it)" in text or "this restore holds the duty alone" in text, \
            text[-3000:]
        assert lab("sh", "-c", f"ls {state} | grep -c '\\.tmp$'", check=False).stdout.strip() == "0"
        original = lab_unit_state()
        assert original["ActiveState"] == "active" and original["NRestarts"] == "0", original
        assert lab_unit_state("sglang-candidate.service")["ActiveState"] in ("inactive", "failed")
        assert lab("test", "-e", CANDIDATE, check=False).returncode == 1
        assert lab("test", "-e", LOCK, check=False).returncode == 1
        # no stale phase: a 'restored' that cannot be written leaves no state file rather than a false one
        assert state_now().get("phase") in (None, "restored"), state_now()
    assert lab_files_hash() == lab_baseline[1]


def test_a_rollback_with_nothing_to_restore_says_so_even_when_its_lock_cannot_be_written(lab_baseline):
    """A full state folder and nothing to put back: no lock can be written, yet the rollback proves the
    original as it is and says "nothing to restore; the original serves" - never NOT restored about a host it
    never touched."""
    with small_state_folder() as state:
        lab("sh", "-c", f"dd if=/dev/zero of={state}/fill bs=64k 2>/dev/null; true")
        result = run_playbook("rollback.yml", {"rollout_evidence_dir": EVIDENCE}, inventory="inventory/lab",
                              local=False)
        text = re.sub(r"\s+", " ", result.stdout)
        assert result.returncode == 0, text[-3000:]
        assert "ROLLBACK: sglang.service nothing to restore; the original serves (proven; no lock could be " \
               "written: cannot write the lock" in text and "No space left on device" in text, text[-3000:]
        assert lab("test", "-e", LOCK, check=False).returncode == 1
    assert lab_unit_state()["InvocationID"] == lab_baseline[0] and lab_files_hash() == lab_baseline[1]
