"""The plan executor on the lab host (bin/serving-rollout plan, each candidate its own
candidate.yml run): three candidates, the second rejected by the double, stopping there with
the first's evidence kept and the original restored; resume after a controller kill; a changed
original starts the plan over."""

import json
import os
import re
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest
import testinfra
from conftest import CPU_SHARED_WITH_OTHER_JOBS, LAB_HOST, REPO, lab, wait_for_lab_phase
from restored import restored_problems

LAB = LAB_HOST  # this test worker's lab host (conftest)
FAULTS = "/etc/engine-double/faults"
STATE = "/var/lib/serving-rollout/sglang.service/state.json"
SMALL = json.dumps({"rollout_cells": [{"name": "1k", "prompt_tokens": 1000}], "rollout_cell_requests": 4,
                    **CPU_SHARED_WITH_OTHER_JOBS})
PLAN = {"schema": "anvil-serving.followup-candidate-plan/v1", "ordered_candidates": [
    {"id": "p2p", "change": "NCCL_P2P_DISABLE=1 -> 0", "gate": "all gates, bracketed cells"},
    {"id": "scheduler-and-speculation", "change": "--chunked-prefill-size 4096", "gate": "all gates",
     "control": {"chunked_prefill_size": 4096}},
    {"id": "cumem", "change": "drop NCCL_CUMEM_ENABLE=0", "gate": "all gates"}]}


def faults(every_candidate, with_p2p):
    lab("sh", "-c", f"mkdir -p {FAULTS} && echo {every_candidate} > {FAULTS}/sglang-candidate.service && "
                    f"echo {with_p2p} > {FAULTS}/sglang-candidate.service+p2p")


def plan_command(plan_file, evidence):
    return [str(REPO / "bin" / "serving-rollout"), "plan", str(plan_file), "-i", "inventory/lab",
            "--evidence", evidence, "-e", SMALL]


def report(evidence):
    return json.loads(next(Path(evidence).glob("plan-*/report.json")).read_text())


@pytest.fixture
def plan_file():
    # Every candidate 1.5x slower, a P2P candidate 0.6x faster on top (net 0.6x): p2p is acceptable,
    # the scheduler candidate (P2P still disabled, as in the original) is rejected, far outside noise.
    faults("slowdown:0.5", "speedup:0.6")
    path = Path(tempfile.mkdtemp(prefix="plan-")) / "plan.json"
    path.write_text(json.dumps(PLAN))
    yield path
    lab("sh", "-c", f"rm -f {FAULTS}/sglang-candidate.service {FAULTS}/sglang-candidate.service+p2p "
                    "/var/lib/serving-rollout/sglang.service.lock", check=False)


def test_a_killed_plan_resumes_stops_at_the_rejected_second_candidate_and_starts_over_for_a_changed_original(
        plan_file):
    """One plan, its states in turn (each a full rollout, shared by the assertions that need it): the controller
    killed with p2p's candidate running; the resumed plan rolls it back, decides p2p, stops at the rejected
    scheduler candidate; the same original skips what was decided; a changed original starts it over."""
    evidence = tempfile.mkdtemp(prefix="plan-evidence-")
    env = {**os.environ, "CONTAINERS_CONF": str(REPO / "lab" / "containers.conf")}
    controller = subprocess.Popen(plan_command(plan_file, evidence), cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for_lab_phase(STATE, "candidate-running")
    finally:
        os.killpg(controller.pid, signal.SIGKILL)  # the controller dies with the candidate running
        controller.wait()
        # ansible-runner starts ansible-playbook in a session of its own: it dies with the controller too
        subprocess.run(["pkill", "-9", "-f", evidence], check=False)
    state = json.loads(next(Path(evidence).glob("plan-*/state.json")).read_text())
    assert state["candidates"]["p2p"]["status"] == "running"
    result = subprocess.run(plan_command(plan_file, evidence), cwd=REPO, capture_output=True, text=True, timeout=600)
    assert "plan: p2p was under way when the last run stopped: rolling back first" in result.stdout
    assert result.returncode == 1, result.stdout[-4000:] + result.stderr[-2000:]
    doc = report(evidence)
    assert any("p2p interrupted; rolled back; runs again" in h["event"] for h in doc["history"])
    assert [(c["id"], c["status"], c.get("outcome")) for c in doc["candidates"]] == [
        ("p2p", "decided", "acceptable"), ("scheduler-and-speculation", "decided", "not acceptable"),
        ("cumem", "not run", None)]
    assert doc["recommended_promotion_order"] == ["p2p"]
    first, second = doc["candidates"][0]["hosts"][0], doc["candidates"][1]["hosts"][0]
    assert Path(first["evidence"], "decision.json").exists() and first["gpu_seconds"] > 0
    # The second's prerequisite came from the plan's own decision about p2p.
    assert second["prerequisites_met_by"]["plan"]["transport_stable"].startswith("p2p acceptable")
    recipes = json.loads(Path(second["evidence"], "recipes.json").read_text())
    assert recipes["difference"]["control"] == "arg:--chunked-prefill-size"  # one control, never stacked
    assert restored_problems(testinfra.get_host(f"podman://{LAB}"), "sglang.service",
                             recipes["original_files"]) == []
    assert "plan: stopping before cumem: scheduler-and-speculation ended 'not acceptable'" in result.stdout

    # The same original again: nothing runs.
    again = subprocess.run(plan_command(plan_file, evidence), cwd=REPO, capture_output=True, text=True, timeout=600)
    assert "plan: p2p already decided for these originals (acceptable): skipped" in again.stdout
    assert not re.search(r"^plan: \S+ \(run ", again.stdout, re.M), again.stdout  # no candidate started

    # A changed original (an operator's edit, renewed as the restore recipe) starts the plan over.
    unit = "/etc/systemd/system/sglang.service"
    text = lab("cat", unit).stdout
    try:
        lab("sh", "-c", f"echo '# tuned by ops' >> {unit} && systemctl daemon-reload")
        renew = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "inventory/lab",
                                "playbooks/renew.yml"], cwd=REPO, capture_output=True, text=True)
        assert renew.returncode == 0, renew.stdout[-3000:]
        faults("slowdown:0.5", "fail_at_start")  # p2p fails fast this time: the plan stops after it
        over = subprocess.run(plan_command(plan_file, evidence), cwd=REPO, capture_output=True, text=True,
                              timeout=600)
        assert "the original changed on lab-gpu-1 since the plan's decisions: starting over" in over.stdout
        assert over.returncode == 2, over.stdout[-3000:]
        assert report(evidence)["candidates"][0]["outcome"] == "failed, restored"
    finally:
        subprocess.run(["podman", "exec", "-i", LAB, "sh", "-c", f"cat > {unit} && systemctl daemon-reload"],
                       input=text, text=True, check=True)
        subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "inventory/lab",
                        "playbooks/renew.yml"], cwd=REPO, capture_output=True, text=True, check=True)
