#!/usr/bin/env python3
"""How well a fleet promotion's bake detects a regression from the engine's histograms, at the lab's noise.

Simulates the bake's two windows (the original's, then the promoted unit's) as the lab makes them: the users'
traffic double's request mix (tests/doubles/lab_traffic.py: 50-1500 prompt words, 16-120 output tokens), timed by
the engine TEST DOUBLE's latency model as the lab provisions it (roles/lab_serving_host/defaults: 20 ms prefill per
1k tokens, 4 ms per decoded token, 2 % per-step noise; tests/doubles/engine_double.py LatencyModel), counted into
SGLang's own histogram buckets (the double's BUCKETS), and judged with the project's own code
(serving_rollout/bake_metrics.py: histogram_quantile, the one-sided Mann-Whitney over buckets, min_effect). A
regression R makes every latency of the promoted window (1 + R) longer, as the double's slowdown fault does.

Reported per R: how often the bake fails. R = 0 is a clean bake: its failure rate must be under 5 %. The smallest
R caught in at least 90 % of bakes is the detection floor for that window. Not included: the lab machine's own
jitter (a busy machine's scheduling delays), which the lab test guards against with a wide rule.

Usage: .venv/bin/python -m bench.bench_bake_detection [TRIALS [REQUESTS_PER_WINDOW [MIN_EFFECT]]]
  (defaults 200, 60 - a 20 s window at the lab traffic's ~3 requests/s - and 0.02; writes
  bench/results-bake-detection.json)
"""

import json
import random
import sys
import time
from pathlib import Path

from serving_rollout import bake_metrics
from tests.doubles.engine_double import BUCKETS, LatencyModel

LAB_ENV = {"DOUBLE_PREFILL_MS_PER_1K": "20", "DOUBLE_DECODE_MS_PER_TOKEN": "4", "DOUBLE_NOISE": "0.02"}
REGRESSIONS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)


def requests(model, rng, n, regression):
    """n requests' (ttft, e2e) in seconds, the lab traffic's mix, every latency (1 + regression) longer."""
    out = []
    for _ in range(n):
        ttft = model.ttft(rng.randint(50, 1500)) * (1 + regression)
        e2e = ttft + sum(model.decode() for _ in range(rng.randint(16, 120) - 1)) * (1 + regression)
        out.append((ttft, e2e))
    return out


def histogram(values, bounds):
    return {**{str(b): float(sum(1 for v in values if v <= b)) for b in bounds}, "+Inf": float(len(values))}


def window(reqs):
    out = {"ok": True, "latency_requests": float(len(reqs)), "requests": float(len(reqs)), "errors": 0.0,
           "error_rate": 0.0}
    for index, role in enumerate(("ttft", "e2e")):
        buckets = histogram([r[index] for r in reqs], BUCKETS["sglang"][role])
        out[role] = {"buckets": buckets, **{f"p{round(q * 100)}_s": bake_metrics.histogram_quantile(q, buckets)
                                            for q in bake_metrics.QUANTILES}}
    return out


def failure_rate(trials, n, regression, min_effect, seed=0):
    rng = random.Random(seed)
    model = LatencyModel(LAB_ENV, {})
    model.rng = random.Random(seed + 1)
    rule = {"min_effect": min_effect, "metrics": ["ttft_s", "e2e_s"]}
    failed = sum(bake_metrics.judge(window(requests(model, rng, n, 0.0)), window(requests(model, rng, n, regression)),
                                    rule)["verdict"] == "fail" for _ in range(trials))
    return failed / trials


def main(argv):
    trials = int(argv[1]) if len(argv) > 1 else 200
    n = int(argv[2]) if len(argv) > 2 else 60
    min_effect = float(argv[3]) if len(argv) > 3 else 0.02
    started = time.monotonic()
    rates = {r: failure_rate(trials, n, r, min_effect) for r in REGRESSIONS}
    caught = [r for r in REGRESSIONS if r > 0 and rates[r] >= 0.9]
    result = {"trials": trials, "requests_per_window": n, "min_effect": min_effect, "alpha": bake_metrics.DEFAULTS[
        "alpha"], "failure_rate_by_regression": {f"{r:g}": rates[r] for r in REGRESSIONS},
              "clean_bake_failure_rate": rates[0.0], "clean_under_5_percent": rates[0.0] < 0.05,
              "smallest_regression_caught_90_percent": min(caught) if caught else None,
              "seconds": round(time.monotonic() - started, 1),
              "noise": "the engine double's latency model as the lab provisions it; the machine's own jitter not in it"}
    Path(__file__).with_name("results-bake-detection.json").write_text(json.dumps(result, indent=2) + "\n")
    for r in REGRESSIONS:
        print(f"regression {r:>5.0%}: bake failed in {rates[r]:6.1%} of {trials}")
    print(f"clean bake failure rate {rates[0.0]:.1%} (must be under 5 %); smallest regression caught in 90 %: "
          f"{result['smallest_regression_caught_90_percent']}")
    return 0 if rates[0.0] < 0.05 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
