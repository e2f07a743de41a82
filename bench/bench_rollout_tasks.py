#!/usr/bin/env python3
"""Figure (issue 47): the Ansible round trips of one lab rollout - the task results of candidate-p2p.yml's
rollout play (candidate.yml: fleet begin, the rollout role, the fleet record), the capture play apart.

Runs `bin/lab-run` (the README's main job: the lab host, its provisioning, candidate-p2p.yml) and counts the
task banners of each play in its own output, with the play recap's ok/changed/skipped and the run's wall time.
Each banner is one round trip from the controller's strategy (an action's own module calls on the host are not).

Usage: .venv/bin/python -m bench.bench_rollout_tasks   (appends to bench/results-rollout-tasks.json)
"""

import json
import re
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "results-rollout-tasks.json"
RECAP = re.compile(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)\s+skipped=(\d+)")


def plays(text):
    """[(play name, task banners, recap)] of a playbook run's output, in order."""
    found, current = [], None
    for line in text.splitlines():
        if line.startswith("PLAY [") and not line.startswith("PLAY RECAP"):
            current = {"play": line[6:line.index("]")], "tasks": 0, "recap": None}
            found.append(current)
        elif line.startswith("TASK [") and current is not None:
            current["tasks"] += 1
        elif (m := RECAP.match(line)) and found:
            found[-1]["recap"] = dict(zip(("ok", "changed", "failed", "skipped"), map(int, m.groups()[1:]),
                                          strict=True))
    return found


def main():
    start = time.perf_counter()
    run = subprocess.run([str(REPO / "bin" / "lab-run")], cwd=REPO, capture_output=True, text=True,
                         stdin=subprocess.DEVNULL)
    seconds = round(time.perf_counter() - start, 1)
    text = run.stdout[run.stdout.index("== candidate-p2p.yml against"):] if "== candidate-p2p.yml" in run.stdout \
        else run.stdout
    found = plays(text)
    rollout = next((p for p in found if p["play"].startswith("Roll out a one-control candidate")), None)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    result = {"schema": "serving-rollout.rollout-tasks/v1", "commit": commit, "rc": run.returncode,
              "command": "bin/lab-run", "seconds": seconds, "plays": found,
              "rollout_play_tasks": rollout["tasks"] if rollout else None, "limit": 60}
    runs = json.loads(OUT.read_text())["runs"] if OUT.exists() else []
    OUT.write_text(json.dumps({"runs": runs + [result]}, indent=1) + "\n")
    print(f"{commit}: rc {run.returncode}, {seconds} s; rollout play {result['rollout_play_tasks']} tasks "
          f"(limit 60); " + "; ".join(f"{p['play']}: {p['tasks']}" for p in found))


if __name__ == "__main__":
    main()
