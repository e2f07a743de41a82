#!/usr/bin/env python3
"""How well a fleet promotion's bake detects a regression from the engine's histograms, at the lab's noise.

Simulates the bake's two windows (the original's, then the promoted unit's) as the lab makes them: the users'
traffic double's request mix (tests/doubles/lab_traffic.py: 50-1500 prompt words, 16-120 output tokens), timed by
the engine TEST DOUBLE's latency model as the lab provisions it (roles/lab_serving_host/defaults: 20 ms prefill per
1k tokens, 4 ms per decoded token, 2 % per-step noise; tests/doubles/engine_double.py LatencyModel), counted into
SGLang's own histogram buckets (the double's BUCKETS), and judged with the project's own code
(serving_rollout/bake_metrics.py: histogram_quantile, the one-sided Mann-Whitney over buckets, min_effect). A
regression R makes every latency of the promoted window (1 + R) longer, as the double's slowdown fault does.

Reported per R: how often the bake fails. R = 0 is a clean bake: its failure rate must be under 5 %, judged by the
95 % upper bound (Wilson) of the rate seen, so enough trials are needed to show it (3000 give about +-0.7 points).
The smallest R caught in at least 90 % of bakes is the detection floor for that window. Not included: the lab
machine's own jitter (a busy machine's scheduling delays), which the lab test guards against with a wide rule.

With --lab SECONDS it measures the clean rate on the lab itself instead: the users' traffic double on the three
lab fleet hosts for SECONDS, then back-to-back 20 s windows of each engine read from the lab's real Prometheus
(lab/fleet-up.sh and lab/prometheus-up.sh first), each pair judged as a bake judges an original's window against a
promoted one's: every failure is a false one, at the lab machine's own noise, jitter included.

Usage: .venv/bin/python -m bench.bench_bake_detection [TRIALS [REQUESTS_PER_WINDOW [MIN_EFFECT]]]
  (defaults 200, 60 - a 20 s window at the lab traffic's ~3 requests/s - and 0.02; writes
  bench/results-bake-detection.json, "simulated")
       .venv/bin/python -m bench.bench_bake_detection --lab 400   (writes its "lab" figures beside them)
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


def upper_95(failed, trials):
    """The Wilson score interval's upper end (95 %) of a rate seen as failed of trials: "under 5 %" is judged by it,
    not by the point estimate, which 400 trials leave uncertain by about 2 points."""
    if not trials:
        return 1.0
    z, rate = 1.959964, failed / trials
    centre = rate + z * z / (2 * trials)
    spread = z * ((rate * (1 - rate) + z * z / (4 * trials)) / trials) ** 0.5
    return round((centre + spread) / (1 + z * z / trials), 4)


LAB_HOSTS = {"lab-gpu-1": "serving-lab-gpu-1", "lab-gpu-2": "serving-lab-gpu-2", "lab-gpu-3": "serving-lab-gpu-3"}
PROMETHEUS = "http://127.0.0.1:9391"  # inventory/lab-fleet's
WINDOW_S = 20.0


def lab_clean_rate(seconds, min_effect=0.02):
    """Back-to-back windows of the lab's engines under the traffic double, judged pairwise: {pairs, failed, ...}."""
    import subprocess

    def traffic(container, start):
        command = ["systemctl", "stop", "lab-traffic-bench"]
        if start:
            command = ["systemd-run", "--unit", "lab-traffic-bench", "-p", "EnvironmentFile=/etc/sglang/sglang.env",
                       "python3", "/usr/local/bin/lab_traffic.py"]
        subprocess.run(["podman", "exec", container, *command], capture_output=True, check=start)

    for container in LAB_HOSTS.values():
        traffic(container, True)
    began = time.time() + 5  # the first requests' warm-up left out
    try:
        time.sleep(seconds + 5)
    finally:
        for container in LAB_HOSTS.values():
            traffic(container, False)
    time.sleep(3)  # Prometheus scrapes each second: the last window's end is in it
    rule = {"min_effect": min_effect, "metrics": ["ttft_s", "e2e_s"]}
    judged = []
    for host in LAB_HOSTS:
        moments = [began + k * WINDOW_S for k in range(int(seconds // WINDOW_S) + 1)]
        readings = [bake_metrics.prometheus_reading(PROMETHEUS, "sglang", {"host": host}, at) for at in moments]
        windows = [bake_metrics.window(a, b) for a, b in zip(readings, readings[1:], strict=False)]
        judged += [bake_metrics.judge(a, b, rule) for a, b in zip(windows[0::2], windows[1::2], strict=False)]
    failed = [j["reasons"] for j in judged if j["verdict"] == "fail"]
    return {"seconds_of_traffic": seconds, "window_s": WINDOW_S, "pairs": len(judged), "failed": len(failed),
            "clean_bake_failure_rate": round(len(failed) / max(len(judged), 1), 4),
            "clean_upper_95": upper_95(len(failed), len(judged)), "reasons": failed,
            "requests_per_window": sorted(j["shown"]["requests"][0] for j in judged if j.get("shown")),
            "noise": "the lab machine itself: the engine double under the traffic double, read from Prometheus"}


def main(argv):
    if len(argv) == 3 and argv[1] == "--lab":
        path = Path(__file__).with_name("results-bake-detection.json")
        result = json.loads(path.read_text()) if path.exists() else {}
        result["lab"] = lab_clean_rate(float(argv[2]))
        path.write_text(json.dumps(result, indent=2) + "\n")
        lab = result["lab"]
        print(f"lab: {lab['failed']} of {lab['pairs']} clean window pairs failed "
              f"({lab['clean_bake_failure_rate']:.1%}, at most {lab['clean_upper_95']:.1%} at 95 %)")
        return 0 if lab["clean_bake_failure_rate"] < 0.05 else 1
    trials = int(argv[1]) if len(argv) > 1 else 200
    n = int(argv[2]) if len(argv) > 2 else 60
    min_effect = float(argv[3]) if len(argv) > 3 else 0.02
    started = time.monotonic()
    rates = {r: failure_rate(trials, n, r, min_effect) for r in REGRESSIONS}
    caught = [r for r in REGRESSIONS if r > 0 and rates[r] >= 0.9]
    clean_upper = upper_95(round(rates[0.0] * trials), trials)
    path = Path(__file__).with_name("results-bake-detection.json")
    kept = json.loads(path.read_text()).get("lab") if path.exists() else None
    result = {"trials": trials, "requests_per_window": n, "min_effect": min_effect, "alpha": bake_metrics.DEFAULTS[
        "alpha"], "failure_rate_by_regression": {f"{r:g}": rates[r] for r in REGRESSIONS},
              "clean_bake_failure_rate": rates[0.0], "clean_upper_95": clean_upper,
              "clean_under_5_percent": clean_upper < 0.05,
              "smallest_regression_caught_90_percent": min(caught) if caught else None,
              "seconds": round(time.monotonic() - started, 1),
              "noise": "the engine double's latency model as the lab provisions it; the machine's own jitter not in it"}
    path.write_text(json.dumps({**result, **({"lab": kept} if kept else {})}, indent=2) + "\n")
    for r in REGRESSIONS:
        print(f"regression {r:>5.0%}: bake failed in {rates[r]:6.1%} of {trials}")
    print(f"clean bake failure rate {rates[0.0]:.1%}, at most {result['clean_upper_95']:.1%} (95 %; must be under "
          f"5 %); smallest regression caught in 90 %: {result['smallest_regression_caught_90_percent']}")
    return 0 if result["clean_under_5_percent"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
