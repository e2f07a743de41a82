#!/usr/bin/env python3
"""Figure: a 3-host rollout with canary 1 and batch 2 takes about canary + one batch of wall time.

Runs bin/serving-rollout (ansible-runner) against the lab fleet (lab/fleet-up.sh: three lab hosts,
the engine TEST DOUBLE on each, the candidate given a large speedup so every verdict is
acceptable), then compares the wall time with the canary's duration plus the longest duration of
the second batch, from the fleet summary.

Usage: .venv/bin/python bench/bench_fleet_rollout.py   (writes bench/results-fleet-rollout.json)
"""

import json
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FAULTS = "/etc/engine-double/faults/sglang-candidate.service"
CONTAINERS = ("serving-lab-gpu-1", "serving-lab-gpu-2", "serving-lab-gpu-3")


def main():
    subprocess.run([REPO / "lab" / "fleet-up.sh"], check=True, capture_output=True)
    for name in CONTAINERS:
        subprocess.run(["podman", "exec", name, "sh", "-c",
                        f"mkdir -p /etc/engine-double/faults && echo speedup:0.5 > {FAULTS}"], check=True)
    evidence = tempfile.mkdtemp(prefix="bench-fleet-")
    try:
        start = time.perf_counter()
        run = subprocess.run([REPO / "bin" / "serving-rollout", "run", "candidate", "-i", "inventory/lab-fleet",
                              "--canary", "1", "--batch-size", "2", "--evidence", evidence, "--json",
                              "-e", '{"rollout_cells": [{"name": "1k", "prompt_tokens": 1000}], '
                                    '"rollout_cell_requests": 4}'], cwd=REPO, capture_output=True, text=True)
        wall = time.perf_counter() - start
    finally:
        for name in CONTAINERS:
            subprocess.run(["podman", "exec", name, "rm", "-f", FAULTS], check=False)
    doc = json.loads(run.stdout)
    if doc["exit_code"] != 0:
        raise SystemExit(json.dumps(doc, indent=2))
    durations = {h["host"]: h["duration_s"] for h in doc["hosts"]}
    canary, batch = durations["lab-gpu-1"], max(durations["lab-gpu-2"], durations["lab-gpu-3"])
    result = {"hosts": 3, "canary": 1, "batch_size": 2, "wall_s": round(wall, 1), "host_durations_s": durations,
              "canary_plus_batch_s": round(canary + batch, 1), "ratio": round(wall / (canary + batch), 2),
              "note": "wall includes ansible-runner start-up and each batch's gate and records",
              "command": ".venv/bin/python bench/bench_fleet_rollout.py"}
    print(json.dumps(result))
    (REPO / "bench" / "results-fleet-rollout.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
