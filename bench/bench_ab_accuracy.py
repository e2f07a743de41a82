#!/usr/bin/env python3
"""Figures for the A/B cells, measured against the engine double's known truth:

- client TTFT vs the injected TTFT (median difference, target under 1 ms) and client overhead
  per request (client E2E minus injected E2E, target under 1 ms);
- power: a true 5% E2E improvement with realistic noise, n=12 per arm (baseline bracketed
  twice): verdict "better" in at least 90% of seeded runs;
- A/A: identical candidate: a decision other than inconclusive in at most 5% of seeded runs.

Runs the real client (module_utils/cells.py) against doubles on loopback.
Usage: .venv/bin/python -m bench.bench_ab_accuracy [RUNS]
"""

import json
import os
import statistics
import sys
import time
from pathlib import Path

from serving_rollout.module_utils.cells import run_cell
from serving_rollout.play.abstats import cell_verdict, decide
from tests.conftest import RunningDouble

REPO = Path(__file__).resolve().parent.parent

MODEL = {"DOUBLE_BASE_TTFT_MS": "0", "DOUBLE_PREFILL_MS_PER_1K": "20", "DOUBLE_DECODE_MS_PER_TOKEN": "2"}


def cell(url, n, tokens=1000):
    return run_cell({"base_url": url, "requests": n, "prompt_tokens": tokens, "telemetry_interval_s": 5})["requests"]


def accuracy(n=40):
    double = RunningDouble({**MODEL, "DOUBLE_BASE_TTFT_MS": "2"})
    double.wait_ready()
    try:
        requests = cell(double.url, n)
    finally:
        double.stop()
    injected_ttft = [0.002 + 0.020 * r["prompt_tokens"] / 1000 for r in requests]
    injected_e2e = [t + 0.002 * (r["completion_tokens"] - 1) for t, r in zip(injected_ttft, requests, strict=True)]
    return {"n": n,
            "median_ttft_error_ms": statistics.median(abs(r["ttft_s"] - t) * 1000
                                                      for r, t in zip(requests, injected_ttft, strict=True)),
            "median_client_overhead_ms": statistics.median((r["e2e_s"] - e) * 1000
                                                           for r, e in zip(requests, injected_e2e, strict=True))}


def ab_run(seed, effect, n=12):
    common = {**MODEL, "DOUBLE_REQUEST_NOISE": "0.03", "DOUBLE_NOISE": "0.01", "DOUBLE_SEED": str(seed)}
    base = RunningDouble({**common, "NCCL_P2P_DISABLE": "1"})
    cand = RunningDouble({**common, "DOUBLE_SEED": str(seed + 100000), "NCCL_P2P_DISABLE": "0",
                          "DOUBLE_EFFECT_P2P": effect})
    try:
        base.wait_ready()
        cand.wait_ready()
        first, candidate, second = cell(base.url, n), cell(cand.url, n), cell(base.url, n)
    finally:
        base.stop()
        cand.stop()
    result = cell_verdict({"name": "1k", "baseline": [first, second], "candidate": candidate}, seed=seed)
    return result, decide([result])


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    started = time.monotonic()
    report = {"accuracy": accuracy()}
    better, deltas = 0, []
    for seed in range(runs):
        result, _ = ab_run(seed, "prefill=0.05,decode=0.05")
        better += result["metrics"]["e2e_s"]["verdict"] == "better"
        deltas.append(result["metrics"]["e2e_s"]["delta"])
    report["power"] = {"runs": runs, "true_e2e_delta": -0.05, "better": better, "rate": better / runs,
                       "median_measured_delta": statistics.median(deltas), "target_rate": 0.9}
    not_inconclusive = sum(ab_run(1000 + seed, "")[1]["decision"] != "inconclusive" for seed in range(runs))
    report["a_a"] = {"runs": runs, "not_inconclusive": not_inconclusive, "rate": not_inconclusive / runs,
                     "target_rate_at_most": 0.05}
    report["wall_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
