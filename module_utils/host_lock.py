"""The per-host rollout lock, pure of Ansible: read, written whole, taken over in one rename, judged stale, and
the three things a run asks of it (take, check it still holds it, release). library/rollout_lock.py is its thin
module; the watchdog follows the same lock and lease (watchdog.py)."""

import fcntl
import json
import os
import time

from .host_files import free_mib, free_space, proc_stat
from .unit_stop import GONE
from .watchdog import remove_lock, renew_lease


class Refused(Exception):
    """The lock was not taken, checked or released as asked: the message, and the result fields to return."""

    def __init__(self, msg, **fields):
        super().__init__(msg)
        self.msg, self.fields = msg, fields


UNREADABLE = "unreadable"


def read_json(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError, TypeError):
        return None


def read_lock(path):
    """The lock's content, None when there is no lock, or {UNREADABLE: size} for a lock that exists but
    is not a lock document (empty or partial)."""
    if not os.path.lexists(path):
        return None
    lock = read_json(path)
    if isinstance(lock, dict) and lock:
        return lock
    try:
        size = os.path.getsize(path)
    except OSError:
        size = None
    return {UNREADABLE: size}


def write_temp(tmp, lock):
    """The lock's content in a new temporary file (mode 0600, synced) that the caller links or renames into place."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(lock, handle)
        handle.flush()
        os.fsync(handle.fileno())


def write_whole(path, lock):
    """Write the lock whole or not at all: a temporary file beside it, then a hard link into place
    (which, like O_EXCL, fails when a lock exists). Returns None, or the error to name."""
    folder = os.path.dirname(path)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        write_temp(tmp, lock)
        os.link(tmp, path)
        return None
    except FileExistsError:
        return "exists"
    except OSError as exc:
        return f"cannot write the lock {path}: {exc.strerror} ({free_space(folder)})"
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def take_over(path, lock, lease_s, expect=None):
    """Replace another holder's lock with this one in one rename, its lease renewed first: a watchdog that
    follows the lock never sees it missing nor a new holder with a lapsed lease. Under an exclusive flock of the
    state folder, and only while the lock still holds the token `expect` (the one the controller judged), so of
    two rollbacks taking the same lock over at once one wins and the other is refused. None, 'taken', or the
    error to name."""
    tmp = f"{path}.{os.getpid()}.tmp"
    guard = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if expect is not None and (read_lock(path) or {}).get("token") != expect:
            return "taken"
        if lease_s:
            renew_lease(path, lease_s)
        write_temp(tmp, lock)
        os.replace(tmp, path)
        return None
    except OSError as exc:
        return f"cannot write the lock {path}: {exc.strerror} ({free_space(os.path.dirname(path))})"
    finally:
        os.close(guard)
        if os.path.lexists(tmp):
            os.unlink(tmp)


def boot_mark():
    """This boot of the host: the kernel's boot id and PID 1's start time (a container restart changes it)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            kernel = handle.read().strip()
    except OSError:
        return None
    init = proc_stat(1)
    return f"{kernel}/{init[1]}" if init else None


def run_phase(lock, state_file):
    """The phase the lock's own run last recorded on the host, or None (a 'restored' record carries no run id:
    it is an earlier run's, never the holder's)."""
    state = read_json(state_file) or {} if state_file else {}
    return state.get("phase") if state.get("run_id") and state.get("run_id") == lock.get("run_id") else None


def describe(lock, state_file):
    """Who holds the lock, since when, and where their run got to."""
    if UNREADABLE in lock:
        return (f"an unreadable lock ({lock[UNREADABLE]} bytes: empty or partial, left by a run that could not "
                "write it whole), whose holder cannot be known")
    phase = run_phase(lock, state_file)
    return (f"run {lock.get('run_id')} by {lock.get('holder') or 'unknown'} since {lock.get('since')}, "
            + (f"last recorded phase '{phase}'" if phase else
               "no phase recorded by that run (it had not begun to stop the original)"))


def stale_reason(current, holder_dead, state_file):
    """Why a lock left by another run may be taken over without steal, or None: the host rebooted under that run
    (nothing of it runs here any more), or its controller is gone and it recorded no phase (it never began to
    stop the original: only its render is left)."""
    if not current or UNREADABLE in current:
        return None
    if current.get("boot") and current.get("boot") != boot_mark():
        return "the host rebooted after it was taken, so nothing of that run runs here"
    if holder_dead and not run_phase(current, state_file):
        return "its controller process is gone and it never began to stop the original"
    return None


def lock_lost(lock_result):
    """Why the run must stop measuring when rollout_lock (state held) says it lost its lock, else None."""
    if lock_result.get("held"):
        return None
    lock = lock_result.get("lock") or {}
    return (f"the lock was taken over by {lock.get('holder', 'nobody (it was removed)')} "
            f"(run {lock.get('run_id', 'none')}); this run stops measuring")


def held(p, current, check_mode):
    """state=held: whether this token still holds the lock (its lease renewed when it does)."""
    mine = bool(current) and current.get("token") == p["token"]
    try:
        lease = renew_lease(p["path"], p["lease_s"]) if mine and p["lease_s"] and not check_mode else None
    except OSError as exc:
        raise Refused(f"cannot renew the lease {p['path']}.lease: {exc.strerror} "
                      f"({free_space(os.path.dirname(p['path']))})") from exc
    if p["must_hold"] and not mine:
        raise Refused(lock_lost({"held": False, "lock": current or {}}), held=False, lock=current or {})
    return {"changed": False, "held": mine, "lock": current or {}, "lease": lease}


def release(p, current, check_mode):
    """state=absent: the lock and its lease gone; another run's only with steal."""
    if current is None:
        return {"changed": False, "lock": {}}
    if current.get("token") != p["token"] and not p["steal"]:
        raise Refused(f"lock {p['path']} is held by another run ({describe(current, p['state_file'])}); "
                      "it was not released", lock=current)
    if not check_mode:
        remove_lock(p["path"])
    return {"changed": True, "lock": {}}


def new_lock(p):
    """The lock document this run writes."""
    return {"token": p["token"], "run_id": p["run_id"], "holder": p["holder"], "controller": p["controller"] or {},
            "boot": boot_mark(), "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "restoring": p["steal"]}  # a rollback's: another rollback never takes it while it lives


def check_stale_candidate(p, stale, candidate_state, check_mode):
    """A stale run's candidate that runs anyway was started by someone after the reboot: the stale lock
    goes (nothing of that run holds it) and the take-over is refused, so rollback.yml stops the candidate."""
    unit = p["candidate_unit"]
    if not stale or not unit:
        return
    state = candidate_state(unit)
    if state in ("", *GONE):
        return
    if not check_mode:
        remove_lock(p["path"])
    raise Refused(f"the host rebooted under run {stale.get('run_id', '?')}, but its candidate {unit} is "
                  f"{state}: run rollback.yml, which stops it and restores and proves the original", lock={})


def make_room(p):
    """The state folder exists and has the room a run needs, or Refused before anything is written."""
    folder = os.path.dirname(p["path"])
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise Refused(f"cannot make {folder}: {exc.strerror}") from exc
    free = free_mib(folder)
    if free < p["min_free_mib"]:
        raise Refused(f"cannot take the lock: the state folder {folder} has {free:.1f} MiB free, "
                      f"under the {p['min_free_mib']:g} MiB a run needs; nothing was written")


def write_mine(p, current, lock):
    """The lock written (over `current` in one rename when there is one) and read back as this run's."""
    problem = take_over(p["path"], lock, p["lease_s"], p["expect_token"]) if current else write_whole(p["path"], lock)
    if problem in ("exists", "taken"):
        holder = read_lock(p["path"]) or {}
        raise Refused(f"another rollout took {p['path']} first: {describe(holder, p['state_file'])}", lock=holder)
    if problem:  # unwritten: no lock was there and none could be written (a full state folder)
        raise Refused(problem, unwritten=not current, lock=current or {})
    back = read_json(p["path"]) or {}
    if back.get("token") != p["token"]:  # a run proceeds only on a lock it reads back as its own
        raise Refused(f"lock {p['path']} read back as another run's: {describe(back, p['state_file'])}", lock=back)


def take(p, current, candidate_state, check_mode):
    """state=present: the lock this run's - fresh, over a stale run's, or taken over with steal."""
    if current and current.get("token") == p["token"]:
        return {"changed": False, "lock": current}
    why = stale_reason(current, p["holder_dead"], p["state_file"])
    stale = current if why else None
    check_stale_candidate(p, stale, candidate_state, check_mode)
    if current and not p["steal"] and not stale:
        raise Refused(f"another rollout holds {p['path']}: {describe(current, p['state_file'])}. If that run "
                      "is still going, wait for it; if it was killed, run rollback.yml, which takes the lock "
                      "over, restores the original and proves it", lock=current)
    lock = new_lock(p)
    if check_mode:
        return {"changed": True, "lock": lock, "previous": current}
    make_room(p)
    write_mine(p, current, lock)
    result = {"changed": True, "lock": lock}
    if current:
        result["previous"] = current
    if stale:
        result["stale"], result["stale_reason"] = stale, why
    return result
