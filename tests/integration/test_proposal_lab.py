"""propose on the lab host (the engine double as the operator's original `sglang.service`): read-only on the host,
the proposal's three files, then the proposed plan taken by the plan executor as it is (issue 51)."""

import json
import re
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml
from conftest import CPU_SHARED_WITH_OTHER_JOBS, REPO, lab, lab_files_hash, lab_unit_state
from prose import prose_problems

FAULTS = "/etc/engine-double/faults"
SMALL = json.dumps({"rollout_cells": [{"name": "1k", "prompt_tokens": 1000}], "rollout_cell_requests": 4,
                    **CPU_SHARED_WITH_OTHER_JOBS})


def cli(*args):
    return subprocess.run([str(REPO / "bin" / "serving-rollout"), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600)


def test_propose_reads_the_host_writes_pins_plan_and_report_and_the_plan_executor_takes_the_plan():
    evidence = tempfile.mkdtemp(prefix="propose-")
    before = (lab_unit_state()["InvocationID"], lab_files_hash())
    lab("touch", "/tmp/before-propose")
    result = cli("propose", "-i", "inventory/lab", "--evidence", evidence)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    folder = next(Path(evidence, "lab-gpu-1").glob("proposal-*"))
    assert f"lab-gpu-1: proposed ({folder})" in result.stdout
    assert (lab_unit_state()["InvocationID"], lab_files_hash()) == before  # read-only on the host
    written = lab("find", "/etc", "/var/lib", "-newer", "/tmp/before-propose", "-type", "f", check=False).stdout
    assert [path for path in written.split() if "/journal/" not in path] == []  # nothing written on the host

    # The lab's original: P2P disabled, cuMem 0, custom all-reduce disabled, in the unit systemd reads.
    plan = json.loads((folder / "plan.json").read_text())
    assert [c["id"] for c in plan["ordered_candidates"]] == ["p2p", "cumem", "custom-all-reduce"]
    p2p = plan["ordered_candidates"][0]
    assert "NCCL_P2P_DISABLE=1 from " in p2p["change"]
    assert any(p["kind"] == "evidence" and p.get("need") == "capture" and p["met"]
               and p["evidence"].startswith("lab-gpu-1/capture-") for p in p2p["prerequisites"]), p2p
    assert any(p.get("need") == "peer_path" and not p["met"] and p["to_do"].startswith("run peer-path.yml")
               for p in p2p["prerequisites"]), p2p
    pins = yaml.safe_load((folder / "pins.yml").read_text())["serving_expected"]
    assert pins["model"] == "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8" and pins["tp_size"] == "2"
    assert "lab-secret" not in (folder / "pins.yml").read_text() + (folder / "report.md").read_text()
    report = (folder / "report.md").read_text()
    # the report's next step is a command that runs as written (it is run below)
    command = re.search(r"`(bin/serving-rollout plan \S+ -i \S+)`", report).group(1)
    assert command == f"bin/serving-rollout plan {folder}/plan.json -i inventory/lab", report
    assert "## Not proposed" in report and "- engine-image: an engine upgrade is the operator's choice" in report

    # The plan as proposed, through the plan executor (the lab assumes the peer path): its first candidate fails
    # fast at start here (a fault of the double), is restored, and the plan stops there.
    lab("sh", "-c", f"mkdir -p {FAULTS} && echo fail_at_start > {FAULTS}/sglang-candidate.service")
    try:
        ran = cli(*command.split()[1:], "--evidence", evidence, "-e", SMALL)
    finally:
        lab("rm", "-f", f"{FAULTS}/sglang-candidate.service", "/var/lib/serving-rollout/sglang.service.lock",
            check=False)
    doc = json.loads(next(Path(evidence).glob("plan-*/report.json")).read_text())
    assert [(c["id"], c["status"]) for c in doc["candidates"]][1:] == [("cumem", "not run"),
                                                                       ("custom-all-reduce", "not run")], \
        ran.stdout[-4000:]
    assert doc["candidates"][0]["id"] == "p2p" and doc["candidates"][0]["outcome"] == "failed, restored", doc
    # the lab assumes the capture and the peer path: said on the console and in the report, never hidden
    assert "plan: p2p ran on prerequisites the inventory ASSUMED, not observed: capture, peer_path" in ran.stdout, \
        ran.stdout[-3000:]
    plan_report = next(Path(evidence).glob("plan-*/report.md")).read_text()
    assert "peer_path: ASSUMED by the inventory, not observed" in plan_report, plan_report
    assert "next: read " in ran.stdout and "nothing to promote" in ran.stdout
    assert prose_problems(plan_report) == [] and prose_problems(report) == []
    # status after the plan: the candidate's outcome as the plan report says it, not its A/B verdict alone
    status = cli("status", "--evidence", evidence).stdout
    assert re.search(r"^lab-gpu-1 +\S+ +p2p +failed, restored ", status, re.M), status
    assert lab_unit_state()["ActiveState"] == "active" and lab_files_hash() == before[1]


@pytest.mark.parametrize("plan", sorted((REPO / "plans").glob("*.json")), ids=lambda path: path.name)
def test_every_plan_in_plans_runs_through_the_documented_plan_command(plan):
    """docs/operating.md's command (bin/serving-rollout plan plans/<plan>.json -i INVENTORY) takes the plan as it is
    and runs its first candidate against the lab host; that candidate fails fast at start here (a fault of the
    double, so one short rollout is spent), is restored, and the plan stops there with its report written."""
    evidence = tempfile.mkdtemp(prefix="plans-")
    before = lab_files_hash()
    lab("sh", "-c", f"mkdir -p {FAULTS} && echo fail_at_start > {FAULTS}/sglang-candidate.service")
    try:
        ran = cli("plan", str(plan.relative_to(REPO)), "-i", "inventory/lab", "--evidence", evidence, "-e", SMALL)
    finally:
        lab("rm", "-f", f"{FAULTS}/sglang-candidate.service", "/var/lib/serving-rollout/sglang.service.lock",
            check=False)
    assert ran.returncode == 2, ran.stdout[-4000:] + ran.stderr[-2000:]
    doc = json.loads(next(Path(evidence).glob("plan-*/report.json")).read_text())
    first = json.loads(plan.read_text())["ordered_candidates"][0]["id"]
    assert (doc["candidates"][0]["id"], doc["candidates"][0]["outcome"]) == (first, "failed, restored"), doc
    assert all(c["status"] == "not run" for c in doc["candidates"][1:]), doc
    assert lab_unit_state()["ActiveState"] == "active" and lab_files_hash() == before
