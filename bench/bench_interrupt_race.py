#!/usr/bin/env python3
"""How a Ctrl-C of ansible-playbook ends, at the moment it is most fragile: as a task starts.

Each trial runs candidate.yml on the lab host, sends SIGINT to its process group the moment the task
after "Record the phase (candidate-running)" prints its banner (a worker is starting and writing to
the result queue), and records how the run ended:
  reported  - it exited, naming the host's phase and the recovery command (what an operator needs)
  went-on   - the interrupt was lost: the play ran to its end (ansible-core 2.19, ansible/ansible#86078)
  hung      - no exit within --hang-s after the interrupt (a worker stopped while it held the result
              queue's lock, ansible/ansible#29124); the trial kills it
After each trial rollback.yml restores the lab host. Run it with CPU load beside it (the race needs a
busy machine), once with the interrupted callback enabled (as shipped) and once with
--ansible-own-interrupt (the callback's signal handlers left out, so Ansible's own path handles it).

Usage: .venv/bin/python bench/bench_interrupt_race.py [--trials N] [--ansible-own-interrupt]
       (needs the lab host up and provisioned; writes bench/results-interrupt-race.json)
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

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "ANSIBLE_NOCOLOR": "1", "CONTAINERS_CONF": str(REPO / "lab" / "containers.conf")}
PLAYBOOK = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "inventory/lab"]
AFTER_TASK = "Record the phase (candidate-running)"
EXTRA = {"rollout_ready_timeout_s": 10, "rollout_gpu_free_timeout_s": 20, "rollout_cell_requests": 12,
         "rollout_cells": [{"name": "1k", "prompt_tokens": 1000}], "rollout_cell_progress_every": 2}


def read_past(proc, task_name):
    """Output up to the banner of the task after `task_name` (None if the playbook ended first)."""
    seen, in_task = [], False
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("TASK ["):
            if in_task:
                return "".join(seen)
            in_task = f": {task_name}]" in line
    return None


def trial(env, hang_s):
    evidence = tempfile.mkdtemp(prefix="interrupt-race-")
    proc = subprocess.Popen([*PLAYBOOK, "playbooks/candidate.yml", "-e",
                             json.dumps({**EXTRA, "rollout_evidence_dir": evidence})],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    if read_past(proc, AFTER_TASK) is None:
        proc.wait()
        return "no-interrupt-point"
    sent = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    try:
        output = proc.communicate(timeout=hang_s)[0]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return "hung"
    took = round(time.monotonic() - sent, 1)
    if "INTERRUPTED: lab-gpu-1 was at phase" in output and proc.returncode != 0:
        return f"reported in {took} s"
    return "went-on" if "PLAY RECAP" in output else f"exited {proc.returncode} without the report"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--hang-s", type=int, default=120)
    parser.add_argument("--ansible-own-interrupt", action="store_true",
                        help="leave the callback's signal handlers out (Ansible's own interrupt path)")
    args = parser.parse_args()
    if args.trials < 1:
        parser.error(f"--trials must be at least 1, got {args.trials}")
    env = dict(ENV)
    if args.ansible_own_interrupt:
        env["SERVING_ROLLOUT_ANSIBLE_OWN_INTERRUPT"] = "1"
    outcomes = []
    for number in range(args.trials):
        outcome = trial(env, args.hang_s)
        outcomes.append(outcome)
        restored = subprocess.run([*PLAYBOOK, "playbooks/rollback.yml"], cwd=REPO, env=ENV, capture_output=True)
        print(f"trial {number + 1}: {outcome}; rollback rc {restored.returncode}", flush=True)
        if restored.returncode != 0:
            sys.exit("rollback.yml failed: the lab host needs a look before more trials")
    counts = {}
    for outcome in outcomes:
        key = "reported" if outcome.startswith("reported") else outcome
        counts[key] = counts.get(key, 0) + 1
    result = {"handler": "ansible's own" if args.ansible_own_interrupt else "interrupted callback",
              "trials": args.trials, "counts": counts, "outcomes": outcomes,
              "load": os.getloadavg()[0]}
    print(json.dumps(result, indent=2))
    out = REPO / "bench" / "results-interrupt-race.json"
    previous = json.loads(out.read_text()) if out.exists() else {}
    previous[result["handler"]] = result
    out.write_text(json.dumps(previous, indent=2) + "\n")


if __name__ == "__main__":
    main()
