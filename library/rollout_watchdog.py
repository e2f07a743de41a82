#!/usr/bin/python
"""Ansible module: start or stop a run's host-side watchdog."""

DOCUMENTATION = r"""
---
module: rollout_watchdog
short_description: Start or stop the host-side watchdog that restores the original when the controller is gone
description:
  - C(state=started) writes the watchdog's script (module_utils/watchdog.py) to C(state_dir)/C(unit)/watchdog.sh
    (mode 0700, whole or not at all), stops a watchdog an earlier run left under C(watchdog_unit), and starts the
    script as that transient unit (systemd-run --collect). The script waits while the lease beside C(lock_path)
    is renewed, exits when the lock is no longer C(token)'s, and restores the original itself when the lease runs out.
  - A folder where the script goes is refused before anything is written or started (the original is never
    stopped without a watchdog that can restore it).
  - C(state=stopped) stops the watchdog when it runs (a restore by the controller owns the host).
  - changed=true when it starts the watchdog, or stops one that ran. In check mode it reports what it would do
    and changes nothing.
options:
  state:
    description: started writes and starts the watchdog; stopped stops it.
    type: str
    choices: [started, stopped]
    default: started
  watchdog_unit:
    description: The watchdog's transient unit.
    type: str
    required: true
  unit:
    description: The serving unit the watchdog restores.
    type: str
    required: true
  candidate_unit:
    description: The candidate unit the watchdog stops. Required with state=started.
    type: str
  state_dir:
    description: The tool's state folder on the host (the unit's folder under it must exist). Required with state=started.
    type: path
  run_id:
    description: This run's id (named in the watchdog's record). Required with state=started.
    type: str
  token:
    description: This run's lock token; the watchdog exits once the lock holds another. Required with state=started.
    type: str
    no_log: true
  lock_path:
    description: The rollout lock (its lease beside it). Required with state=started.
    type: path
author: serving-rollout
"""

EXAMPLES = r"""
- name: Start the host-side watchdog
  rollout_watchdog:
    watchdog_unit: serving-rollout-watchdog-sglang.service
    unit: sglang.service
    candidate_unit: sglang-candidate.service
    state_dir: /var/lib/serving-rollout
    run_id: "{{ run_id }}"
    token: "{{ rollout_lock_token }}"
    lock_path: /var/lib/serving-rollout/sglang.service.lock

- name: Stop it (a restore owns the host now)
  rollout_watchdog:
    state: stopped
    watchdog_unit: serving-rollout-watchdog-sglang.service
    unit: sglang.service
"""

RETURN = r"""
script:
  description: The watchdog's script on the host (state=started).
  type: str
  returned: when state is started
lease:
  description: The lease file the watchdog reads (state=started).
  type: str
  returned: when state is started
was:
  description: The watchdog unit's ActiveState before the call.
  type: str
  returned: always
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host_files import write_atomic
from ansible.module_utils.unit_stop import active_state, stop_if_running
from ansible.module_utils.watchdog import lease_path, script


def run(module, argv):
    rc, out, err = module.run_command(argv)
    if rc != 0:
        module.fail_json(msg=f"{' '.join(argv[:3])} failed (rc {rc}): {(err or out).strip()}")


def stop(module, unit, result):
    """Stop the watchdog; one that ended on its own meanwhile (a lock taken over, a lapsed lease) is stopped as
    asked (unit_stop.stop_if_running)."""
    problem = stop_if_running(module.run_command, unit)
    if problem:
        module.fail_json(msg=problem, **result)


def main():
    module = AnsibleModule(argument_spec={
        "state": {"type": "str", "choices": ["started", "stopped"], "default": "started"},
        "watchdog_unit": {"type": "str", "required": True},
        "unit": {"type": "str", "required": True},
        "candidate_unit": {"type": "str"},
        "state_dir": {"type": "path"},
        "run_id": {"type": "str"},
        "token": {"type": "str", "no_log": True},
        "lock_path": {"type": "path"}},
        required_if=[("state", "started", ["candidate_unit", "state_dir", "run_id", "token", "lock_path"])],
        supports_check_mode=True)
    p = module.params
    was = active_state(module.run_command, p["watchdog_unit"]) or "inactive"
    result = {"was": was}
    if p["state"] == "stopped":
        running = was in ("active", "activating")
        if running and not module.check_mode:
            stop(module, p["watchdog_unit"], result)
        module.exit_json(changed=running, **result)
    path = os.path.join(p["state_dir"], p["unit"], "watchdog.sh")
    if os.path.isdir(path):
        module.fail_json(msg=f"the watchdog script goes to {path}, where a folder is (remove it); the original was "
                             "not stopped", **result)
    result["lease"] = lease_path(p["lock_path"])
    if module.check_mode:
        module.exit_json(changed=True, script=path, **result)
    try:
        write_atomic(path, script(p["unit"], p["candidate_unit"], p["state_dir"], p["run_id"], p["token"],
                                  p["lock_path"]), 0o700)
    except OSError as exc:
        module.fail_json(msg=f"cannot write the watchdog script {path}: {exc}", **result)
    if was in ("active", "activating", "failed"):  # an earlier run's, which is over
        stop(module, p["watchdog_unit"], result)
    run(module, ["systemd-run", f"--unit={p['watchdog_unit']}", "--collect", "--quiet",
                 f"--description=serving-rollout watchdog of {p['unit']} (run {p['run_id']})", "/bin/sh", path])
    module.exit_json(changed=True, script=path, **result)


if __name__ == "__main__":
    main()
