"""The host-side watchdog: a Python script a transient unit runs from the moment a run stops the original
until the original is proven serving again.

A promotion arms it too (`promotion` in its config): if the controller dies while the promoted unit replaces
the original, it puts the previous original's files back from the snapshot, as rollback.yml undoes a promotion
(restore_promotion): the host is left promoted or restored, never half.

It follows the LOCK, not one run: while the lock exists and its lease (the file beside it: content the
seconds it holds, mtime the renewal) is renewed, someone alive holds the duty for the host - the run, or a
rollback that took the lock over and renewed the lease at once (rollout_lock steal). When the lock or its
lease is gone, the holder put the original back and released the lock: the watchdog exits. When the lease
runs out, the holder is gone: the watchdog restores the original itself, as a restore does - the candidate
stopped within the tool's deadline, then SIGKILLed (unit_stop.stop, the same function engine_stop runs), the
original started as it is now (an operator's edit is never overwritten: the record names the files that
differ from the snapshot), the candidate unit and its copies removed (put_back.candidate_paths), the phase
'restored' recorded, the lock and lease released - each step tried even when an earlier one fails, and
every failure written to its record and its journal.

Every value reaches the script as JSON in its config file (config()), never as shell or Python source.
library/rollout_watchdog.py writes the script (script(): unit_stop's, put_back's and this file's source, in
that order) and its config, and starts it with the host's Python."""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

from .put_back import candidate_paths
from .unit_stop import stop

POLL_S = 2


def lease_path(lock_path):
    """The lease file beside a lock (rollout_lock renews it, the watchdog reads it)."""
    return f"{lock_path}.lease"


def renew_lease(path, seconds):
    """The lease the watchdog reads beside the lock `path`: its content the seconds it holds, its mtime the
    renewal. Written whole or not at all: a failed write (a full disk) leaves no temporary file and the previous
    lease as it was."""
    lease = lease_path(path)
    tmp = f"{lease}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        with open(tmp, "w") as handle:
            handle.write(f"{int(seconds)}\n")
        os.replace(tmp, lease)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return lease


class LeaseKeeper:
    """Renews the lease while a long step runs on the host (a chunk of requests against a stalled engine runs to
    every request's timeout), every `every_s`, for as long as the lock holds `token`: the watchdog never acts
    behind a living run. If the controller dies, the step still ends by its own timeouts, and the renewals with
    it. A renewal that fails (a full disk) is kept in `problem` and ends the renewals."""

    def __init__(self, lock_path, token, lease_s, every_s=None):
        self.lock_path, self.token, self.lease_s = lock_path, token, int(lease_s)
        self.every_s = every_s if every_s is not None else max(1.0, min(10.0, self.lease_s / 3))
        self.stop, self.problem, self.renewals = threading.Event(), None, 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def holds(self):
        try:
            with open(self.lock_path) as handle:
                return json.load(handle).get("token") == self.token
        except (OSError, ValueError, AttributeError):
            return False

    def run(self):
        while not self.stop.wait(self.every_s) and self.holds():
            try:
                renew_lease(self.lock_path, self.lease_s)
                self.renewals += 1
            except OSError as exc:
                self.problem = f"cannot renew the lease {lease_path(self.lock_path)}: {exc.strerror}"
                return

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *_):
        self.stop.set()
        self.thread.join()


def config(unit, candidate_unit, state_dir, run_id, lock_path, stop_timeout_s, snapshot_files, promotion=False):
    """The watchdog's settings (JSON beside the script): the files are the snapshot's paths and sha256 (and, for a
    promotion, where its verified copy is, its mode and owner: what it puts back)."""
    keep = ("path", "sha256", "copy", "mode", "uid", "gid") if promotion else ("path", "sha256")
    return {"unit": unit, "candidate_unit": candidate_unit, "state_dir": state_dir, "run_id": run_id,
            "lock_path": lock_path, "stop_timeout_s": float(stop_timeout_s), "promotion": bool(promotion),
            "files": [{k: f[k] for k in keep if k in f} for f in snapshot_files or []]}


def lease_left(lock_path, now):
    """Seconds left of the lease (negative: lapsed by that much), or None when the lock or its lease is gone
    (the holder released it: the original is back)."""
    lease = lease_path(lock_path)
    try:
        if not os.path.exists(lock_path):
            return None
        with open(lease) as handle:
            held = int(handle.read().strip() or 0)
        return held - (now - os.stat(lease).st_mtime)
    except (OSError, ValueError):
        return None if not os.path.exists(lease) else -1.0


def sha256_of(path):
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return "absent"


def edited(files):
    """The snapshot's files that differ now (an operator's edit during the run), by path."""
    return [f["path"] for f in files if sha256_of(f["path"]) != f["sha256"]]


def run_command(argv):
    done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"})
    return done.returncode, done.stdout, done.stderr


def write_json(path, document):
    tmp = f"{path}.watchdog.tmp"
    with open(tmp, "w") as handle:
        handle.write(json.dumps(document, indent=4, sort_keys=True) + "\n")
    os.replace(tmp, path)


def stepper(record, say):
    """step(name, fn): fn run, its problem (a returned text or an OSError) kept in the record and said; never
    raised, so every later step is still tried."""
    def step(name, fn):
        try:
            problem = fn()
        except OSError as exc:
            problem = str(exc)
        if problem:
            record["failures"].append(f"{name}: {problem}")
            say(f"FAILED {name}: {problem}")
    return step


def put_back_files(files):
    """The previous original's files from the snapshot's verified copies, each copy checked against the manifest
    before and the file after; None, or what failed."""
    problems = []
    for entry in files:
        if sha256_of(entry.get("copy", "")) != entry["sha256"]:
            problems.append(f"{entry['path']}: its snapshot copy {entry.get('copy')} does not match the manifest; "
                            "not put back")
            continue
        tmp = f"{entry['path']}.watchdog.tmp"
        shutil.copyfile(entry["copy"], tmp)
        os.chmod(tmp, int(str(entry.get("mode", "0644")), 8))
        os.chown(tmp, int(entry.get("uid", 0)), int(entry.get("gid", 0)))
        os.replace(tmp, entry["path"])
        if sha256_of(entry["path"]) != entry["sha256"]:
            problems.append(f"{entry['path']}: differs from the snapshot after it was put back")
    return "; ".join(problems) or None


def _record(cfg, **more):
    return {"run_id": cfg["run_id"], "restored_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "failures": [], **more}


def _stop_serving(cfg, run, say, record, key):
    """The unit that stands in the original's place stopped within the restore's deadline, then SIGKILLed."""
    stopped = stop(cfg["candidate_unit"], cfg["stop_timeout_s"], run)
    record[key] = stopped["how"]
    say(f"stop {cfg['candidate_unit']}: {stopped['how']}")
    if not stopped["stopped"]:
        record["failures"].append(f"stop {cfg['candidate_unit']}: {stopped['how']}")


def _systemctl(run, *argv):
    rc, out, err = run(["systemctl", *argv])
    return None if rc == 0 else f"rc {rc}: {(err or out).strip()}"


def _finish(cfg, run, step, record, tidy=None):
    """The original started (then `tidy`, a (name, step) the restore does once it serves), the phase restored
    recorded, and systemd's word on the original kept."""
    step(f"start {cfg['unit']}", lambda: _systemctl(run, "start", "--", cfg["unit"]))
    if tidy:
        step(*tidy)
    step("record the phase restored", lambda: write_json(
        os.path.join(cfg["state_dir"], cfg["unit"], "state.json"),
        {"unit": cfg["unit"], "candidate": cfg["candidate_unit"], "phase": "restored"}))
    record["original"] = run(["systemctl", "show", "-p", "ActiveState", "--value", "--", cfg["unit"]])[1].strip()
    return record


def restore_promotion(cfg, run, say):
    """Put the previous original back after a promotion whose controller died: the promoted unit stopped, the
    snapshot's files put back and checked, systemd reloaded, the promotion's record removed, the original started
    and the phase restored recorded - as rollback.yml undoes a promotion; every step tried, failures kept."""
    record = _record(cfg, undid_promotion=True)
    step = stepper(record, say)
    _stop_serving(cfg, run, say, record, "promoted_stop")
    step("put the previous original's files back", lambda: put_back_files(cfg["files"]))
    put_back_failed = bool(record["failures"])

    def forget_promotion():
        promoted = os.path.join(cfg["state_dir"], cfg["unit"], "promoted.json")
        if os.path.lexists(promoted):
            os.unlink(promoted)

    step("reload systemd", lambda: _systemctl(run, "daemon-reload"))
    if not put_back_failed:  # else the record stays: the host still runs the promotion, and rollback.yml says so
        step("remove the promotion record", forget_promotion)
    return _finish(cfg, run, step, record)


def restore(cfg, run, say):
    """Put the original back as a restore does; returns the record (every step tried, failures kept)."""
    if cfg.get("promotion"):
        return restore_promotion(cfg, run, say)
    record = _record(cfg)
    step = stepper(record, say)
    _stop_serving(cfg, run, say, record, "candidate_stop")
    record["edited"] = edited(cfg["files"])
    if record["edited"]:
        say(f"the original's files differ from the snapshot (edited during the run): {record['edited']}; "
            "starting it as it is now, never overwritten")

    def remove_candidate():
        units, copies = candidate_paths(cfg["candidate_unit"], cfg["unit"], cfg["state_dir"])
        for path in units + copies:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            elif os.path.lexists(path):
                os.unlink(path)
        problem = _systemctl(run, "daemon-reload")
        return problem and f"daemon-reload {problem}"

    return _finish(cfg, run, step, record, tidy=("remove the candidate unit", remove_candidate))


def remove_lock(lock_path):
    """The lock and its lease, gone (a lease without its lock means nothing)."""
    for path in (lock_path, lease_path(lock_path)):
        if os.path.lexists(path):
            os.unlink(path)


def watch(cfg, run=run_command, clock=time.time, sleep=time.sleep, say=print):
    """Wait while the lease is renewed; restore when it lapses. Returns the record, or None (released)."""
    while True:
        left = lease_left(cfg["lock_path"], clock())
        if left is None:
            return None
        if left < 0:
            break
        sleep(POLL_S)
    say(f"the lease of {cfg['lock_path']} lapsed {-left:.0f} s ago: its holder is gone; restoring {cfg['unit']}")
    record = restore(cfg, run, say)
    record["lease_lapsed_s"] = round(-left, 1)
    try:
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", str(cfg["run_id"]))[:80]  # a file name, whatever the id holds
        write_json(os.path.join(cfg["state_dir"], cfg["unit"], f"watchdog-{name}.json"), record)
    except OSError as exc:
        say(f"FAILED to write the watchdog's record: {exc}")
    if record["original"] == "active" and not (cfg.get("promotion") and record["failures"]):
        remove_lock(cfg["lock_path"])  # the duty ends once the original serves; else the lock names what happened
    say(f"{'restored' if not record['failures'] else 'NOT restored'}: {cfg['unit']} {record['original']}"
        f"{'; ' + '; '.join(record['failures']) if record['failures'] else ''}; prove it with rollback.yml")
    return record


def main(config_path):
    with open(config_path) as handle:
        cfg = json.load(handle)
    record = watch(cfg, say=lambda line: print(line, flush=True))
    sys.exit(1 if record and record["failures"] else 0)


def script(sources):
    """The watchdog's script from its modules' sources (unit_stop, put_back, this one, in that order): one file
    the host's Python runs, their relative imports dropped (each name is defined above its use)."""
    body = "\n".join(line for text in sources for line in text.splitlines() if not line.startswith("from ."))
    return f"{body}\n\nif __name__ == '__main__':\n    main(sys.argv[1])\n"
