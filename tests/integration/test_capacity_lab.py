"""KV capacity and load per arm on the lab host: a candidate twice as fast whose KV cache holds a fifth
fewer tokens (the double's kv_loss fault, reported in its engine's own start-up line) is a reject, named
beside its latency verdict in the decision and the card; a throughput cell at concurrency 4 gives
each arm's output tokens/s and latency percentiles, with the engine's own /metrics account beside
the client's; the original restored and proven."""

import json
import tempfile
from pathlib import Path

from conftest import CPU_SHARED_WITH_OTHER_JOBS, lab, only_run_dir, run_playbook

FAULT = "/etc/engine-double/faults/sglang-candidate.service"


def test_a_faster_candidate_that_loses_kv_capacity_is_rejected_with_the_figures():
    before = lab("systemctl", "show", "-p", "InvocationID", "--value", "sglang.service").stdout.strip()
    lab("sh", "-c", f"mkdir -p /etc/engine-double/faults && echo speedup:0.5,kv_loss:0.2 > {FAULT}")
    evidence = tempfile.mkdtemp(prefix="capacity-")
    try:
        result = run_playbook("candidate.yml", {
            "rollout_evidence_dir": evidence, "rollout_cells": [
                {"name": "1k", "prompt_tokens": 1000},
                {"name": "c4", "prompt_tokens": 500, "concurrency": 4, "requests": 8}],
            "rollout_cell_requests": 8, **CPU_SHARED_WITH_OTHER_JOBS}, inventory="inventory/lab", local=False)
    finally:
        lab("rm", "-f", FAULT, check=False)
    assert result.returncode == 0, result.stdout[-4000:]
    run = only_run_dir(evidence, "lab-gpu-1", "rollout")
    # The latency verdict alone would promote it: the candidate is twice as fast.
    latency = json.loads((run / "ab-verdict.json").read_text())["decision"]
    assert latency["decision"] == "acceptable", latency
    decision = json.loads((run / "decision.json").read_text())
    kv = decision["kv_capacity"]
    assert decision["verdict"] == "reject" and not decision["promotion_allowed"], decision
    assert kv["verdict"] == "lost" and kv["baseline_tokens"] == 500000 and kv["candidate_tokens"] == 400000, kv
    # The concurrency each engine stated at start (SGLang's max_running_requests) falls with it.
    assert kv["max_concurrency"] == {"baseline-1": 3906, "candidate": 3125, "baseline-2": 3906}, kv
    card = (run / "result-card.md").read_text()
    assert "KV capacity lost: 400000 tokens against the baseline's 500000 (-20.0%; limit -5%)" in card, card
    assert "Concurrency the engine states: baseline-1 3906, candidate 3125, baseline-2 3906." in card
    # The handoff's metric beside it: single-stream decode tokens/s per arm (the double decodes faster too).
    rates = decision["single_stream_decode_tps"]["1k"]
    assert set(rates) == {"baseline-1", "candidate", "baseline-2"} and rates["candidate"] > rates["baseline-1"], rates
    assert "Single-stream decode (median tokens/s per arm): 1k baseline-1 " in card
    # The throughput cell: whole waves of 4 in flight, judged with the latency cells' error control.
    load = decision["cells_under_load"]["c4"]
    assert load["concurrency"] == 4 and set(load["arms"]) == {"baseline-1", "candidate", "baseline-2"}, load
    assert load["arms"]["candidate"]["output_tps"] > load["arms"]["baseline-1"]["output_tps"], load
    cells = json.loads((run / "cells.json").read_text())["arms"]
    for arm, arm_cells in cells.items():
        for cell in arm_cells:  # the engine counted exactly what the client sent and got
            assert cell["engine_metrics"]["requests"] == len(cell["requests"]), (arm, cell["engine_metrics"])
            assert cell["engine_metrics"]["generated_tokens"] == sum(r["completion_tokens"] for r in cell["requests"])
    assert [c["cell"] for c in json.loads((run / "ab-verdict.json").read_text())["cells"]] == ["1k", "c4"]
    assert "Throughput at C4 (c4): output tokens/s baseline-1 " in card, card
    assert "Engine's own /metrics (c4): baseline-1 " in card and "mean TTFT" in card
    after = lab("systemctl", "show", "-p", "InvocationID,ActiveState", "sglang.service").stdout
    assert "ActiveState=active" in after and before not in after, after
    assert lab("test", "-e", "/etc/systemd/system/sglang-candidate.service", check=False).returncode == 1
    assert Path(run, "capacity.json").exists()
