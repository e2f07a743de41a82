#!/usr/bin/python
"""Documentation of the candidate_start action (action_plugins/candidate_start.py runs it on the controller)."""

DOCUMENTATION = r"""
---
module: candidate_start
short_description: Start the candidate and keep its identity as it became ready
description:
  - Runs on the controller (an action plugin) and runs each step on the host as its own module, in order; the
    first that fails ends it with its step and message.
  - Starts C(candidate_unit) (systemd_service) and waits for its health endpoint (engine_ready, with its boot
    watchdog - a crash signature or a log stalled for C(boot_stall_s) ends the wait early).
  - Renews the lease the host-side watchdog reads (rollout_lock held, C(lease_s)); a lock another run took
    over ends it.
  - Reads the ready engine's MainPID, InvocationID and NRestarts (only those - Environment can hold secrets).
  - With C(original_container) (the original's container_reading), proves the candidate's container
    C(container)-candidate differs from it in C(change) alone, as the runtime runs both (container_reading).
  - Changes the host - it starts the candidate and renews the lease; under check mode each step runs in check
    mode and changes nothing.
options:
  candidate_unit: {description: The candidate's unit., type: str, required: true}
  base_url: {description: The engine's URL., type: str, required: true}
  ready_timeout_s: {description: The deadline for the health endpoint., type: float, required: true}
  engine: {description: The engine (its adapter reads logs and health)., type: str, required: true}
  boot_stall_s: {description: How long a start may show no progress in its log (engine_ready)., type: float, required: true}
  env_files: {description: "The unit's EnvironmentFiles (the port read there).", type: list, elements: path, default: []}
  lock_path: {description: The host's rollout lock., type: path, required: true}
  lock_token: {description: "This run's lock token (also the container reading's key; never shown).", type: str, required: true}
  lease_s: {description: The lease given once the candidate is ready., type: int, required: true}
  unit: {description: "The original unit (names the phase record) - with C(next_phase).", type: str}
  api_key_var: {description: The variable holding the API key in the EnvironmentFiles (the version read)., type: str}
  read_version: {description: "Read the ready engine's own version report (engine_gate version; an engine upgrade).", type: bool, default: false}
  gate_timeout_s: {description: The version read's deadline in seconds., type: float, default: 60}
  next_phase: {description: "The phase recorded once the candidate is ready (rollout_phase), returned as the fact rollout_progress.", type: str}
  state_dir: {description: "The tool's state folder on the host - with C(next_phase).", type: path}
  run_id: {description: "This run's id - with C(next_phase).", type: str}
  scan:
    description: >-
      journal_scan's options for the candidate's start-up log (known_noise, extra_error_patterns, change, proof);
      with it a crash, an error line new against the original or a control the engine does not show fails the action.
    type: dict
  label: {description: "The candidate's id, named when its control shows no effect.", type: str}
  runtime: {description: "The runtime (docker, podman) - with C(original_container).", type: str}
  container: {description: "The original's container name; the candidate's is this with -candidate.", type: str}
  original_container: {description: The original container's reading (original_stop's container)., type: dict}
  change: {description: "The one control the candidate changes (the catalog's change).", type: dict}
extends_documentation_fragment: [engine_connection]
author: serving-rollout
"""

EXAMPLES = r"""
- name: Start the candidate
  candidate_start:
    candidate_unit: sglang-candidate.service
    base_url: http://127.0.0.1:30000
    ready_timeout_s: 1200
    engine: sglang
    boot_stall_s: 300
    lock_path: /var/lib/serving-rollout/sglang.service.lock
    lock_token: "{{ _rollout_lock_token }}"
    lease_s: 300
  register: __rollout_candidate_started
"""

RETURN = r"""
identity:
  description: The ready engine's MainPID, InvocationID and NRestarts ({} when it ended before).
  type: dict
  sample: {MainPID: '4242', InvocationID: 5f1c0d6e2b8a4f0e9c7d3a1b2c4e6f80, NRestarts: '0'}
  returned: always
container_compared:
  description: Whether the candidate's container was proven to differ from the original's in the one control.
  type: bool
  sample: false
  returned: always
scan:
  description: "With scan - the candidate's start-up log as journal_scan read it (crash, errors, proof, capacity...), else null."
  type: dict
  sample: {crashed: false, errors: [], proof: {proven: true, kind: nccl_p2p}}
  returned: always
version:
  description: "With read_version - the candidate engine's version record (engine_gate's record), else null."
  type: dict
  sample: {gate: version, verdict: pass, observed: {version: 0.32.0}}
  returned: always
ansible_facts:
  description: "With next_phase - rollout_progress (kind phase, the phase, the run id)."
  type: dict
  returned: with next_phase
  sample: {rollout_progress: {kind: phase, phase: candidate-running, run_id: 20261205T120000Z}}
"""

if __name__ == "__main__":
    raise SystemExit("candidate_start runs on the controller as an action plugin (action_plugins/candidate_start.py)")
