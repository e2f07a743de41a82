"""A full rollout's evidence on the lab host, the result card, the manifest, and promote.yml."""

import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys

import pytest
from conftest import CPU_SHARED_WITH_OTHER_JOBS, LAB_HOST, REPO, lab, run_playbook, start_lab_playbook, wait_until
from prose import prose_problems

from serving_rollout.module_utils.host_files import proc_stat

LAB = LAB_HOST  # this test worker's lab host (conftest)
SECRETS = ("lab-secret-6f1d0c9e2b7a4e58", "hf_labSecretToken0123456789abcdef")
EVIDENCE_TOOL = [sys.executable, "-m", "serving_rollout.evidence"]
# bin/test's workers run this file on one of them: one lab rollout (module fixture) serves every test here.
pytestmark = pytest.mark.xdist_group("test_evidence_promotion")


def rollout(evidence, **extra):
    result = run_playbook("candidate.yml", {"rollout_evidence_dir": str(evidence), "rollout_cell_requests": 6,
                                            "rollout_ready_timeout_s": 10, **CPU_SHARED_WITH_OTHER_JOBS, **extra},
                          inventory="inventory/lab", local=False)
    runs = sorted((evidence / "lab-gpu-1").glob("rollout-*"))
    return result, runs[-1]


@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    """A run whose verdict is acceptable on a loaded machine too: the candidate is made 40 %
    faster (the double's speedup fault), far outside any CPU noise, never a retried assertion."""
    evidence = tmp_path_factory.mktemp("evidence")
    fault = "/etc/engine-double/faults/sglang-candidate.service"
    lab("sh", "-c", f"mkdir -p /etc/engine-double/faults && echo speedup:0.4 > {fault}")
    try:
        result, run = rollout(evidence)
    finally:
        lab("rm", "-f", fault)
    assert result.returncode == 0, result.stdout[-3000:]
    return evidence, run


def test_run_directory_holds_every_record_and_verifies(good_run):
    _, run = good_run
    names = {p.name for p in run.iterdir()}
    assert {"outcome.json", "recipes.json", "preflight.json", "gates.json", "cells.json", "ab-verdict.json",
            "restoration.json", "journal-excerpts.json", "decision.json", "result-card.md", "cells.png",
            "manifest.json", "numerics.json", "endurance.json"} <= names
    decision = json.loads((run / "decision.json").read_text())
    assert decision["schema"] == "serving-rollout.decision/v1" and decision["verdict"] == "acceptable"
    # p2p is a transport control: the catalog turns its endurance cell on (4 s in the lab)
    endurance = decision["endurance"]
    assert endurance["ok"] and endurance["failures"] == 0 and endurance["requests"] >= 4, endurance
    assert decision["numerics"]["candidate"]["verdict"] == "pass", decision["numerics"]
    assert decision["run_id"] == run.name.removeprefix("rollout-")
    # The restoration proof (action_plugins/restored_proof.py) as the evidence records it: systemd's state, every
    # snapshot file byte for byte, a clean journal, the restored gates passed.
    restoration = json.loads((run / "restoration.json").read_text())
    assert restoration["state_after"]["ActiveState"] == "active" and restoration["state_after"]["NRestarts"] == "0"
    assert {f["path"] for f in restoration["files"]} >= {"/etc/systemd/system/sglang.service"}, restoration["files"]
    assert restoration["journal_errors"] == []
    gates = json.loads((run / "gates.json").read_text())
    assert [(g["gate"], g["verdict"]) for g in gates["restored"]] == [("smoke", "pass"), ("json", "pass")]
    cells = json.loads((run / "cells.json").read_text())["arms"]
    assert set(cells) == {"baseline-1", "candidate", "baseline-2"}
    assert all(r["prompt_tokens"] > 0 for r in cells["candidate"][0]["requests"])
    # The cell ran in chunks (progress between them) and was merged back into one cell.
    assert [r["index"] for r in cells["candidate"][0]["requests"]] == list(range(6))
    assert [t["requests"] for t in cells["candidate"][0]["telemetry"]] == [[0, 3], [4, 5]]
    index = json.loads((run.parent.parent / "index.json").read_text())
    assert any(entry["run_id"] == decision["run_id"] and entry["verdict"] == "acceptable" for entry in index["runs"])
    verify = subprocess.run([*EVIDENCE_TOOL, "verify", str(run)], capture_output=True, text=True)
    assert verify.returncode == 0 and "every file matches" in verify.stdout


def test_planted_secrets_never_reach_the_run_directory(good_run):
    evidence, _ = good_run
    for path in evidence.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert not any(secret.encode() in data for secret in SECRETS), path


def test_card_re_renders_from_the_run_directory(good_run):
    _, run = good_run
    card = subprocess.run([*EVIDENCE_TOOL, "card", str(run)], capture_output=True, text=True, check=True).stdout
    assert card == (run / "result-card.md").read_text()
    assert "| Delta | env:NCCL_P2P_DISABLE: 1 -> 0 |" in card
    assert prose_problems(card) == []  # for a person: no Python repr, no quoted list, no endless sentence
    assert re.search(r"\| 4k target \| \d+ actual prompt tokens p50; n: candidate [1-6], baseline 4 \+ 4 ", card)
    assert "P2P/IPC both directions, no SHM" in card
    # The lab host has no NVML: the card says so for every arm of every cell, rather than nothing.
    assert len(re.findall(r"^- (1k|4k) (baseline-1|candidate|baseline-2): not recorded \(NVML not available",
                          card, re.M)) == 6


def test_tampered_file_is_reported_by_name(good_run, tmp_path):
    _, run = good_run
    copy = tmp_path / run.name
    subprocess.run(["cp", "-a", str(run), str(copy)], check=True)
    gates = copy / "gates.json"
    gates.write_text(gates.read_text().replace('"pass"', '"PASS"', 1))
    result = subprocess.run([*EVIDENCE_TOOL, "verify", str(copy)], capture_output=True, text=True)
    assert result.returncode == 1 and result.stdout.strip() == "gates.json: changed"


def promote(evidence, run_id, approved=None, **more):
    extra = {"promotion_evidence_dir": str(evidence), "promotion_run_id": run_id, **more}
    if approved is not None:
        extra["promotion_approved_run_id"] = approved
    return run_playbook("promote.yml", extra, inventory="inventory/lab", local=False)


def unit_text():
    return lab("cat", "/etc/systemd/system/sglang.service").stdout


def test_promotion_refused_without_approval_or_with_the_wrong_run(good_run):
    evidence, run = good_run
    run_id = run.name.removeprefix("rollout-")
    before = unit_text()
    for approved in (None, "20990101T000000Z"):
        result = promote(evidence, run_id, approved)
        assert result.returncode != 0 and "promotion needs -e promotion_run_id=<run id>" in result.stdout
    assert unit_text() == before


def test_promotion_refused_for_a_failing_decision(tmp_path):
    lab("sh", "-c", "mkdir -p /etc/engine-double/faults && echo ignore_p2p > "
                    "/etc/engine-double/faults/sglang-candidate.service")
    try:
        result, run = rollout(tmp_path, rollout_cell_requests=3)
    finally:
        lab("rm", "-f", "/etc/engine-double/faults/sglang-candidate.service")
    assert result.returncode != 0
    decision = json.loads((run / "decision.json").read_text())
    assert decision["verdict"] == "reject" and decision["promotion_allowed"] is False
    run_id = run.name.removeprefix("rollout-")
    before = unit_text()
    refused = promote(tmp_path, run_id, run_id)
    said = f"refused before any change: run {run_id} does not allow promotion: its verdict is reject"
    assert refused.returncode != 0 and said in refused.stdout
    assert unit_text() == before


def forge(run, verdict, allowed):
    """What an editor of the evidence folder can do: rewrite decision.json and recompute its hash."""
    decision = json.loads((run / "decision.json").read_text())
    decision.update(verdict=verdict, promotion_allowed=allowed)
    (run / "decision.json").write_text(json.dumps(decision, indent=2, sort_keys=True) + "\n")
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["files"]["decision.json"] = hashlib.sha256((run / "decision.json").read_bytes()).hexdigest()
    (run / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def test_a_forged_decision_with_its_hash_recomputed_is_refused(tmp_path):
    """A rejected run edited to acceptable, its manifest hash recomputed: the seal (a key outside the
    evidence tree) no longer matches; with the seal forged too (the editor holds the key), the host's
    own record of the decision still refuses it; and the index still says reject."""
    lab("sh", "-c", "mkdir -p /etc/engine-double/faults && echo slowdown:0.4 > "
                    "/etc/engine-double/faults/sglang-candidate.service")
    try:
        result, run = rollout(tmp_path)
    finally:
        lab("rm", "-f", "/etc/engine-double/faults/sglang-candidate.service")
    assert result.returncode == 0, result.stdout[-3000:]
    assert json.loads((run / "decision.json").read_text())["verdict"] == "reject"
    run_id = run.name.removeprefix("rollout-")
    host_record = json.loads(lab("cat", f"/var/lib/serving-rollout/decisions/sglang.service/{run_id}.json").stdout)
    assert host_record["verdict"] == "reject" and host_record["decision_sha256"] == \
        hashlib.sha256((run / "decision.json").read_bytes()).hexdigest()
    before = unit_text()
    forge(run, "acceptable", True)
    refused = promote(tmp_path, run_id, run_id)
    said = re.sub(r"\s+", " ", refused.stdout).replace("''", "'")  # YAML's folding and quoting undone
    assert refused.returncode != 0
    assert "manifest.hmac: does not match manifest.json" in said, said[-2000:]
    assert "index.json says 'reject', decision.json says 'acceptable'" in said, said[-2000:]
    # the editor also holds the controller's key and rewrites the seal and the index: the host's record refuses it
    from serving_rollout import evidence as tool

    (run / "manifest.hmac").write_text(json.dumps(tool.seal_of((run / "manifest.json").read_bytes(),
                                                               tool.seal_key())) + "\n")
    index = json.loads((tmp_path / "index.json").read_text())
    for entry in index["runs"]:
        entry["verdict"] = "acceptable" if entry["run_id"] == run_id else entry["verdict"]
    (tmp_path / "index.json").write_text(json.dumps(index))
    refused = promote(tmp_path, run_id, run_id)
    assert refused.returncode != 0
    assert re.search(rf"decision.json of run {run_id} is not the decision the host recorded: evidence verdict "
                     r"acceptable sha256 \w+, host verdict reject", re.sub(r"\s+", " ", refused.stdout)), \
        refused.stdout[-2000:]
    assert unit_text() == before


def test_promotion_refused_for_tampered_evidence(good_run, tmp_path):
    evidence, run = good_run
    copy = tmp_path / "lab-gpu-1" / run.name
    copy.parent.mkdir(parents=True)
    subprocess.run(["cp", "-a", str(run), str(copy)], check=True)
    (copy / "decision.json").write_text((copy / "decision.json").read_text().replace("acceptable", "acceptable "))
    run_id = run.name.removeprefix("rollout-")
    result = promote(tmp_path, run_id, run_id)
    assert result.returncode != 0 and "decision.json: changed" in result.stdout


def cli(*args):
    """bin/serving-rollout, the operator's door, against this worker's lab host."""
    return subprocess.run([str(REPO / "bin" / "serving-rollout"), *args, "-i", "inventory/lab"], cwd=REPO,
                          capture_output=True, text=True, timeout=600)


def test_promote_then_rollback_returns_to_the_previous_original(good_run):
    """bin/serving-rollout promote says what it applied, where the previous original is kept and the command that
    undoes it, and records the promotion beside the run's evidence; renew over it is refused (exit 3) and loses
    nothing; rollback puts the original back byte for byte."""
    evidence, run = good_run
    run_id = run.name.removeprefix("rollout-")
    original = unit_text()
    try:
        result = cli("promote", run_id, "--approve", "--evidence", str(evidence))
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
        out = " ".join(result.stdout.split())
        assert (f"lab-gpu-1: PROMOTED run {run_id} on lab-gpu-1: sglang.service now runs with "
                "env:NCCL_P2P_DISABLE 1 -> 0, healthy. The previous original is kept in "
                "/var/lib/serving-rollout/sglang.service/") in out, out
        assert "Undo: bin/serving-rollout rollback -i inventory/lab" in out and "+Environment=NCCL_P2P_DISABLE=0" in \
            result.stdout and out.endswith(f"exit 0: every host promoted (artifacts {result.stdout.split()[-1][:-1]})")
        record = json.loads((evidence / "lab-gpu-1" / f"promotion-{run_id}" / "promotion.json").read_text())
        assert record["run_id"] == run_id and record["undo"] == "bin/serving-rollout rollback -i inventory/lab"
        status = subprocess.run([str(REPO / "bin" / "serving-rollout"), "status", "--evidence", str(evidence), "-i",
                                 "inventory/lab"], cwd=REPO, capture_output=True, text=True, check=True).stdout
        assert f"lab-gpu-1: original: promoted from run {run_id} at 20" in status, status
        assert f"lab-gpu-1: on the host now: no rollout lock; run {run_id} promoted in place" in status, status
        promoted = unit_text()
        assert "Environment=NCCL_P2P_DISABLE=0" in promoted and f"from run {run_id}" in promoted
        assert "[Install]" in promoted and "(candidate)" not in promoted
        state = lab("systemctl", "show", "-p", "ActiveState,UnitFileState", "sglang.service").stdout
        assert "ActiveState=active" in state and "UnitFileState=enabled" in state
        again = promote(evidence, run_id, run_id)
        assert re.search(r"lab-gpu-1\s+: ok=\d+\s+changed=0 ", again.stdout), again.stdout[-2000:]
        # renew over the promotion would make the promoted unit the restore recipe and lose the original:
        # refused before any change, in check mode and without, naming the run and the way back.
        snapshot = lab("cat", "/var/lib/serving-rollout/sglang.service/manifest.json").stdout
        for check in (["--check"], []):
            renew = cli("renew", *check, "--evidence", str(evidence))
            said = " ".join(renew.stdout.split())
            assert renew.returncode == 3 and (f"lab-gpu-1: refused before any change: run {run_id} is promoted "
                                              "on this host") in said and "rollback.yml" in said, \
                renew.stdout[-3000:] + renew.stderr[-2000:]
        assert lab("cat", "/var/lib/serving-rollout/sglang.service/manifest.json").stdout == snapshot
        assert lab("test", "-e", f"/var/lib/serving-rollout/sglang.service.pre-promotion-{run_id}",
                   check=False).returncode != 0
    finally:
        back = run_playbook("rollback.yml", {"rollout_evidence_dir": str(evidence)}, inventory="inventory/lab",
                            local=False)
    assert back.returncode == 0, back.stdout[-3000:]
    assert f"restored and proven, the promotion of run {run_id} undone" in " ".join(back.stdout.split())
    assert unit_text() == original
    # bin/serving-rollout status: the original in place (the promotion undone, by which rollback), the last run
    status = subprocess.run([str(REPO / "bin" / "serving-rollout"), "status", "--evidence", str(evidence)],
                            capture_output=True, text=True, check=True).stdout
    rollback_id = next((evidence / "lab-gpu-1").glob("rollback-*")).name.removeprefix("rollback-")
    assert f"lab-gpu-1: original: the pre-promotion original (run {run_id}'s promotion undone by rollback " \
        f"{rollback_id})" in status, status
    assert f"lab-gpu-1: last rollback {rollback_id}: restored and proven" in status, status


def test_promoted_unit_that_fails_to_start_puts_the_previous_original_back(good_run):
    evidence, run = good_run
    run_id = run.name.removeprefix("rollout-")
    original = unit_text()
    # Only the promoted recipe (P2P allowed) fails; the original (P2P disabled) starts as usual.
    lab("sh", "-c", "mkdir -p /etc/engine-double/faults && echo fail_at_start > "
                    "/etc/engine-double/faults/sglang.service+p2p")
    try:
        result = promote(evidence, run_id, run_id, promotion_ready_timeout_s=8)
    finally:
        lab("rm", "-f", "/etc/engine-double/faults/sglang.service+p2p")
    assert result.returncode != 0
    assert f"promotion of run {run_id} failed and the previous original was put back" in result.stdout
    assert "Wait for the promoted engine's health endpoint" in result.stdout
    # The rescue is rollback.yml's own restore, with its proof.
    assert "TASK [rollout : Prove the original is back (state, files byte for byte, container identity, journal, " \
        "smoke and JSON)]" in result.stdout
    assert unit_text() == original
    assert lab("test", "-e", "/var/lib/serving-rollout/sglang.service/promoted.json", check=False).returncode == 1
    state = lab("systemctl", "show", "-p", "ActiveState,UnitFileState", "sglang.service").stdout
    assert "ActiveState=active" in state and "UnitFileState=enabled" in state
    assert lab("systemctl", "show", "-p", "NRestarts", "sglang.service").stdout.strip() == "NRestarts=0"
    proof = run_playbook("rollback.yml", inventory="inventory/lab", local=False)
    assert proof.returncode == 0, proof.stdout[-3000:]
    assert unit_text() == original


LOCK = "/var/lib/serving-rollout/sglang.service.lock"


def engine_state():
    out = lab("systemctl", "show", "-p", "ActiveState,NRestarts,InvocationID,NeedDaemonReload", "sglang.service").stdout
    return dict(line.split("=", 1) for line in out.splitlines())


def test_promotion_while_a_run_holds_the_lock_is_refused_naming_the_holder(good_run):
    """A living run's lock on the host (its holder: a process alive on this controller, as a run's
    ansible-playbook is): promotion takes the lock like every door that changes the original, so it is refused
    naming that run, and the unit, its invocation and the run's lock are untouched."""
    evidence, run = good_run
    run_id = run.name.removeprefix("rollout-")
    me = os.getpid()
    lock = {"token": "a-living-run", "run_id": "live-run-1", "holder": f"ops@{socket.gethostname()} pid {me}",
            "controller": {"host": socket.gethostname(), "pid": me, "pid_start": proc_stat(me)[1]},
            "since": "2026-12-07T00:00:00Z", "restoring": False}
    lab("sh", "-c", f"cat > {LOCK}", stdin=json.dumps(lock))
    before = (unit_text(), engine_state())
    try:
        result = promote(evidence, run_id, run_id)
        text = re.sub(r"\s+", " ", result.stdout)
        assert result.returncode != 0
        assert f"another rollout holds {LOCK}: run live-run-1 by ops@" in text, result.stdout[-3000:]
        assert (unit_text(), engine_state()) == before
        assert json.loads(lab("cat", LOCK).stdout)["token"] == "a-living-run"  # the run keeps its lock
        assert lab("test", "-e", "/var/lib/serving-rollout/sglang.service/promoted.json", check=False).returncode == 1
    finally:
        lab("rm", "-f", LOCK)


def test_promotion_of_a_run_that_measured_another_original_is_refused_naming_the_difference(good_run):
    """The original changed after the run (--context-length 32768 -> 16384, reloaded, restarted) and was adopted
    with renew.yml: the run never measured this original, so promoting its control onto it is refused, naming
    the file whose hash changed and 'run the candidate again'; the host keeps the edited original as it runs."""
    evidence, run = good_run
    run_id = run.name.removeprefix("rollout-")
    original = unit_text()
    edited = original.replace("--context-length 32768", "--context-length 16384")
    assert edited != original
    try:
        lab("sh", "-c", "cat > /etc/systemd/system/sglang.service && systemctl daemon-reload && "
                        "systemctl restart sglang.service", stdin=edited)
        renew = run_playbook("renew.yml", inventory="inventory/lab", local=False)
        assert renew.returncode == 0, renew.stdout[-3000:]
        before = engine_state()
        result = promote(evidence, run_id, run_id)
        text = re.sub(r"\s+", " ", result.stdout)
        assert result.returncode != 0
        assert (f"refused before any change: promotion of run {run_id}: the original on the host is not the one that "
                "run measured: /etc/systemd/system/sglang.service: measured ") in text, result.stdout[-3000:]
        assert "Run the candidate again against this original" in text
        assert unit_text() == edited and engine_state() == before
        assert lab("test", "-e", LOCK, check=False).returncode == 1  # the promotion released its lock
    finally:
        lab("sh", "-c", "cat > /etc/systemd/system/sglang.service && systemctl daemon-reload && "
                        "systemctl restart sglang.service", stdin=original)
        back = run_playbook("renew.yml", inventory="inventory/lab", local=False)
    assert back.returncode == 0, back.stdout[-3000:]


def test_a_promotion_whose_controller_dies_mid_way_is_undone_by_the_hosts_watchdog(good_run):
    """promote.yml killed (SIGKILL, as a lost controller) while the promoted engine is starting - the promoted unit
    written over the original's path, its record on the host, the engine held not ready by a fault of the double
    (only the P2P-enabled promoted unit loads it). Nobody is left to rescue it: when the lease runs out, the host's
    watchdog puts the previous original back from the snapshot, removes the promotion's record, starts the original
    and releases the lock. The host is restored, never half; rollback.yml then proves it."""
    evidence, run = good_run
    run_id = run.name.removeprefix("rollout-")
    original = unit_text()
    hold, fault = "/tmp/hold-promoted-engine", "/etc/engine-double/faults/sglang.service+p2p"
    lab("sh", "-c", f"mkdir -p /etc/engine-double/faults && touch {hold} && echo ready_after_removed:{hold} > {fault}")
    # the lease: the stop's 10 s, the promoted engine's 15 s to become ready, and 1 s more
    proc = start_lab_playbook("promote.yml", {
        "promotion_evidence_dir": str(evidence), "promotion_run_id": run_id, "promotion_approved_run_id": run_id,
        "promotion_ready_timeout_s": 15, "rollout_stop_timeout_s": 10, "rollout_lease_s": 1})
    try:
        wait_until(lambda: "Promoted by serving-rollout" in unit_text() and lab(
            "systemctl", "is-active", "sglang.service", check=False).stdout.strip() in ("active", "activating"),
            120, "the promoted unit written and started")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        wait_until(lambda: lab("test", "-e", LOCK, check=False).returncode == 1, 180,
                   "the watchdog to restore and release the lock")
    finally:
        lab("rm", "-f", hold, fault)
    assert unit_text() == original
    assert lab("test", "-e", "/var/lib/serving-rollout/sglang.service/promoted.json", check=False).returncode == 1
    records = "/var/lib/serving-rollout/sglang.service/watchdog-promotion-*.json"
    record = json.loads(lab("sh", "-c", f"cat {records} && rm -f {records}").stdout)  # read, and not left for others
    assert record["undid_promotion"] and record["failures"] == [] and record["original"] == "active", record
    proof = run_playbook("rollback.yml", inventory="inventory/lab", local=False)
    assert proof.returncode == 0, proof.stdout[-3000:]
    assert unit_text() == original
