"""Every door that changes the original keeps the run's rules (docs/trust.md, "Doors"): each test breaks one door
on the lab host (real systemd) and checks the host independently of the tool's words - unit files byte for byte,
systemd's loaded properties (NeedDaemonReload, TimeoutStopUSec, InvocationID, NRestarts), the lock, the candidate
unit, and which process listens on the engine's port. None of these needs a rollout; the promotion doors share
test_evidence_promotion.py's run."""

import json
import re
import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import REPO, lab, lab_files_hash, lab_unit_state, run_playbook

pytestmark = pytest.mark.xdist_group("test_doors")

UNIT = "/etc/systemd/system/sglang.service"
LOCK = "/var/lib/serving-rollout/sglang.service.lock"
MANIFEST = "/var/lib/serving-rollout/sglang.service/manifest.json"
CANDIDATE = "/etc/systemd/system/sglang-candidate.service"
PORT = 30000
EVIDENCE = tempfile.mkdtemp(prefix="doors-evidence-")
# A process that answers 200 to every request, as anything bound to the engine's port while the original was down.
FOREIGN = ("import http.server\n"
           "class H(http.server.BaseHTTPRequestHandler):\n"
           "    def do_GET(self):\n"
           "        self.send_response(200); self.end_headers(); self.wfile.write(b'{}')\n"
           "    do_POST = do_GET\n"
           "    def log_message(self, *a): pass\n"
           f"http.server.HTTPServer(('127.0.0.1', {PORT}), H).serve_forever()\n")


def show(*props):
    out = lab("systemctl", "show", "-p", ",".join(props), "sglang.service").stdout
    return dict(line.split("=", 1) for line in out.splitlines())


def listener():
    """(pid, cgroup) of the process listening on the engine's port, read from the kernel on the host."""
    out = lab("ss", "-Hltnp", f"sport = :{PORT}").stdout
    found = re.search(r"pid=(\d+)", out)
    if not found:
        return None, None
    pid = found.group(1)
    return pid, lab("cat", f"/proc/{pid}/cgroup").stdout.strip()


def wait_serving(timeout=60):
    """The original's engine listening again after a hand restart (a bounded wait, not a timing assertion)."""
    lab("python3", "-c", "import socket, time\n"
        f"end = time.time() + {timeout}\n"
        "while True:\n"
        f"    try: socket.create_connection(('127.0.0.1', {PORT}), 1).close(); break\n"
        "    except OSError:\n"
        "        if time.time() > end: raise\n"
        "        time.sleep(0.2)\n")


def playbook(name, **extra):
    return run_playbook(name, {"rollout_evidence_dir": EVIDENCE, **extra}, inventory="inventory/lab", local=False)


def text_of(result):
    return re.sub(r"\s+", " ", result.stdout)


@pytest.fixture(scope="module")
def original():
    """The original as provisioned, with a snapshot of it on the host (as a run leaves one): renew.yml adopts it."""
    text = lab("cat", UNIT).stdout
    renewed = playbook("renew.yml")
    assert renewed.returncode == 0, renewed.stdout[-3000:]
    yield text
    lab("sh", "-c", f"cat > {UNIT}", stdin=text)
    lab("systemctl", "daemon-reload")


def test_an_edit_undone_without_a_reload_is_reloaded_restarted_and_proven_by_rollback(original):
    """The operator undid a mid-run edit (files back to the snapshot), but systemd still runs the edited unit:
    NeedDaemonReload=yes, the edited TimeoutStopUSec, the same invocation. renew.yml refuses to adopt what does
    not serve; rollback.yml reloads and restarts the original so what runs is what the files say, and proves it."""
    lab("sh", "-c", f"sed -i 's/^TimeoutStopSec=30$/TimeoutStopSec=77/' {UNIT} && systemctl daemon-reload && "
                    "systemctl restart sglang.service")
    wait_serving()
    edited = show("InvocationID", "TimeoutStopUSec")
    assert edited["TimeoutStopUSec"] == "1min 17s"
    lab("sh", "-c", f"cat > {UNIT}", stdin=original)  # the edit undone, no daemon-reload
    assert show("NeedDaemonReload")["NeedDaemonReload"] == "yes"
    manifest = lab("sha256sum", MANIFEST).stdout

    renew = playbook("renew.yml")
    assert renew.returncode != 0 and "NeedDaemonReload=yes" in text_of(renew) and "Nothing was adopted" in \
        text_of(renew), renew.stdout[-3000:]
    assert lab("sha256sum", MANIFEST).stdout == manifest  # nothing adopted

    back = playbook("rollback.yml")
    assert back.returncode == 0, back.stdout[-3000:]
    assert "ROLLBACK: sglang.service restored and proven" in text_of(back)
    assert "systemd runs a version other than its files (NeedDaemonReload=yes" in text_of(back)
    after = show("NeedDaemonReload", "TimeoutStopUSec", "InvocationID", "NRestarts", "ActiveState")
    assert after["NeedDaemonReload"] == "no" and after["TimeoutStopUSec"] == "30s", after
    assert after["InvocationID"] != edited["InvocationID"] and after["NRestarts"] == "0", after
    assert after["ActiveState"] == "active" and lab("cat", UNIT).stdout == original
    assert listener()[1].endswith("/system.slice/sglang.service")
    assert lab("test", "-e", LOCK, check=False).returncode == 1


def test_a_foreign_listener_on_the_port_is_never_taken_for_the_restored_original(original):
    """The original is down and a foreign process answers 200 on its port: the restore's health wait must not
    pass on it. The rollback says NOT restored, naming the port, the process and the next step; after that step
    (the process stopped), rollback.yml restores and proves the original."""
    lab("systemctl", "stop", "sglang.service")
    lab("sh", "-c", "cat > /tmp/foreign.py", stdin=FOREIGN)
    lab("sh", "-c", "setsid python3 /tmp/foreign.py >/dev/null 2>&1 < /dev/null &")
    wait_serving()
    foreign_pid, foreign_cgroup = listener()
    assert foreign_pid and "sglang.service" not in foreign_cgroup
    try:
        back = playbook("rollback.yml", rollout_ready_timeout_s=20)
        text = text_of(back)
        assert back.returncode != 0 and "ROLLBACK: sglang.service NOT restored" in text, back.stdout[-3000:]
        # the original crash-loops on its taken port, so it may hold no control group at that moment
        assert re.search(rf"port {PORT} is held by a process (outside sglang.service's control group "
                         rf"/system.slice/sglang.service|not of sglang.service \(which runs no process: no control "
                         rf"group\)): pid {foreign_pid} \(python3 /tmp/foreign.py\)", text), back.stdout[-3000:]
        assert f"kill {foreign_pid}" in text and "then run rollback.yml" in text
        assert listener()[0] == foreign_pid  # the host: the foreign process still holds the port
        assert lab("cat", UNIT).stdout == original
    finally:
        lab("kill", foreign_pid, check=False)
    again = playbook("rollback.yml")
    assert again.returncode == 0 and "ROLLBACK: sglang.service restored and proven" in text_of(again), \
        again.stdout[-3000:]
    assert listener()[1].endswith("/system.slice/sglang.service") and lab_unit_state()["ActiveState"] == "active"
    assert lab("test", "-e", LOCK, check=False).returncode == 1


def test_plan_yml_refuses_an_unmet_host_change_before_anything_changes(original, tmp_path):
    """A p2p entry as propose.yml writes it for a host under translated IOMMU domains: the plan executor refuses
    it before any candidate, and the host's newest capture (none here) cannot show it met."""
    plan = {"schema": "anvil-serving.followup-candidate-plan/v1", "ordered_candidates": [
        {"id": "p2p", "change": "NCCL_P2P_DISABLE 1 -> 0", "gate": "the rollout's gates", "prerequisites": [
            {"kind": "host-change", "fact": "iommu_translated", "met": False,
             "what": "the GPUs' IOMMU domains are translated (DMA-FQ, groups 17, 18)",
             "to_do": "a human changes the host first, then capture.yml again"}]}]}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    before = (lab_unit_state(), lab_files_hash())
    ran = subprocess.run([str(REPO / "bin" / "serving-rollout"), "plan", str(path), "-i", "inventory/lab",
                          "--evidence", str(tmp_path / "evidence")], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert ran.returncode == 3, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert "the plan is refused before any change: $.ordered_candidates[0] (p2p): unmet host change on " \
           "lab-gpu-1: the GPUs' IOMMU domains are translated" in ran.stderr
    assert (lab_unit_state(), lab_files_hash()) == before  # nothing stopped, nothing written
    assert lab("test", "-e", LOCK, check=False).returncode == 1
    assert lab("test", "-e", CANDIDATE, check=False).returncode == 1
    assert not list((tmp_path / "evidence").glob("plan-*"))


def test_a_reused_run_id_is_refused_before_any_change(original):
    """An explicit run id whose evidence folder exists: candidate.yml refuses it before the lock, not at the
    evidence writer after a whole cycle."""
    taken = Path(EVIDENCE) / "lab-gpu-1" / "rollout-R-taken"
    taken.mkdir(parents=True, exist_ok=True)
    before = (lab_unit_state(), lab_files_hash())
    result = playbook("candidate.yml", run_id="R-taken")
    assert result.returncode != 0
    assert f"refused before any change: run id R-taken is taken, its evidence folder {taken} exists" in \
        text_of(result), result.stdout[-3000:]
    assert (lab_unit_state(), lab_files_hash()) == before
    assert lab("test", "-e", LOCK, check=False).returncode == 1
    assert list(taken.iterdir()) == []
