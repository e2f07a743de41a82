"""serving_rollout/evidence.py on a synthetic run directory: decision records and manifest checks."""

import json

import pytest
from conftest import REPO

from serving_rollout import evidence


def write_run(tmp_path, outcome, decision):
    run = tmp_path / "host-1" / "rollout-20261130T000000Z"
    run.mkdir(parents=True)
    (run / "outcome.json").write_text(json.dumps(outcome))
    (run / "ab-verdict.json").write_text(json.dumps({"cells": [], "decision": decision}))
    return run


def test_failed_candidate_is_rejected_whatever_the_cells_say(tmp_path):
    run = write_run(tmp_path, {"failure": "no effect", "restored": True},
                    {"decision": "acceptable", "rule": {}, "reasons": []})
    record = evidence.decision_record(run)
    assert record["verdict"] == "reject" and not record["promotion_allowed"]
    assert record["reasons"][0] == "candidate failed: no effect"


def test_unproven_restoration_blocks_promotion(tmp_path):
    run = write_run(tmp_path, {"restored": False}, {"decision": "acceptable", "rule": {}, "reasons": []})
    record = evidence.decision_record(run)
    assert record["verdict"] == "acceptable" and not record["promotion_allowed"]
    assert "restoration not proven" in record["reasons"]


def test_finalize_writes_manifest_last_and_refuses_a_second_time(tmp_path):
    run = write_run(tmp_path, {"restored": True}, {"decision": "inconclusive", "rule": {}, "reasons": []})
    evidence.finalize(run)
    manifest = json.loads((run / "manifest.json").read_text())["files"]
    assert {"decision.json", "result-card.md", "outcome.json", "ab-verdict.json"} <= set(manifest)
    assert evidence.verify(run) == []
    with pytest.raises(SystemExit, match="already finalized"):
        evidence.finalize(run)


def test_verify_names_changed_missing_and_extra_files(tmp_path):
    run = write_run(tmp_path, {"restored": True}, {"decision": "inconclusive", "rule": {}, "reasons": []})
    evidence.finalize(run)
    (run / "outcome.json").write_text("{}")
    (run / "result-card.md").unlink()
    (run / "extra.txt").write_text("x")
    assert evidence.verify(run) == [("extra.txt", "not in manifest"), ("outcome.json", "changed"),
                                    ("result-card.md", "missing")]


def test_card_telemetry_from_real_h200_readings_and_without_nvml():
    real = json.loads((REPO / "tests" / "fixtures" / "h200x2-real" / "nvml-modules" / "telemetry.json").read_text())
    assert evidence.telemetry_text([dict(real, requests=[0, 3]), dict(real, requests=[4, 5])]) == (
        "power max 696 W, temperature max 55 C, SM clock medians 345-1500 MHz, clock events 0x1, 0x4")
    named = {"available": True, "gpus": {"0": {**real["gpus"]["0"], "clock_events": ["SwPowerCap"]}}}
    assert evidence.telemetry_text(named).endswith("clock events SwPowerCap")
    assert evidence.telemetry_text([{"available": False, "reason": "no NVML: libnvidia-ml.so.1 not found"}]) == (
        "not recorded (no NVML: libnvidia-ml.so.1 not found)")
    assert evidence.telemetry_text(None) == "not recorded (no readings)"


def test_the_cells_figure_shows_every_request_the_medians_intervals_and_both_brackets():
    """Issue 64: a 2 % E2E difference stays visible (the axes span the data, not from zero), TTFT is drawn, each arm
    has its median with a 95 % interval, the two baseline brackets stand either side of the candidate, and the
    figure states the card's decision. Throughput bars still start at zero (they compare sizes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def cell(name, e2e, ttft):
        return {"name": name, "elapsed_s": sum(e2e), "concurrency": 1,
                "requests": [{"e2e_s": v, "ttft_s": t, "error": None, "completion_tokens": 32}
                             for v, t in zip(e2e, ttft, strict=True)]}

    arms = {"baseline-1": [cell("1k", [1.00, 1.01, 0.99], [0.10, 0.11, 0.10])],
            "candidate": [cell("1k", [1.02, 1.03, 1.01], [0.12, 0.12, 0.13])],
            "baseline-2": [cell("1k", [1.04, 1.05, 1.03], [0.10, 0.10, 0.11])]}
    fig = evidence.figure(arms, "inconclusive (promotion allowed: False)")
    try:
        ttft, e2e, rate = fig.axes
        assert [ax.get_title() for ax in fig.axes] == ["cell 1k: TTFT per request", "cell 1k: E2E per request",
                                                       "cell 1k: output tokens/s at C1"]
        low, high = e2e.get_ylim()
        assert 900 < low < 1000 and 1040 < high < 1100  # spans the data: a 2 % difference is visible
        assert [t.get_text() for t in e2e.get_xticklabels()] == ["baseline-1", "candidate", "baseline-2"]
        assert len(e2e.collections) >= 3 and len(e2e.containers) == 3  # every request's points; 3 medians with bars
        assert fig._suptitle.get_text().startswith("Decision: inconclusive (promotion allowed: False).\n")
        assert rate.get_ylim()[0] == 0
        # the bars are each arm's tokens over the cell's wall time: 96 tokens in 3 s, 96 in 3.06 s, 96 in 3.12 s
        assert [bar.get_height() for bar in rate.patches] == pytest.approx([32.0, 96 / 3.06, 96 / 3.12])
    finally:
        plt.close(fig)
    assert evidence.figure({}) is None


def run_evidence(**args):
    """action_plugins/run_evidence.py in-process, as a task runs it."""
    from types import SimpleNamespace

    from test_host_steps import action_class
    task = SimpleNamespace(args=args, async_val=0, check_mode=False, action="run_evidence")
    connection = SimpleNamespace(_shell=SimpleNamespace(tmpdir="/tmp/unused"))
    return action_class("run_evidence")(task, connection, None, None, None).run(task_vars={})


def test_the_run_evidence_action_names_a_missing_run_a_full_evidence_folder_and_a_second_finalize(tmp_path):
    from ansible.errors import AnsibleActionFail

    with pytest.raises(AnsibleActionFail, match=f"no run directory at {tmp_path / 'nope'}"):
        run_evidence(op="trust", path=str(tmp_path / "nope"))
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    with pytest.raises(AnsibleActionFail, match=f"evidence folder {blocked} is not writable"):
        run_evidence(op="check_dir", path=str(blocked), min_free_mib=1)
    with pytest.raises(AnsibleActionFail, match="has [0-9]+ MiB free, under the 1000000000 MiB a run needs"):
        run_evidence(op="check_dir", path=str(tmp_path), min_free_mib=1e9)
    run = write_run(tmp_path, {"restored": True}, {"decision": "inconclusive", "rule": {}, "reasons": []})
    assert run_evidence(op="finalize", path=str(run))["record"]["host_record"]["verdict"] == "inconclusive"
    with pytest.raises(AnsibleActionFail, match="already finalized; run directories are never overwritten"):
        run_evidence(op="finalize", path=str(run))
    assert evidence.verify(run) == []  # the first finalize's files, untouched by the refused second


def speculative_run(tmp_path, candidate_cell):
    """A speculative run's records: three single-stream arms of one cell, the candidate's as given."""
    run = tmp_path / "host-1" / "rollout-20261205T000000Z"
    run.mkdir(parents=True)
    (run / "recipes.json").write_text(json.dumps({"original": {"engine_args": {"--tp-size": "2"}},
                                                  "change": {"change": {"kind": "speculative"}}}))
    cell = {"name": "1k", "concurrency": 1, "elapsed_s": 1.0}
    arms = {arm: [dict(cell, requests=[{"decode_tps": 250.0, "completion_tokens": 32}])]
            for arm in ("baseline-1", "baseline-2")}
    arms["candidate"] = [dict(cell, requests=[{"decode_tps": 300.0, "completion_tokens": 32}], **candidate_cell)]
    (run / "cells.json").write_text(json.dumps({"arms": arms}))
    return run


def test_a_speculative_candidate_without_metrics_takes_its_accept_length_from_the_engines_log(tmp_path):
    logged = {"accept_length": {"value": 3.13, "source": "engine log", "line": "... accept len: 3.13, ...",
                                "reports": 4}}
    row = evidence.speculation(speculative_run(tmp_path, {"engine_log": logged}))["cells"]["1k"]
    assert (row["accept_length"], row["accept_length_source"]) == (3.13, "engine log"), row
    assert row["break_even"] == round(3.13 / 300.0 * 250.0, 2) and row["pays"] is True, row
    lines = evidence.speculation_lines({"cells": {"1k": row}, "baseline_has_speculation": False})
    assert "accept length 3.13 (the engine's log)" in lines[0], lines


def test_a_speculative_candidate_with_no_accept_length_anywhere_says_so(tmp_path):
    row = evidence.speculation(speculative_run(tmp_path, {"engine_log": {"accept_length": None}}))["cells"]["1k"]
    assert row["accept_length"] is None and "in /metrics or its log" in row["reason"], row
