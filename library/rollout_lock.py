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
    token: "{{ _rollout_lock_token }}"
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
  sample: true
  returned: when state is held
stale:
  description: >-
    The lock taken over because the host rebooted after it was taken, or its holder is dead and never began to
    stop the original (its content), else absent.
  type: dict
  sample: {run_id: 20261205T110000Z, holder: ops@ctl pid 4242}
  returned: when a stale lock was taken over
unwritten:
  description: >-
    On a failure: no lock was there and none could be written (a full state folder): nobody holds the host, so
    a rollback with nothing to put back may still prove it.
  type: bool
  sample: false
  returned: when the lock could not be written
stale_reason:
  description: Why the stale lock was taken over.
  type: str
  returned: when a stale lock was taken over
  sample: the host rebooted after it was taken, so nothing of that run runs here
lease:
  description: The lease file renewed (state=held with lease_s, when held), else null.
  type: str
  sample: /var/lib/serving-rollout/sglang.service.lock.lease
  returned: when state is held
previous:
  description: The holder replaced by steal, if any.
  type: dict
  sample: {run_id: 20261205T110000Z, holder: ops@ctl pid 4242}
  returned: when stolen
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host_commands import runner
from ansible.module_utils.host_lock import Refused, held, read_lock, release, take
from ansible.module_utils.unit_stop import active_state

STEPS = {"held": held, "absent": release}


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
    try:
        if p["state"] in STEPS:
            result = STEPS[p["state"]](p, current, module.check_mode)
        else:
            result = take(p, current, lambda unit: active_state(runner(module), unit), module.check_mode)
    except Refused as refused:
        module.fail_json(msg=refused.msg, **refused.fields)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
