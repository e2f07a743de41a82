#!/usr/bin/python
"""Documentation of the original_restore action (action_plugins/original_restore.py runs it on the controller)."""

DOCUMENTATION = r"""
---
module: original_restore
short_description: Put the original unit back from whatever state a run left the host in
description:
  - Runs on the controller (an action plugin) and runs each step on the host as its own module, in order; the
    first that fails ends the put-back with its step and message, and what was done until then is returned.
  - Reads both units (systemd_service). When a candidate is loaded or still running (a candidate whose unit file
    was deleted while it ran is not-found but active), or the original is not active or restarted on its own,
    renews the lease for the whole restore (rollout_lock; C(stop_timeout_s), C(gpu_free_timeout_s),
    C(straggler_grace_s) and C(ready_timeout_s) beyond C(lease_s)) and (re)starts the host-side watchdog for
    this holder (rollout_watchdog), so a controller that dies mid-restore leaves the duty to the watchdog; then
    records the phase C(restoring) (rollout_phase). Otherwise the steps below change nothing.
  - A lease, watchdog or phase record that cannot be written (a full disk) is said and never stops the restore (a
    'restored' that cannot be written removes the state file rather than leave an earlier phase in it);
    without a renewed lease the watchdog is stopped, so it never acts beside this restore.
  - An original that restarted on its own (NRestarts not 0) is stopped (engine_stop) and its failure state reset
    (C(systemctl reset-failed)), so it starts clean and NRestarts counts from the restore.
  - Stops the candidate within C(stop_timeout_s) (engine_stop; SIGKILL of its processes when it ignores SIGTERM)
    and removes a container C(container)-candidate that outlived its unit (C(runtime) rm -f; none is not an error).
  - Unless the original serves on them, waits until no worker holds the GPUs (gpu_free), ending only the stopped
    engines' own stragglers.
  - Checks the original's files against the snapshot (serving_snapshot); nothing is ever overwritten. An original
    edited during the run (an operator's edit) follows the tool's rule, the operator's edit wins - it is started as
    it is (after a daemon-reload), so a unit that serves is back and the candidate goes - and the action then fails
    with both versions, naming renew.yml (adopt the edit) or undoing it and rollback.yml (the snapshot).
  - Starts the original (systemd_service) and waits for its health endpoint (engine_ready).
  - Removes the candidate unit, its drop-ins and copies (candidate_remove), records the phase C(restored) and
    stops the watchdog (the original serves again).
  - Changes the host - it stops and starts units, ends processes, removes the candidate's files and writes the
    phase; under check mode each step runs in check mode and nothing is stopped, started or written.
  - The proof that the original is back is restored_proof's, not this action's.
options:
  unit: {description: The original serving unit., type: str, required: true}
  candidate_unit: {description: The candidate's unit., type: str, required: true}
  watchdog_unit: {description: The host-side watchdog's unit., type: str, required: true}
  state_dir: {description: "The tool's state folder on the host (snapshot, phase, lock).", type: path, required: true}
  run_id: {description: The run the phases are recorded for., type: str, required: true}
  lock_path: {description: The rollout lock this restore holds (its lease beside it)., type: path, required: true}
  lock_token: {description: This holder's lock token., type: str, required: true}
  lease_s: {description: "The run's lease; the restore renews it for its own worst case (the stop, free GPUs, the start) beyond it.", type: int, required: true}
  stop_timeout_s: {description: The deadline of each stop in seconds., type: float, required: true}
  runtime: {description: "The original's runtime (process, docker, podman).", type: str, default: process}
  container: {description: The original's container name (empty - none)., type: str, default: ""}
  gpu_process_pattern: {description: "The pattern of GPU worker processes (gpu_free; empty - NVML's list).", type: str, default: ""}
  gpu_free_timeout_s: {description: How long to wait for the GPUs to come free., type: float, required: true}
  engine_process_pattern: {description: "The pattern of the engine's own processes, the only ones ended (gpu_free).", type: str, default: ""}
  engine: {description: The engine (its adapter reads logs and health)., type: str, required: true}
  straggler_grace_s: {description: SIGTERM's grace before SIGKILL of a straggler., type: float, required: true}
  snapshot_files: {description: "The snapshot manifest's files (path, sha256, copy, mode, owner).", type: list, elements: dict, required: true}
  base_url: {description: The engine's URL., type: str, required: true}
  ready_timeout_s: {description: The deadline for the original's health endpoint., type: float, required: true}
  boot_stall_s: {description: How long a start may show no progress in its log (engine_ready)., type: float, required: true}
  env_files: {description: "The unit's EnvironmentFiles (the port and key read there).", type: list, elements: path, default: []}
extends_documentation_fragment: [engine_connection]
author: serving-rollout
"""

EXAMPLES = r"""
- name: Put the original back
  original_restore:
    unit: sglang.service
    candidate_unit: sglang-candidate.service
    watchdog_unit: serving-rollout-watchdog-sglang.service
    state_dir: /var/lib/serving-rollout
    run_id: "{{ run_id }}"
    lock_path: /var/lib/serving-rollout/sglang.service.lock
    lock_token: "{{ _rollout_lock_token }}"
    lease_s: 1500
    stop_timeout_s: 120
    gpu_process_pattern: "sglang|vllm"
    gpu_free_timeout_s: 120
    engine_process_pattern: "sglang"
    engine: sglang
    straggler_grace_s: 10
    snapshot_files: "{{ _rollout_snapshot_manifest.files }}"
    base_url: http://127.0.0.1:30000
    ready_timeout_s: 900
    boot_stall_s: 300
  register: __rollout_put_back
"""

RETURN = r"""
candidate_present:
  description: Whether a candidate was loaded or running when the restore began.
  type: bool
  sample: true
  returned: always
candidate_stop:
  description: The candidate's stop (stopped, escalated, how), or null when none was left.
  type: dict
  sample: {stopped: true, escalated: false}
  returned: always
gpu:
  description: "The GPU wait (summary, terminated: the processes ended), or null when the original served on them."
  type: dict
  sample: {summary: GPUs free after 1.0 s, terminated: []}
  returned: always
manifest:
  description: The snapshot manifest the files were checked against, or null when the put-back ended before it.
  type: dict
  sample: {unit: sglang.service, files: [{path: /etc/systemd/system/sglang.service}]}
  returned: always
ansible_facts:
  description: rollout_progress - the last phase recorded (restoring or restored), for the CLI and the interrupted callback.
  type: dict
  sample: {rollout_progress: {kind: phase, phase: restored, run_id: 20261205T120000Z}}
  returned: when a phase was recorded
"""

if __name__ == "__main__":
    raise SystemExit("original_restore runs on the controller as an action plugin (action_plugins/original_restore.py)")
