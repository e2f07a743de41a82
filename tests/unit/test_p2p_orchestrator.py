"""p2p_orchestrator: process groups, time-outs, budgets, link peaks and verdicts."""

import json
import subprocess
import sys
import time

import pytest
from conftest import FIXTURES

from serving_rollout.module_utils import p2p_orchestrator as orch


def python(code):
    return [sys.executable, "-c", code]


def test_hung_process_group_is_killed_with_its_grandchild():
    code = ("import subprocess,sys,time; subprocess.Popen([sys.executable,'-c',"
            "'import time; time.sleep(120)  # orch-grandchild-test']); time.sleep(120)")
    started = time.monotonic()
    results = orch.run_processes([python(code)], [None], timeout=1.0)
    assert results[0]["status"] == "hung" and time.monotonic() - started < 5
    time.sleep(0.2)
    left = subprocess.run(["pgrep", "-f", "orch-grandchild-test"], capture_output=True, text=True)
    assert left.stdout.strip() == ""


def test_one_hung_rank_kills_every_rank():
    fast = python("print('P2PCHECK_RESULT {\"status\": \"ok\"}')")
    slow = python("import time; time.sleep(60)")
    results = orch.run_processes([fast, slow], [None, None], timeout=1.0)
    assert [r["status"] for r in results] == ["hung", "hung"]


def test_results_and_errors_are_parsed():
    ok = python("print('noise'); print('P2PCHECK_RESULT {\"status\": \"ok\", \"x\": 1}')")
    bad = python("import sys; print('P2PCHECK_RESULT {\"status\": \"error\", \"error\": \"boom\"}'); sys.exit(1)")
    garbled = python("print('P2PCHECK_RESULT {not json')")
    results = orch.run_processes([ok, bad, garbled], [None] * 3, timeout=10)
    assert results[0]["status"] == "ok" and results[0]["result"]["x"] == 1
    assert results[1]["status"] == "error" and results[1]["result"]["error"] == "boom"
    assert results[2]["status"] == "error" and results[2]["result"] is None


def test_budget_gives_each_test_what_is_left():
    now = [100.0]
    budget = orch.Budget(total_s=50, per_test_s=30, clock=lambda: now[0])
    assert budget.next_timeout() == 30
    now[0] = 130.0
    assert budget.next_timeout() == 20
    now[0] = 151.0
    assert budget.exhausted()


def test_link_peak_from_the_real_h200_nvswitch_pair():
    observation = json.loads((FIXTURES / "h200x2-real" / "peer-path-observation.json").read_text())
    preflight = observation["peer_path"]["preflight"]["gpus"]
    assert orch.link_peak_gbps(0, 1, preflight) == {"kind": "NV18", "peak_gbps": 18 * 26.5625}


def test_link_peak_pcie_and_unknown():
    gpus = [{"index": 0, "bus_id": "a", "pcie_gen": 5, "pcie_width": 16},
            {"index": 1, "bus_id": "b", "pcie_gen": 4, "pcie_width": 16}]
    assert orch.link_peak_gbps(0, 1, gpus) == {"kind": "PCIe Gen4 x16", "peak_gbps": 1.969 * 16}
    assert orch.link_peak_gbps(0, 7, gpus) is None


@pytest.mark.parametrize("in_process, ipc, verdict", [
    ({"verified": True, "can_access_peer": True}, {"verified": True}, "ok"),
    ({"verified": False, "can_access_peer": True}, {"verified": True}, "corrupt"),
    ({"verified": True, "can_access_peer": True}, {"verified": False}, "corrupt"),
    ({"verified": True, "can_access_peer": False}, {"verified": True}, "no_peer_access"),
    (None, {"verified": True}, "error"),
])
def test_pair_verdict(in_process, ipc, verdict):
    assert orch.pair_verdict(in_process, ipc) == verdict


def test_bracket_order_and_comparison():
    assert orch.bracket_order("ABA", ["off", "on"]) == ["off", "on", "off"]
    with pytest.raises(ValueError, match="must use letters"):
        orch.bracket_order("ACA", ["off", "on"])
    runs = [{"label": "off", "status": "ok", "sizes": [{"bytes": 8, "median_us": 10.0}]},
            {"label": "on", "status": "ok", "sizes": [{"bytes": 8, "median_us": 5.0}]},
            {"label": "off", "status": "ok", "sizes": [{"bytes": 8, "median_us": 12.0}]}]
    row = orch.compare_brackets(runs, [8])[0]
    assert row["off"]["median_us"] == 11.0 and row["off"]["drift"] == pytest.approx(0.2)
    assert row["ratio"] == pytest.approx(5 / 11) and row["faster"] == "on"


def test_overall_verdict_takes_the_worst():
    ok_pair = {"verdict": "ok"}
    assert orch.overall_verdict([ok_pair], [{"status": "ok", "sizes": []}]) == "ok"
    assert orch.overall_verdict([{"verdict": "corrupt"}], [{"status": "hung"}]) == "hung"
    wrong_sum = {"status": "ok", "sizes": [{"correct": False}]}
    assert orch.overall_verdict([ok_pair], [wrong_sum]) == "corrupt"
