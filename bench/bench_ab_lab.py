#!/usr/bin/env python3
"""One lab A/B with the shipped design: what a sequential run spends against today's fixed n.

Runs candidate.yml on the lab host as an operator would, with the role's default cell size (at
most 12 candidate requests per cell, chunks of 4, first bracket 8) and the lab's cells (1k, 4k),
against the engine TEST DOUBLE, whose P2P candidate is truly faster (roles/lab_serving_host:
prefill 5 %, decode 3 %; per-step noise 2 %), and reads the run's decision.json: the verdict, the
requests each arm spent, and per cell the look at which the candidate stopped. Cost = requests
of the three brackets per cell / 3 against the fixed design's 12 per bracket (36 per cell).

Usage: .venv/bin/python bench/bench_ab_lab.py [RUNS]   (needs the lab host up and provisioned;
writes bench/results-ab-lab.json)
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXED_N = 12
ENV = {**os.environ, "ANSIBLE_NOCOLOR": "1", "CONTAINERS_CONF": str(REPO / "lab" / "containers.conf")}


def one_run():
    evidence = tempfile.mkdtemp(prefix="ab-lab-")
    started = time.perf_counter()
    result = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "inventory/lab",
                             "playbooks/candidate.yml", "-e",
                             json.dumps({"rollout_evidence_dir": evidence, "rollout_cell_requests": FIXED_N})],
                            cwd=REPO, env=ENV, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"candidate.yml failed ({result.returncode}):\n{result.stdout[-3000:]}")
    run = sorted(Path(evidence, "lab-gpu-1").glob("rollout-*"))[-1]
    decision = json.loads((run / "decision.json").read_text())
    cells = json.loads((run / "ab-verdict.json").read_text())["cells"]
    spent = decision["requests_per_arm"]
    return {"run": str(run), "verdict": decision["verdict"], "reasons": decision["reasons"],
            "requests_per_arm": spent, "cells": len(cells),
            "looks": {c["cell"]: f"{c['look']['look']} of {c['look']['looks']}" for c in cells},
            "requests_ratio": sum(spent.values()) / 3 / len(cells) / FIXED_N, "seconds": round(seconds, 1)}


def main():
    runs = [one_run() for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 1)]
    out = {"runs": runs, "mean_requests_ratio": sum(r["requests_ratio"] for r in runs) / len(runs),
           "command": f".venv/bin/python bench/bench_ab_lab.py {len(runs)}"}
    print(json.dumps(out, indent=2))
    (REPO / "bench" / "results-ab-lab.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
