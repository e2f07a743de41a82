"""The host-side watchdog's script (module_utils/watchdog.py), run by /bin/sh in a temporary folder: it exits
when the lock is another run's, and restores when the lease ran out - writing the same state file
rollout_phase writes for 'restored', its record, and releasing the lock. systemctl is a double here (a
script that logs its arguments under tests' tmp_path): the lab's fault tests run the watchdog under real
systemd (test_lost_controller_the_host_watchdog_restores_within_its_lease)."""

import importlib.util
import json
import os
import subprocess
import time

import pytest
from conftest import REPO

from serving_rollout.module_utils.watchdog import lease_path, script

_spec = importlib.util.spec_from_file_location("rollout_phase", REPO / "library" / "rollout_phase.py")
rollout_phase = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rollout_phase)

UNIT, CANDIDATE = "sglang.service", "srtest-absent-candidate.service"  # no such file under /etc: rm -f is a no-op


@pytest.fixture
def host(tmp_path):
    state = tmp_path / "state"
    (state / UNIT).mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "systemctl.calls"
    double = bin_dir / "systemctl"  # the systemctl double: logs, and says "active" to is-active
    double.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n[ "$1" = is-active ] && echo active\nexit 0\n')
    double.chmod(0o755)
    lock = state / f"{UNIT}.lock"
    return state, lock, calls, {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def run_watchdog(state, lock, env, token="tok1"):
    path = state / UNIT / "watchdog.sh"
    path.write_text(script(UNIT, CANDIDATE, str(state), "20261203T190000Z", token, str(lock)))
    return subprocess.run(["/bin/sh", str(path)], env=env, capture_output=True, text=True, timeout=60)


def test_a_lapsed_lease_restores_and_writes_what_rollout_phase_writes(host):
    state, lock, calls, env = host
    lock.write_text(json.dumps({"token": "tok1", "run_id": "20261203T190000Z"}))
    lease = lease_path(str(lock))
    with open(lease, "w") as handle:
        handle.write("5\n")
    old = time.time() - 100  # renewed 100 s ago for 5 s: the controller is gone
    os.utime(lease, (old, old))
    done = run_watchdog(state, lock, env)
    assert done.returncode == 0, done.stderr
    assert "the controller is gone; restoring sglang.service" in done.stdout
    assert calls.read_text().splitlines()[:3] == [f"stop {CANDIDATE}", f"start {UNIT}", "daemon-reload"]
    expected = json.dumps(rollout_phase.phase_record(UNIT, CANDIDATE, "restored", "r"), indent=4, sort_keys=True)
    assert (state / UNIT / "state.json").read_text() == expected + "\n"  # what a rollback then rewrites nothing of
    record = json.loads((state / UNIT / "watchdog-20261203T190000Z.json").read_text())
    assert record["original"] == "active" and record["lease_s"] == 5 and record["lease_age_s"] >= 100
    assert not lock.exists() and not os.path.exists(lease)


def test_a_lock_held_by_another_run_ends_the_watchdog_without_touching_anything(host):
    state, lock, calls, env = host
    lock.write_text(json.dumps({"token": "rollback-took-it", "run_id": "other"}))
    done = run_watchdog(state, lock, env)
    assert done.returncode == 0 and done.stdout == ""
    assert not calls.exists() and lock.exists()
    assert not (state / UNIT / "state.json").exists()


def test_values_are_quoted_for_the_shell(tmp_path):
    text = script(UNIT, CANDIDATE, str(tmp_path / "a dir"), "r1", "tok", str(tmp_path / "a dir" / "x.lock"))
    assert f"lock='{tmp_path}/a dir/x.lock'" in text
    assert subprocess.run(["/bin/sh", "-n"], input=text, text=True).returncode == 0
