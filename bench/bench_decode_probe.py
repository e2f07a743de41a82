#!/usr/bin/env python3
"""Side by side on one GPU host, in one run: the peer-path all-reduce probe (NCCL in a CUDA
graph), the old eager torch.distributed loop, and NVIDIA nccl-tests' all_reduce_perf (one
process per GPU through mpirun; its iterations in a CUDA graph with -G, and launched eagerly),
per arm and size.

Arms alternate A B A B ... A (A = NCCL_P2P_DISABLE=1, the baseline), so each B run sits between
two A runs; the P2P/no-P2P ratio of a round is B / mean(neighbouring As), reported as a
median and [min, max] over the rounds.

  python3 bench/bench_decode_probe.py --nccl-tests PATH/all_reduce_perf --rounds 3 > result.json
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from serving_rollout.module_utils import nccl_tests, p2p_orchestrator

REPO = Path(__file__).resolve().parent.parent

ARMS = {"no_p2p": {"NCCL_P2P_DISABLE": "1"}, "p2p": {"NCCL_P2P_DISABLE": "0"}}
SAFE = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def probe(worker, method, gpus, sizes, env, iters, reps):
    port = p2p_orchestrator.free_port()
    envs = [{**os.environ, **SAFE, **env, "RANK": str(r), "WORLD_SIZE": str(len(gpus)), "NCCL_DEBUG": "INFO",
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)} for r in range(len(gpus))]
    args = json.dumps({"gpus": gpus, "sizes": sizes, "iters": iters, "reps": reps, "max_gpu_mem_mib": 4096})
    ranks = p2p_orchestrator.run_processes([[sys.executable, worker, method, args]] * len(gpus), envs, 180)
    result = ranks[0]["result"] or {}
    transport = p2p_orchestrator.transport_of([r["output"] for r in ranks])
    return {"status": [r["status"] for r in ranks], "sizes": {s["bytes"]: s["median_us"] for s in
                                                              result.get("sizes", [])},
            "correct": all(s["correct"] for s in result.get("sizes", [])), "transport": transport["summary"],
            "p2p_in_effect": transport["p2p_in_effect"],
            "errors": [r["output"][-500:] for r in ranks if r["status"] != "ok"]}


def reference(binary, gpus, size, env, graph):
    """all_reduce_perf, one process per GPU (mpirun -np N -g 1) as engines run: launched
    eagerly (-n 1000), or its iterations captured in a CUDA graph (-G 10 -n 100), as a
    CUDA-graph decode step runs them."""
    base = {**os.environ, **SAFE, **env, "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))}
    argv = nccl_tests.command(binary, size, 1, **({"iters": 100, "graph_launches": 10} if graph else {}))
    exports = [x for k in list(SAFE) + list(env) for x in ("-x", k)]
    argv = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(len(gpus)), *exports, *argv]
    done = subprocess.run(argv, env=base, capture_output=True, text=True, timeout=180)
    parsed = nccl_tests.parse_output(done.stdout + done.stderr)
    row = next((r for r in parsed["rows"] if r["bytes"] == size), None)
    return {"time_us": row["out_of_place"]["time_us"] if row else None, "wrong": nccl_tests.wrong_total(parsed),
            "version": parsed["version"], "rc": done.returncode,
            "error": None if row else (done.stdout + done.stderr)[-600:]}


def bracket_ratios(series):
    """series: per run in A B A B .. A order -> [B_i / mean(A_i, A_i+1)]."""
    ratios = []
    for i in range(1, len(series) - 1, 2):
        a = (series[i - 1] + series[i + 1]) / 2
        if a and series[i]:
            ratios.append(series[i] / a)
    return ratios


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nccl-tests", default=shutil.which("all_reduce_perf"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="43008,33554432")
    parser.add_argument("--gpus", default="0,1")
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--reps", type=int, default=20)
    opts = parser.parse_args()
    sizes = [int(s) for s in opts.sizes.split(",")]
    gpus = [int(g) for g in opts.gpus.split(",")]
    workdir = tempfile.mkdtemp()
    worker = os.path.join(workdir, "p2p_worker.py")
    shutil.copy(REPO / "module_utils" / "p2p_worker.py", worker)
    order = ["no_p2p", "p2p"] * opts.rounds + ["no_p2p"]
    runs = []
    for index, arm in enumerate(order):
        env = ARMS[arm]
        run = {"index": index, "arm": arm,
               "graph": probe(worker, "allreduce_graph", gpus, sizes, env, opts.iters, opts.reps),
               "eager": probe(worker, "allreduce", gpus, sizes, env, opts.iters, 5)}
        if opts.nccl_tests:
            run["nccl_tests_graph"] = {s: reference(opts.nccl_tests, gpus, s, env, True) for s in sizes}
            run["nccl_tests_eager"] = {s: reference(opts.nccl_tests, gpus, s, env, False) for s in sizes}
        runs.append(run)
        print(f"run {index} {arm}: graph {run['graph']['sizes']} eager {run['eager']['sizes']} "
              f"nccl-tests graph {[(s, r['time_us']) for s, r in run.get('nccl_tests_graph', {}).items()]}",
              file=sys.stderr, flush=True)
    summary = []
    for size in sizes:
        row = {"bytes": size}
        for method in ("graph", "eager", "nccl_tests_graph", "nccl_tests_eager"):
            series = []
            for run in runs:
                if method not in run:
                    continue
                value = run[method]["sizes"].get(size) if method in ("graph", "eager") else run[method][size]["time_us"]
                series.append(value)
            if not series:
                continue
            per_arm = {arm: [v for v, run in zip(series, runs, strict=True) if run["arm"] == arm and v] for arm in ARMS}
            ratios = bracket_ratios(series)
            row[method] = {arm: {"median_us": statistics.median(v) if v else None, "runs_us": v}
                           for arm, v in per_arm.items()}
            row[method]["p2p_over_no_p2p"] = {"median": statistics.median(ratios) if ratios else None,
                                              "interval": [min(ratios), max(ratios)] if ratios else None,
                                              "rounds": len(ratios)}
        for method in ("graph", "eager"):
            for ref in ("nccl_tests_graph", "nccl_tests_eager"):
                if method in row and ref in row:
                    row[f"{method}_vs_{ref}"] = {
                        arm: row[method][arm]["median_us"] / row[ref][arm]["median_us"]
                        for arm in ARMS if row[method][arm]["median_us"] and row[ref][arm]["median_us"]}
        summary.append(row)
    checks = {"all_correct": all(r["graph"]["correct"] and r["eager"]["correct"] for r in runs),
              "nccl_tests_wrong": sum((r2["wrong"] or 0) for r in runs for m in ("nccl_tests_graph", "nccl_tests_eager")
                                      for r2 in r.get(m, {}).values()),
              "transport": {arm: sorted({t for r in runs if r["arm"] == arm for t in r["graph"]["transport"]})
                            for arm in ARMS}}
    print(json.dumps({"sizes": sizes, "gpus": gpus, "order": order, "summary": summary, "checks": checks,
                      "runs": runs}, indent=1, default=str))


if __name__ == "__main__":
    main()
