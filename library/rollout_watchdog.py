#!/usr/bin/python
"""Ansible module: start or stop a run's host-side watchdog."""

DOCUMENTATION = r"""
---
module: rollout_watchdog
short_description: Start or stop the host-side watchdog that restores the original when its lock's holder is gone
description:
  - C(state=started) writes the watchdog (module_utils/watchdog.py, with the unit_stop and put_back code it runs)
    to C(state_dir)/C(unit)/watchdog.py and its settings as JSON to watchdog.json beside it (mode 0700 and 0600,
    each whole or not at all), stops a watchdog an earlier holder left under C(watchdog_unit), and starts the script
    with this host's Python as that transient unit (systemd-run --collect). No value reaches a shell or source
    code, every one is in the JSON.
  - The watchdog follows the lock, not one run - a rollback that takes the lock over renews its lease, so the
    watchdog keeps the duty for it. It exits when the lock or its lease is gone (the holder released it), and
    when the lease runs out restores the original itself, as a restore does (the candidate stopped within
    C(stop_timeout_s), then SIGKILLed; the original started as it is now, never overwritten; the candidate unit
    removed; the phase restored recorded; the lock released once the original is active).
  - A folder where the script goes is refused before anything is written or started (the original is never
    stopped without a watchdog that can restore it).
  - C(state=stopped) stops the watchdog when it runs (the original serves again, or a holder stops the candidate
    itself).
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
    description: The id of the run or rollback that starts it (names the watchdog's record). Required with state=started.
    type: str
  lock_path:
    description: The rollout lock (its lease beside it). Required with state=started.
    type: path
  stop_timeout_s:
    description: The candidate's stop deadline before its processes are killed (the restore's own).
    type: float
    default: 180
  snapshot_files:
    description: The snapshot manifest's files (path, sha256); an original that differs is started as it is and named.
    type: list
    elements: dict
    default: []
  promotion:
    description:
      - "The watchdog covers a promotion (C(candidate_unit) is then the serving unit itself): when the lease runs
        out it stops the promoted unit, puts the previous original's files back from the snapshot's verified copies
        (C(snapshot_files) with copy, mode, uid and gid; each checked by sha256), reloads systemd, removes the
        promotion's record and starts the previous original. A copy that does not match is never put back: the
        record and the lock then stay, for rollback.yml."
    type: bool
    default: false
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
    lock_path: /var/lib/serving-rollout/sglang.service.lock
    stop_timeout_s: 180
    snapshot_files: "{{ _rollout_snapshot_manifest.files }}"

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
  sample: /var/lib/serving-rollout/sglang.service/watchdog.py
lease:
  description: The lease file the watchdog reads (state=started).
  type: str
  returned: when state is started
  sample: /var/lib/serving-rollout/sglang.service.lock.lease
was:
  description: The watchdog unit's ActiveState before the call.
  type: str
  returned: always
  sample: inactive
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host_commands import exit_with, runner
from ansible.module_utils.watchdog_start import started, stopped


def main():
    module = AnsibleModule(argument_spec={
        "state": {"type": "str", "choices": ["started", "stopped"], "default": "started"},
        "watchdog_unit": {"type": "str", "required": True},
        "unit": {"type": "str", "required": True},
        "candidate_unit": {"type": "str"},
        "state_dir": {"type": "path"},
        "run_id": {"type": "str"},
        "lock_path": {"type": "path"},
        "stop_timeout_s": {"type": "float", "default": 180},
        "snapshot_files": {"type": "list", "elements": "dict", "default": []},
        "promotion": {"type": "bool", "default": False}},
        required_if=[("state", "started", ["candidate_unit", "state_dir", "run_id", "lock_path"])],
        supports_check_mode=True)
    step = started if module.params["state"] == "started" else stopped
    exit_with(module, step, runner(module), module.params, module.check_mode)


if __name__ == "__main__":
    main()
