"""The host-side watchdog (module_utils/watchdog.py) as the host runs it: the one script rollout_watchdog builds
from unit_stop's, put_back's and the watchdog's own source, run by Python with its JSON settings. systemctl is a
TEST DOUBLE here (a script under tmp_path that logs its arguments and keeps each unit's ActiveState in a file,
one candidate ignoring SIGTERM until SIGKILL); the lab runs the watchdog under real systemd
(test_rollout_faults.py: the lost controller; test_trust.py: a rollback killed after its take-over)."""

import hashlib
import inspect
import json
import os
import re
import subprocess
import sys
import time

import pytest

from serving_rollout.module_utils import put_back, unit_stop, watchdog

UNIT, CANDIDATE = "sglang.service", "srtest-absent-candidate.service"  # no such unit file under /etc

SYSTEMCTL = """#!/bin/sh
echo "$*" >> {calls}
case "$1" in
  show) cat {units}/"$6" 2>/dev/null || echo inactive ;;
  stop) [ -e {units}/"$4".ignores-term ] || echo inactive > {units}/"$4" ;;
  kill) echo inactive > {units}/"$5" ;;
  start) echo active > {units}/"$3" ;;
esac
exit 0
"""


@pytest.fixture
def host(tmp_path):
    state, units, bin_dir = tmp_path / "state", tmp_path / "units", tmp_path / "bin"
    for folder in (state / UNIT, units, bin_dir):
        folder.mkdir(parents=True)
    calls = tmp_path / "systemctl.calls"
    double = bin_dir / "systemctl"
    double.write_text(SYSTEMCTL.format(calls=calls, units=units))
    double.chmod(0o755)
    (units / CANDIDATE).write_text("active\n")
    original = tmp_path / "sglang.service"
    original.write_text("[Service]\nExecStart=/bin/true\n")
    files = [{"path": str(original), "sha256": hashlib.sha256(original.read_bytes()).hexdigest()}]
    lock = state / f"{UNIT}.lock"
    return {"state": state, "units": units, "calls": calls, "lock": lock, "original": original, "files": files,
            "env": {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}}


def lease(lock, seconds, age):
    path = watchdog.lease_path(str(lock))
    with open(path, "w") as handle:
        handle.write(f"{seconds}\n")
    then = time.time() - age
    os.utime(path, (then, then))


def run_script(host, run_id="20261203T190000Z-ab12", stop_timeout_s=5, promotion=False):
    """The watchdog as rollout_watchdog writes and starts it (the script and its JSON settings)."""
    folder = host["state"] / UNIT
    script = folder / "watchdog.py"
    script.write_text(watchdog.script([inspect.getsource(m) for m in (unit_stop, put_back, watchdog)]))
    settings = folder / "watchdog.json"
    settings.write_text(json.dumps(watchdog.config(UNIT, UNIT if promotion else CANDIDATE, str(host["state"]), run_id,
                                                   str(host["lock"]), stop_timeout_s, host["files"], promotion)))
    return subprocess.run([sys.executable, str(script), str(settings)], env=host["env"], capture_output=True,
                          text=True, timeout=120)


def calls(host):
    return host["calls"].read_text().splitlines() if host["calls"].exists() else []


def test_a_lapsed_lease_restores_as_a_restore_does_and_writes_what_rollout_phase_writes(host):
    host["lock"].write_text(json.dumps({"token": "tok1", "run_id": "r"}))
    lease(host["lock"], 5, age=100)  # renewed 100 s ago for 5 s: its holder is gone
    done = run_script(host)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "its holder is gone; restoring sglang.service" in done.stdout
    said = calls(host)
    assert said[1] == f"stop --no-block -- {CANDIDATE}" and "kill" not in " ".join(said)
    assert said.index(f"start -- {UNIT}") > said.index(f"stop --no-block -- {CANDIDATE}")
    assert said.index("daemon-reload") > said.index(f"start -- {UNIT}")
    expected = json.dumps(put_back.phase_record(UNIT, CANDIDATE, "restored", "r"), indent=4, sort_keys=True)
    assert (host["state"] / UNIT / "state.json").read_text() == expected + "\n"  # what a rollback rewrites nothing of
    record = json.loads((host["state"] / UNIT / "watchdog-20261203T190000Z-ab12.json").read_text())
    assert record["original"] == "active" and record["failures"] == [] and record["edited"] == []
    assert record["lease_lapsed_s"] >= 90
    assert not host["lock"].exists() and not os.path.exists(watchdog.lease_path(str(host["lock"])))


def test_a_candidate_that_ignores_sigterm_is_killed_at_the_restores_deadline(host):
    (host["units"] / f"{CANDIDATE}.ignores-term").write_text("")
    host["lock"].write_text(json.dumps({"token": "tok1"}))
    lease(host["lock"], 5, age=100)
    done = run_script(host, stop_timeout_s=1)
    assert done.returncode == 0, done.stdout + done.stderr
    said = calls(host)
    assert f"kill --kill-whom=all --signal=SIGKILL -- {CANDIDATE}" in said
    assert said.index(f"start -- {UNIT}") > said.index(f"kill --kill-whom=all --signal=SIGKILL -- {CANDIDATE}")
    record = json.loads(next((host["state"] / UNIT).glob("watchdog-*.json")).read_text())
    assert "ignored its stop for 1 s" in record["candidate_stop"] and record["original"] == "active"


def test_an_original_edited_during_the_run_is_started_as_it_is_and_named(host):
    host["original"].write_text("[Service]\nExecStart=/bin/true\nTimeoutStopSec=45\n")  # the operator's edit
    host["lock"].write_text(json.dumps({"token": "tok1"}))
    lease(host["lock"], 5, age=100)
    done = run_script(host)
    assert done.returncode == 0, done.stdout + done.stderr
    assert host["original"].read_text().endswith("TimeoutStopSec=45\n")  # never overwritten
    record = json.loads(next((host["state"] / UNIT).glob("watchdog-*.json")).read_text())
    assert record["edited"] == [str(host["original"])] and record["original"] == "active"
    assert "differ from the snapshot (edited during the run)" in done.stdout


def test_a_released_lock_ends_the_watchdog_without_touching_anything(host):
    lease(host["lock"], 5, age=100)  # a lease left without its lock means nothing
    done = run_script(host)
    assert done.returncode == 0 and done.stdout == ""
    assert calls(host) == [] and not (host["state"] / UNIT / "state.json").exists()


def test_the_watchdog_keeps_the_duty_for_whoever_holds_the_lock_and_renews_its_lease(host):
    """A rollback takes the lock over (another token) and renews the lease: the watchdog waits on; when that
    holder releases the lock, it exits without acting. In-process, its clock and sleep the test's own."""
    host["lock"].write_text(json.dumps({"token": "the-run"}))
    lease(host["lock"], 600, age=0)
    ticks = []

    def sleep(_seconds):
        ticks.append(1)
        if len(ticks) == 2:  # the take-over: another token, a fresh lease
            host["lock"].write_text(json.dumps({"token": "the-rollback"}))
            lease(host["lock"], 600, age=0)
        if len(ticks) == 4:  # the rollback put the original back and released the lock
            os.unlink(host["lock"])

    cfg = watchdog.config(UNIT, CANDIDATE, str(host["state"]), "r", str(host["lock"]), 5, host["files"])
    assert watchdog.watch(cfg, run=lambda argv: pytest.fail(f"acted: {argv}"), sleep=sleep, say=print) is None
    assert len(ticks) == 4


def test_planted_values_reach_the_script_only_as_json(host, tmp_path):
    """A run id with a newline and commands: the script's text holds no value of the run, and running it runs no
    command of theirs; the record's file name is a plain name."""
    planted = tmp_path / "planted"
    run_id = f"x\n$(touch {planted})`touch {planted}`;touch {planted}"
    text = watchdog.script([inspect.getsource(m) for m in (unit_stop, put_back, watchdog)])
    assert str(planted) not in text and UNIT not in text and CANDIDATE not in text
    host["lock"].write_text(json.dumps({"token": "tok1"}))
    lease(host["lock"], 5, age=100)
    done = run_script(host, run_id=run_id)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not planted.exists()
    records = [p.name for p in (host["state"] / UNIT).glob("watchdog-*.json")]
    assert len(records) == 1 and re.fullmatch(r"watchdog-[A-Za-z0-9_.-]+\.json", records[0]), records
    assert json.loads((host["state"] / UNIT / records[0]).read_text())["run_id"] == run_id


def test_the_lease_is_kept_while_a_long_step_runs_and_only_while_the_lock_is_this_runs(tmp_path):
    """LeaseKeeper (latency_cell runs each candidate chunk inside one): renewals while the lock holds the token,
    none once it holds another (a rollback took it over); a renewal that fails ends them and is kept."""
    lock = tmp_path / "sglang.service.lock"
    lock.write_text(json.dumps({"token": "mine"}))
    lease(lock, 15, age=100)  # lapsed: only the keeper's renewals make it fresh
    with watchdog.LeaseKeeper(str(lock), "mine", 15, every_s=0.05) as keeper:
        deadline = time.monotonic() + 30
        while keeper.renewals < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        lock.write_text(json.dumps({"token": "the-rollback"}))
        renewed = keeper.renewals
        time.sleep(0.3)
    assert renewed >= 2 and keeper.renewals <= renewed + 1 and keeper.problem is None
    assert 0 < watchdog.lease_left(str(lock), time.time()) <= 15
    blocked = tmp_path / "blocked.lock"
    blocked.write_text(json.dumps({"token": "mine"}))
    os.mkdir(watchdog.lease_path(str(blocked)))  # a renewal that cannot be written, as on a full disk
    with watchdog.LeaseKeeper(str(blocked), "mine", 15, every_s=0.05) as keeper:
        deadline = time.monotonic() + 30
        while keeper.problem is None and time.monotonic() < deadline:
            time.sleep(0.05)
    assert keeper.problem.startswith(f"cannot renew the lease {blocked}.lease: ")
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def promoted(host, copy_text="[Service]\nExecStart=/bin/true\n"):
    """The host mid-promotion: the promoted unit written over the original's path and running, the snapshot's verified
    copy of the previous original beside it, the promotion's record written."""
    copy = host["state"] / UNIT / "files" / "0"
    copy.parent.mkdir(parents=True)
    copy.write_text(copy_text)
    host["original"].write_text("# Promoted by serving-rollout\n[Service]\nExecStart=/bin/true --p2p\n")
    (host["units"] / UNIT).write_text("active\n")
    (host["state"] / UNIT / "promoted.json").write_text(json.dumps({"run_id": "R1"}))
    info = host["original"].stat()
    host["files"] = [{**host["files"][0], "copy": str(copy), "mode": "0640", "uid": info.st_uid, "gid": info.st_gid}]
    host["lock"].write_text(json.dumps({"token": "tok1", "run_id": "promotion-R1"}))
    lease(host["lock"], 5, age=100)


def test_a_promotion_whose_controller_died_is_undone_the_previous_original_put_back_from_the_snapshot(host):
    before = host["files"][0]["sha256"]
    promoted(host)
    done = run_script(host, promotion=True)
    assert done.returncode == 0, done.stdout + done.stderr
    said = calls(host)
    assert said[1] == f"stop --no-block -- {UNIT}"  # the promoted engine first
    assert said.index("daemon-reload") < said.index(f"start -- {UNIT}")  # its files back before it starts
    assert hashlib.sha256(host["original"].read_bytes()).hexdigest() == before
    assert oct(host["original"].stat().st_mode & 0o777) == "0o640"
    assert not (host["state"] / UNIT / "promoted.json").exists() and not host["lock"].exists()
    record = json.loads((host["state"] / UNIT / "watchdog-20261203T190000Z-ab12.json").read_text())
    assert record["undid_promotion"] and record["failures"] == [] and record["original"] == "active"


def test_a_snapshot_copy_that_does_not_match_is_never_put_back_and_the_lock_names_what_happened(host):
    promoted(host, copy_text="[Service]\nExecStart=/bin/false\n")  # the copy was changed after the manifest
    done = run_script(host, promotion=True)
    assert done.returncode == 1
    assert "Promoted by serving-rollout" in host["original"].read_text()  # nothing written over it
    assert (host["state"] / UNIT / "promoted.json").exists() and host["lock"].exists()  # rollback.yml's to finish
    record = json.loads((host["state"] / UNIT / "watchdog-20261203T190000Z-ab12.json").read_text())
    assert record["failures"][0].startswith(f"put the previous original's files back: {host['original']}: its "
                                            "snapshot copy ") and "does not match the manifest; not put back" in \
        record["failures"][0]
