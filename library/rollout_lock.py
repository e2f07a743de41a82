#!/usr/bin/python
"""Ansible module: a per-host lock so two rollout runs cannot interleave."""

DOCUMENTATION = r"""
---
module: rollout_lock
short_description: Take or release the per-host rollout lock
description:
  - The lock is a file created atomically (O_EXCL) holding the run id, the controller user
    and host, the playbook and the time it was taken.
  - A second run is refused with who holds the lock and since when.
  - C(steal) takes a lock held by another run (rollback.yml uses it to recover from an
    interrupted run) and returns the previous holder.
  - Releasing a lock held by another run is refused.
options:
  path:
    description: Lock file.
    type: path
    required: true
  run_id:
    description: This run's id.
    type: str
    required: true
  state:
    description: present takes the lock, absent releases it.
    type: str
    choices: [present, absent]
    default: present
  holder:
    description: Who is asking (user@controller, playbook).
    type: str
    default: ""
  steal:
    description: Take the lock even when another run holds it.
    type: bool
    default: false
author: serving-rollout
"""

EXAMPLES = r"""
- name: Take the lock
  rollout_lock:
    path: /var/lib/serving-rollout/sglang.service/lock
    run_id: "{{ run_id }}"
"""

RETURN = r"""
lock: {description: The lock's content after the call., type: dict, returned: always}
previous: {description: The holder replaced by steal, if any., type: dict, returned: when stolen}
"""

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule


def read_lock(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "run_id": {"type": "str", "required": True},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "holder": {"type": "str", "default": ""},
            "steal": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    current = read_lock(p["path"])
    if p["state"] == "absent":
        if current is None:
            module.exit_json(changed=False, lock={})
        if current.get("run_id") != p["run_id"] and not p["steal"]:
            module.fail_json(msg=f"lock {p['path']} is held by run {current.get('run_id')}, not {p['run_id']}",
                             lock=current)
        if not module.check_mode:
            os.remove(p["path"])
        module.exit_json(changed=True, lock={})
    if current and current.get("run_id") == p["run_id"]:
        module.exit_json(changed=False, lock=current)
    if current and not p["steal"]:
        module.fail_json(msg=f"another rollout holds {p['path']}: run {current.get('run_id')} by "
                             f"{current.get('holder') or 'unknown'} since {current.get('since')}", lock=current)
    lock = {"run_id": p["run_id"], "holder": p["holder"], "pid_on_host": os.getpid(),
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if module.check_mode:
        module.exit_json(changed=True, lock=lock, previous=current)
    os.makedirs(os.path.dirname(p["path"]), mode=0o700, exist_ok=True)
    if current:
        os.remove(p["path"])
    try:
        fd = os.open(p["path"], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        holder = read_lock(p["path"]) or {}
        module.fail_json(msg=f"another rollout took {p['path']} first: run {holder.get('run_id')} "
                             f"since {holder.get('since')}", lock=holder)
    with os.fdopen(fd, "w") as handle:
        json.dump(lock, handle)
    result = {"changed": True, "lock": lock}
    if current:
        result["previous"] = current
    module.exit_json(**result)


if __name__ == "__main__":
    main()
