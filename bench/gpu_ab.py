#!/usr/bin/env python3
"""The p2p A/B on real GPUs with the tensor-parallel GPU engine double (a TEST DOUBLE of
SGLang: real GPU work and real NCCL, random weights), in one batch on the GPU machine:

1. arms baseline-1 (NCCL_P2P_DISABLE=1), candidate (0), baseline-2 (1), the engine restarted
   per arm; each arm's transport proven from NCCL's own lines in the engine's log;
2. per arm and cell, the project's latency cell (module_utils/cells.py: streamed requests at
   concurrency 1, fixed 32-word contract output, unique prefixes, NVML telemetry);
3. the project's verdict (serving_rollout/play/abstats.py) on the bracketed cells;
4. the decode-size probe (p2p_worker allreduce_graph, arms bracketed) at the double's decode
   all-reduce size, and its predicted effect beside the measured deltas;
5. a run directory in the rollout's evidence format, finalized by serving_rollout/evidence.py (decision
   record, result card, manifest).

There is no systemd on the GPU machine, so nothing is restored there: the record says so.

  python3 bench/gpu_ab.py --out DIR [--requests 16] [--cells 1k:1000,16k:16000]
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from serving_rollout import evidence
from serving_rollout.module_utils import decode_model, nccl_facts, p2p_orchestrator
from serving_rollout.module_utils.cells import run_cell
from serving_rollout.module_utils.engine_client import get_json
from serving_rollout.play import abstats

REPO = Path(__file__).resolve().parent.parent

DOUBLE = REPO / "tests" / "doubles" / "gpu_engine_double.py"
SAFE = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
ARMS = [("baseline-1", "1"), ("candidate", "0"), ("baseline-2", "1")]
MODEL, REVISION = "test/gpu-engine-double-llama-8b-shape", "0" * 40


def start(arm_value, port, log_path, tp):
    env = {**os.environ, **SAFE, "NCCL_DEBUG": "INFO", "NCCL_P2P_DISABLE": arm_value, "NCCL_CUMEM_ENABLE": "0",
           "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, str(DOUBLE), "--model-path", MODEL, "--revision", REVISION, "--tp-size", str(tp),
            "--context-length", "32768", "--disable-custom-all-reduce", "--host", "127.0.0.1", "--port", str(port)]
    log = open(log_path, "w")
    return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def wait_ready(url, proc, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            if get_json(url, "/health_generate", timeout=2)["status"] == 200:
                return True
        except Exception:  # not listening yet
            pass
        time.sleep(0.5)
    return False


def stop(proc):
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def probe(sizes, order, tp):
    """The decode-size probe, arms in `order`: {bytes: median us} per arm label, and transports."""
    workdir = tempfile.mkdtemp()
    worker = os.path.join(workdir, "p2p_worker.py")
    Path(worker).write_text((REPO / "module_utils" / "p2p_worker.py").read_text())
    runs = []
    for label, value in order:
        port = p2p_orchestrator.free_port()
        envs = [{**os.environ, **SAFE, "NCCL_DEBUG": "INFO", "NCCL_P2P_DISABLE": value, "RANK": str(r),
                 "WORLD_SIZE": str(tp), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)} for r in range(tp)]
        args = json.dumps({"gpus": list(range(tp)), "sizes": sizes, "iters": 100, "reps": 20, "max_gpu_mem_mib": 4096})
        ranks = p2p_orchestrator.run_processes([[sys.executable, worker, "allreduce_graph", args]] * tp, envs, 180)
        result = ranks[0]["result"] or {}
        runs.append({"label": label, "status": "ok" if all(r["status"] == "ok" for r in ranks) else "error",
                     "sizes": result.get("sizes", []), "seconds": ranks[0]["seconds"],
                     "transport": p2p_orchestrator.transport_of([r["output"] for r in ranks]),
                     "errors": [r["output"][-600:] for r in ranks if r["status"] != "ok"]})
    return runs


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--cells", default="1k:1000,16k:16000")
    parser.add_argument("--tp", type=int, default=2)
    opts = parser.parse_args()
    cells = [(c.split(":")[0], int(c.split(":")[1])) for c in opts.cells.split(",")]
    run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    run = Path(opts.out) / "gpu-h200x2" / f"rollout-{run_id}"
    run.mkdir(parents=True)
    started = time.monotonic()
    arms, journal, timings = {}, {}, {}
    for arm, value in ARMS:
        port = p2p_orchestrator.free_port()
        url = f"http://127.0.0.1:{port}"
        log_path = run.parent / f"engine-{arm}.log"
        t0 = time.monotonic()
        proc = start(value, port, log_path, opts.tp)
        ready = wait_ready(url, proc, 300)
        timings[f"{arm}_start_s"] = time.monotonic() - t0
        if not ready:
            stop(proc)
            raise SystemExit(f"{arm}: the GPU double did not become ready; log:\n{log_path.read_text()[-3000:]}")
        arms[arm] = []
        for name, tokens in cells:
            cell = run_cell({"base_url": url, "model": MODEL, "requests": opts.requests, "concurrency": 1,
                             "prompt_tokens": tokens, "contract_words": 32, "timeout_s": 120,
                             "telemetry_interval_s": 0.5})
            arms[arm].append({"name": name, "arm": arm, "prompt_tokens_target": tokens, "concurrency": 1, **cell})
            print(f"{arm} {name}: {len(cell['requests'])} requests, failures {cell['failures']}", file=sys.stderr,
                  flush=True)
        stop(proc)
        text = log_path.read_text()
        parsed = nccl_facts.parse_log(text)
        journal[arm] = {"ready": "The server is fired up and ready to roll!" in text,
                        "errors": [line for line in text.splitlines() if "NCCL WARN" in line or "Traceback" in line],
                        "nccl": {"versions": parsed["versions"], "summary": parsed["summary"],
                                 "p2p_in_effect": parsed["proof"]["in_effect"],
                                 "p2p_reasons": parsed["proof"]["reasons"],
                                 "ranks": parsed["proof"]["ranks"],
                                 "transports": sorted({t for p in parsed["pairs"] for t in p["transports"]})},
                        "excerpt": [line for line in text.splitlines() if "NCCL INFO Channel" in line][:8]}
    timings["arms_s"] = time.monotonic() - started
    shape_env = {"hidden": 4096, "layers": 32}
    shape = decode_model.shape_from_config({"num_hidden_layers": shape_env["layers"],
                                            "hidden_size": shape_env["hidden"]}, "the GPU double's shape")
    call = decode_model.decode_allreduce(shape, 1)
    t0 = time.monotonic()
    probe_runs = probe([call["bytes"], 43008, 33554432], [("no_p2p", "1"), ("p2p", "0"), ("no_p2p", "1")], opts.tp)
    timings["probe_s"] = time.monotonic() - t0
    comparison = p2p_orchestrator.compare_brackets(probe_runs, [call["bytes"], 43008, 33554432])
    measured = {arm: {c["bytes"]: c[arm]["median_us"] for c in comparison if c.get(arm, {}).get("median_us")}
                for arm in ("no_p2p", "p2p")}
    prediction = decode_model.predict(shape, measured["no_p2p"], measured["p2p"], 1)

    matched = [{"name": name, "baseline": [next(c for c in arms["baseline-1"] if c["name"] == name)["requests"],
                                           next(c for c in arms["baseline-2"] if c["name"] == name)["requests"]],
                "candidate": next(c for c in arms["candidate"] if c["name"] == name)["requests"],
                "contract_violations": [v for a in arms.values() for c in a if c["name"] == name
                                        for v in c["contract_violations"]]} for name, _ in cells]
    verdicts = [abstats.cell_verdict(c) for c in matched]
    decision = abstats.decide(verdicts)

    def write(name, body):
        (run / name).write_text(json.dumps({"schema": f"serving-rollout.{name[:-5]}/v1", **body}, indent=2,
                                           default=str) + "\n")
    host = {"gpus": f"{opts.tp}x NVIDIA H200 (NV18, one host)", "engine": "gpu_engine_double (TEST DOUBLE)"}
    write("outcome.json", {"run_id": run_id, "host": "gpu-h200x2", "candidate_id": "p2p", "failure": None,
                           "restored": False, "engine_double": True,
                           "note": "no systemd on the GPU machine: each arm is a fresh engine process; nothing to "
                                   "restore", "timings": timings, "hardware": host})
    write("recipes.json", {"original": {"model": MODEL, "revision": REVISION,
                                        "engine": "gpu_engine_double (TEST DOUBLE)",
                                        "runtime": "process", "tp_size": opts.tp, "context_length": 32768,
                                        "gpus": ",".join(map(str, range(opts.tp)))},
                           "difference": {"control": "env:NCCL_P2P_DISABLE", "before": "1", "after": "0"}})
    write("cells.json", {"arms": arms})
    write("ab-verdict.json", {"cells": verdicts, "decision": decision})
    write("journal-excerpts.json", {"candidate": journal["candidate"], "restored": journal["baseline-2"],
                                    "baseline-1": journal["baseline-1"]})
    (run.parent / f"peer-path-{run_id}").mkdir()
    (run.parent / f"peer-path-{run_id}" / "peer-path-observation.json").write_text(json.dumps({
        "schema": "serving-rollout.peer-path-observation/v1",
        "peer_path": {"allreduce": {"method": "graph", "runs": probe_runs, "comparison": comparison},
                      "decode": {"source": "the GPU double's shape", "shape": shape, "call": call,
                                 "prediction": prediction, "arms": {"baseline": "no_p2p", "candidate": "p2p"}}}},
        indent=2, default=str))
    final = evidence.finalize(run)
    print(json.dumps({"run": str(run), "decision": final, "timings": timings, "prediction": prediction,
                      "journal": {a: j["nccl"] for a, j in journal.items()}}, indent=1, default=str))


if __name__ == "__main__":
    main()
