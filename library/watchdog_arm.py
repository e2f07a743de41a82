#!/usr/bin/python
"""Documentation of the watchdog_arm action (action_plugins/watchdog_arm.py runs it on the controller)."""

DOCUMENTATION = r"""
---
module: watchdog_arm
short_description: Arm the host-side watchdog and record the phase stopping-original
description:
  - Runs on the controller (an action plugin) and runs each step on the host as its own module, in order; the
    first that fails ends it with its step and message, before the original is stopped.
  - Renews the lease the watchdog reads (rollout_lock held, C(lease_s), which must cover the stop, the wait for
    free GPUs, the candidate's start and one lease more); a lock another run took over ends it.
  - Writes and starts the watchdog (rollout_watchdog) - from here on, if this controller dies, the watchdog
    restores the original itself when the lease runs out.
  - Records the phase stopping-original (rollout_phase) and returns it as the fact C(rollout_progress), which
    bin/serving-rollout and the interrupted callback read.
  - Changes the host - the lease, the watchdog's unit and the phase record; under check mode each step runs in
    check mode and changes nothing.
options:
  watchdog_unit: {description: "The watchdog's transient unit.", type: str, required: true}
  unit: {description: The serving unit the watchdog restores., type: str, required: true}
  candidate_unit: {description: The candidate unit the watchdog stops., type: str, required: true}
  state_dir: {description: "The tool's state folder on the host (the unit's folder under it must exist).", type: path, required: true}
  run_id: {description: "This run's id.", type: str, required: true}
  lock_path: {description: "The host's rollout lock (its lease beside it).", type: path, required: true}
  lock_token: {description: "This run's lock token (never shown).", type: str, required: true}
  lease_s: {description: The first lease in seconds., type: int, required: true}
  stop_timeout_s: {description: "The candidate's stop deadline before its processes are killed (the watchdog's restore).", type: float, required: true}
  snapshot_files: {description: "The snapshot manifest's files (the watchdog checks them before it starts the original).", type: list, elements: dict, required: true}
author: serving-rollout
"""

EXAMPLES = r"""
- name: Arm the watchdog, then record the phase stopping-original
  watchdog_arm:
    watchdog_unit: serving-rollout-watchdog-sglang.service
    unit: sglang.service
    candidate_unit: sglang-candidate.service
    state_dir: /var/lib/serving-rollout
    run_id: 20261205T120000Z
    lock_path: /var/lib/serving-rollout/sglang.service.lock
    lock_token: "{{ _rollout_lock_token }}"
    lease_s: 900
    stop_timeout_s: 180
    snapshot_files: "{{ _rollout_snapshot_manifest.files }}"
"""

RETURN = r"""
ansible_facts:
  description: "rollout_progress - kind phase, the phase stopping-original and the run id."
  type: dict
  returned: success
  sample: {rollout_progress: {kind: phase, phase: stopping-original, run_id: 20261205T120000Z}}
"""

if __name__ == "__main__":
    raise SystemExit("watchdog_arm runs on the controller as an action plugin (action_plugins/watchdog_arm.py)")
