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
  - C(steal) takes a lock held by another run (rollback.yml recovers from an interrupted run)
    and returns the previous holder. C(state=held) reports whether this token still holds it
    (a run checks it before touching the host in a rescue path).
  - Releasing a lock held by another token is refused, unless C(steal).
  - Writes the lock file C(path) (present, steal) or removes it (absent); changed=true when it does.
    In check mode it reports what it would do and writes nothing.
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
previous:
  description: The holder replaced by steal, if any.
  type: dict
  returned: when stolen
"""

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule


def read_json(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError, TypeError):
        return None


def describe(lock, state_file):
    """Who holds the lock, since when, and where their run got to."""
    state = read_json(state_file) or {}
    phase = state.get("phase") if state.get("run_id") in (None, lock.get("run_id")) else None
    return (f"run {lock.get('run_id')} by {lock.get('holder') or 'unknown'} since {lock.get('since')}"
            + (f", last recorded phase '{phase}'" if phase else ""))


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
        },
        supports_check_mode=True,
    )
    p = module.params
    current = read_json(p["path"])
    mine = bool(current) and current.get("token") == p["token"]
    if p["state"] == "held":
        module.exit_json(changed=False, held=mine, lock=current or {})
    if p["state"] == "absent":
        if current is None:
            module.exit_json(changed=False, lock={})
        if not mine and not p["steal"]:
            module.fail_json(msg=f"lock {p['path']} is held by another run ({describe(current, p['state_file'])}); "
                                 "it was not released", lock=current)
        if not module.check_mode:
            os.remove(p["path"])
        module.exit_json(changed=True, lock={})
    if mine:
        module.exit_json(changed=False, lock=current)
    if current and not p["steal"]:
        module.fail_json(msg=f"another rollout holds {p['path']}: {describe(current, p['state_file'])}. If that run "
                             "is still going, wait for it; if it was killed, run rollback.yml, which takes the lock "
                             "over, restores the original and proves it", lock=current)
    lock = {"token": p["token"], "run_id": p["run_id"], "holder": p["holder"], "pid_on_host": os.getpid(),
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if module.check_mode:
        module.exit_json(changed=True, lock=lock, previous=current)
    os.makedirs(os.path.dirname(p["path"]), mode=0o700, exist_ok=True)
    if current:
        os.remove(p["path"])
    try:
        fd = os.open(p["path"], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        holder = read_json(p["path"]) or {}
        module.fail_json(msg=f"another rollout took {p['path']} first: {describe(holder, p['state_file'])}",
                         lock=holder)
    with os.fdopen(fd, "w") as handle:
        json.dump(lock, handle)
    back = read_json(p["path"]) or {}
    if back.get("token") != p["token"]:  # a run proceeds only on a lock it reads back as its own
        module.fail_json(msg=f"lock {p['path']} read back as another run's: {describe(back, p['state_file'])}",
                         lock=back)
    result = {"changed": True, "lock": lock}
    if current:
        result["previous"] = current
    module.exit_json(**result)


if __name__ == "__main__":
    main()
