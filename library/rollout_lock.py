#!/usr/bin/python
"""Ansible module: a per-host lock so two rollout runs cannot interleave."""

DOCUMENTATION = r"""
---
module: rollout_lock
short_description: Take, check or release the per-host rollout lock
description:
  - The lock is a file created atomically (O_EXCL) holding a token unique to one run (random,
    made by the controller), the run id, the controller user, host and pid, the playbook and the
    time it was taken. Ownership is the token, never the run id, so two runs started in the same
    second, or with the same run id, cannot share it.
  - After writing, the lock is read back; the run proceeds only if it holds its own token.
  - A second run is refused with the holder, since when, the phase the holder's run last
    recorded on the host, and what to do when that run is no longer running (rollback.yml).
  - C(steal) takes a lock held by another run (rollback.yml recovers from an interrupted run, or stops a live
    run's measuring) and returns the previous holder; a lock taken with steal is marked C(restoring), and the
    action refuses to take a living restoring holder's lock (two rollbacks never act at once). C(state=held) reports whether this token still holds it
    (a run checks it before touching the host in a rescue path).
  - Releasing a lock held by another token is refused, unless C(steal).
  - Every lock records the host's boot (the kernel's boot id and PID 1's start time, so a container's own
    restart counts too). A lock taken before the current boot is stale - the host rebooted under its run,
    so nothing of that run still runs there (the candidate is never enabled, the watchdog was transient) -
    and is taken over, returned as C(stale) for the caller to clean what the run left. When that run's
    C(candidate_unit) runs anyway (someone started it after the reboot), the stale lock is removed and the
    take-over refused, naming the candidate's state (rollback.yml stops it and restores the original).
  - The lock is written whole or not at all (a temporary file in the same folder, linked into place), so it is
    never empty or partial; a lock that cannot be read (an older tool's partial write) is named as such and
    C(steal) takes it over. A full disk is named with the path and its free space, and leaves nothing behind.
  - With C(state=held) and C(lease_s), a held lock's lease is renewed - C(path).lease, its content the seconds
    it holds, its mtime the renewal - which the host-side watchdog reads (no renewal in time, and the host
    restores the original itself).
  - Writes the lock file C(path) (present, steal) or removes it (absent), and writes the lease file on renewal;
    changed=true when it takes or releases the lock. In check mode it reports what it would do and writes nothing.
options:
  path:
    description: Lock file.
    type: path
    required: true
  token:
    description: This run's unique lock token.
    type: str
    required: true
  run_id:
    description: This run's id (recorded, not used for ownership).
    type: str
    default: ""
  state:
    description: present takes the lock, held checks it, absent releases it.
    type: str
    choices: [present, held, absent]
    default: present
  holder:
    description: Who is asking (user@controller pid, playbook).
    type: str
    default: ""
  steal:
    description: Take or release the lock even when another run holds it.
    type: bool
    default: false
  state_file:
    description: The rollout state file whose phase a refusal names.
    type: path
  controller:
    description: >-
      The controller process that holds the lock (host, pid of ansible-playbook, its start time), recorded so
      that a refused run and rollback.yml can tell whether the holder is still alive.
    type: dict
  lease_s:
    description: >-
      With state=held, renew the lease for this many seconds when the lock is held. Taking a lock over
      (steal, stale), the lease is renewed for this many seconds before the lock changes hands, so the host's
      watchdog keeps its duty for the new holder.
    type: int
  candidate_unit:
    description: Taking over a stale lock, the candidate unit whose running refuses the take-over.
    type: str
  must_hold:
    description: With state=held, fail - naming who took the lock over - unless this token still holds it.
    type: bool
    default: false
  holder_dead:
    description: >-
      The controller found the holder's ansible-playbook process gone (action_plugins/rollout_lock.py sets it after
      a refusal). A dead holder whose run recorded no phase on the host never began to stop the original (an
      interrupt before any change): its lock is taken over like a stale one, returned as C(stale) for the caller
      to remove the rendered candidate unit.
    type: bool
    default: false
  expect_token:
    description: >-
      Taking a lock over, the token the controller saw in it (action_plugins/rollout_lock.py sets it); a lock that
      holds another by then was taken by someone else first, and the take-over is refused naming them.
    type: str
  min_free_mib:
    description: >-
      Taking the lock, the free space the state folder must have (the snapshot, the state and decision records);
      less is refused before anything is written, naming the folder and its free space.
    type: float
    default: 0
author: serving-rollout
"""

EXAMPLES = r"""
- name: Take the lock
  rollout_lock:
    path: /var/lib/serving-rollout/sglang.service.lock
    token: "{{ rollout_lock_token }}"
    run_id: "{{ run_id }}"
"""

RETURN = r"""
lock:
  description: The lock's content after the call (empty when released).
  type: dict
  returned: always
  sample: {token: 4f1c..., run_id: 20261130T093248Z, holder: root@ctl pid 4242 candidate, since: "2026-11-30T09:32:48Z"}
held:
  description: Whether this token holds the lock (state=held).
  type: bool
  returned: when state is held
stale:
  description: >-
    The lock taken over because the host rebooted after it was taken, or its holder is dead and never began to
    stop the original (its content), else absent.
  type: dict
  returned: when a stale lock was taken over
unwritten:
  description: >-
    On a failure: no lock was there and none could be written (a full state folder): nobody holds the host, so
    a rollback with nothing to put back may still prove it.
  type: bool
  returned: when the lock could not be written
stale_reason:
  description: Why the stale lock was taken over.
  type: str
  returned: when a stale lock was taken over
  sample: the host rebooted after it was taken, so nothing of that run runs here
lease:
  description: The lease file renewed (state=held with lease_s, when held), else null.
  type: str
  returned: when state is held
previous:
  description: The holder replaced by steal, if any.
  type: dict
  returned: when stolen
"""

import fcntl
import json
import os
import time

from ansible.module_utils.arm import lock_lost
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host_files import free_mib, free_space, proc_stat
from ansible.module_utils.unit_stop import GONE, active_state
from ansible.module_utils.watchdog import lease_path, renew_lease

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


def remove_lock(path):
    """The lock and its lease, gone (a lease without its lock means nothing)."""
    for found in (path, lease_path(path)):
        if os.path.lexists(found):
            os.remove(found)


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


def refuse_running_candidate(module, stale):
    """A stale run's candidate that runs anyway was started by someone after the reboot: the stale lock
    goes (nothing of that run holds it) and the take-over is refused, so rollback.yml stops the candidate."""
    unit = module.params["candidate_unit"]
    if not unit:
        return
    state = active_state(module.run_command, unit)
    if state in ("", *GONE):
        return
    if not module.check_mode:
        remove_lock(module.params["path"])
    module.fail_json(msg=f"the host rebooted under run {stale.get('run_id', '?')}, but its candidate {unit} is "
                         f"{state}: run rollback.yml, which stops it and restores and proves the original",
                     lock={})


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "token": {"type": "str", "required": True, "no_log": False},
            "run_id": {"type": "str", "default": ""},
            "state": {"type": "str", "choices": ["present", "held", "absent"], "default": "present"},
            "holder": {"type": "str", "default": ""},
            "steal": {"type": "bool", "default": False},
            "state_file": {"type": "path"},
            "controller": {"type": "dict"},
            "lease_s": {"type": "int"},
            "must_hold": {"type": "bool", "default": False},
            "candidate_unit": {"type": "str"},
            "min_free_mib": {"type": "float", "default": 0},
            "holder_dead": {"type": "bool", "default": False},
            "expect_token": {"type": "str", "no_log": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    current = read_lock(p["path"])
    mine = bool(current) and current.get("token") == p["token"]
    if p["state"] == "held":
        try:
            lease = renew_lease(p["path"], p["lease_s"]) if mine and p["lease_s"] and not module.check_mode else None
        except OSError as exc:
            folder = os.path.dirname(p["path"])
            module.fail_json(msg=f"cannot renew the lease {p['path']}.lease: {exc.strerror} ({free_space(folder)})")
        if p["must_hold"] and not mine:
            module.fail_json(msg=lock_lost({"held": False, "lock": current or {}}), held=False, lock=current or {})
        module.exit_json(changed=False, held=mine, lock=current or {}, lease=lease)
    if p["state"] == "absent":
        if current is None:
            module.exit_json(changed=False, lock={})
        if not mine and not p["steal"]:
            module.fail_json(msg=f"lock {p['path']} is held by another run ({describe(current, p['state_file'])}); "
                                 "it was not released", lock=current)
        if not module.check_mode:
            remove_lock(p["path"])
        module.exit_json(changed=True, lock={})
    if mine:
        module.exit_json(changed=False, lock=current)
    why = stale_reason(current, p["holder_dead"], p["state_file"])
    stale = current if why else None
    if stale:
        refuse_running_candidate(module, stale)
    if current and not p["steal"] and not stale:
        module.fail_json(msg=f"another rollout holds {p['path']}: {describe(current, p['state_file'])}. If that run "
                             "is still going, wait for it; if it was killed, run rollback.yml, which takes the lock "
                             "over, restores the original and proves it", lock=current)
    lock = {"token": p["token"], "run_id": p["run_id"], "holder": p["holder"], "controller": p["controller"] or {},
            "boot": boot_mark(), "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "restoring": p["steal"]}  # a rollback's: another rollback never takes it while it lives
    if module.check_mode:
        module.exit_json(changed=True, lock=lock, previous=current)
    folder = os.path.dirname(p["path"])
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    except OSError as exc:
        module.fail_json(msg=f"cannot make {folder}: {exc.strerror}")
    if free_mib(folder) < p["min_free_mib"]:
        module.fail_json(msg=f"cannot take the lock: the state folder {folder} has {free_mib(folder):.1f} MiB free, "
                             f"under the {p['min_free_mib']:g} MiB a run needs; nothing was written")
    problem = take_over(p["path"], lock, p["lease_s"], p["expect_token"]) if current else write_whole(p["path"], lock)
    if problem in ("exists", "taken"):
        holder = read_lock(p["path"]) or {}
        module.fail_json(msg=f"another rollout took {p['path']} first: {describe(holder, p['state_file'])}",
                         lock=holder)
    if problem:  # unwritten: no lock was there and none could be written (a full state folder)
        module.fail_json(msg=problem, unwritten=not current, lock=current or {})
    back = read_json(p["path"]) or {}
    if back.get("token") != p["token"]:  # a run proceeds only on a lock it reads back as its own
        module.fail_json(msg=f"lock {p['path']} read back as another run's: {describe(back, p['state_file'])}",
                         lock=back)
    result = {"changed": True, "lock": lock}
    if current:
        result["previous"] = current
    if stale:
        result["stale"], result["stale_reason"] = stale, why
    module.exit_json(**result)


if __name__ == "__main__":
    main()
