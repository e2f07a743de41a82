#!/usr/bin/env python3
"""Figures for the lifecycle on the lab host (targets: a full candidate cycle's controller-side
overhead under 30 s excluding the engine's own start time; rollback.yml to restored-and-proven
under 10 s plus engine start).

Engine start = from the unit's first journal line of an invocation to its ready line.
Usage: .venv/bin/python bench/bench_lifecycle.py   (needs the lab host up and provisioned)
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LAB = "serving-lab-gpu-1"
READY = "The server is fired up and ready to roll!"
ENV = {**os.environ, "ANSIBLE_NOCOLOR": "1", "CONTAINERS_CONF": str(REPO / "lab" / "containers.conf")}
PLAYBOOK = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "inventory/lab"]


def lab(*command):
    return subprocess.run(["podman", "exec", LAB, *command], capture_output=True, text=True, check=True).stdout


def start_times(unit, since_us):
    """Engine start seconds of each invocation of `unit` after `since_us`."""
    entries = [json.loads(line) for line in lab("journalctl", "-u", unit, "-o", "json", "--no-pager",
                                                f"--since=@{since_us / 1e6:.6f}").splitlines()]
    by_invocation = {}
    for entry in entries:
        invocation = entry.get("_SYSTEMD_INVOCATION_ID")
        if not invocation:
            continue
        stamp = int(entry["__REALTIME_TIMESTAMP"])
        first, ready = by_invocation.get(invocation, (stamp, None))
        if READY in str(entry.get("MESSAGE", "")):
            ready = stamp
        by_invocation[invocation] = (min(first, stamp), ready)
    return [(ready - first) / 1e6 for first, ready in by_invocation.values() if ready]


def now_us():
    return int(lab("date", "+%s%6N").strip())


def timed(playbook):
    since = now_us()
    start = time.perf_counter()
    subprocess.run([*PLAYBOOK, f"playbooks/{playbook}"], cwd=REPO, env=ENV, check=True, capture_output=True)
    return time.perf_counter() - start, since


def main():
    wall, since = timed("candidate.yml")
    engine = sum(start_times("sglang-candidate.service", since)) + sum(start_times("sglang.service", since))
    # Leave a candidate running with the original stopped, as an interrupted run would.
    proc = subprocess.Popen([*PLAYBOOK, "playbooks/candidate.yml"], cwd=REPO, env=ENV, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        state = subprocess.run(["podman", "exec", LAB, "cat", "/var/lib/serving-rollout/sglang.service/state.json"],
                               capture_output=True, text=True).stdout
        if state and json.loads(state)["phase"] == "candidate-running":
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    rollback_wall, since = timed("rollback.yml")
    rollback_engine = sum(start_times("sglang.service", since))
    print(json.dumps({
        "candidate_cycle_wall_s": round(wall, 2), "engine_start_s": round(engine, 2),
        "controller_overhead_s": round(wall - engine, 2), "target_overhead_s": 30,
        "rollback_wall_s": round(rollback_wall, 2), "rollback_engine_start_s": round(rollback_engine, 2),
        "rollback_minus_engine_s": round(rollback_wall - rollback_engine, 2), "target_rollback_s": 10,
    }))


if __name__ == "__main__":
    main()
