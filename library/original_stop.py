#!/usr/bin/python
"""Documentation of the original_stop action (action_plugins/original_stop.py runs it on the controller)."""

DOCUMENTATION = r"""
---
module: original_stop
short_description: Stop the original for the swap, keeping what only the running original can tell
description:
  - Runs on the controller (an action plugin) and runs each step on the host as its own module, in order; the
    first that fails ends it with its step and message, and what was read until then is returned.
  - With C(runtime) docker or podman and a C(container), reads the container as its runtime runs it
    (container_reading, values keyed with C(key), never shown) before it goes; the candidate's is compared
    with it after the candidate starts.
  - With C(read_version), reads the engine's own version report (engine_gate version, phase baseline); an engine
    upgrade is proven against it.
  - Stops C(unit) within C(stop_timeout_s) (engine_stop; SIGKILL of its processes when it ignores SIGTERM).
  - Waits until no worker holds the GPUs (gpu_free), ending only the stopped engines' own stragglers
    (C(engine_process_pattern) in C(unit) or C(candidate_unit)), never a foreign process.
  - Changes the host - it stops the unit and may end its processes; under check mode each step runs in check
    mode and changes nothing.
options:
  unit: {description: The original serving unit., type: str, required: true}
  candidate_unit: {description: "The candidate's unit (its stragglers count as the engine's own).", type: str, required: true}
  stop_timeout_s: {description: The stop's deadline in seconds., type: float, required: true}
  runtime: {description: "The original's runtime (process, docker, podman).", type: str, default: process}
  container: {description: The original's container name (empty - none)., type: str, default: ""}
  key: {description: "The run's key for the container reading's value digests (secret values are never returned).", type: str}
  read_version: {description: Read the engine's version report first (an engine upgrade)., type: bool, default: false}
  base_url: {description: The engine's URL (with C(read_version))., type: str}
  api_key_var: {description: The variable holding the API key in the EnvironmentFiles., type: str}
  env_files: {description: "The unit's EnvironmentFiles (the API key read there).", type: list, elements: path, default: []}
  gate_timeout_s: {description: The version read's deadline in seconds., type: float, default: 60}
  gpu_process_pattern: {description: "The pattern of GPU worker processes (gpu_free; empty - NVML's list).", type: str, default: ""}
  gpu_free_timeout_s: {description: How long to wait for the GPUs to come free., type: float, required: true}
  engine_process_pattern: {description: "The pattern of the engine's own processes, the only ones ended (gpu_free).", type: str, default: ""}
  engine: {description: The engine (its adapter reads logs and health)., type: str, required: true}
  straggler_grace_s: {description: SIGTERM's grace before SIGKILL of a straggler., type: float, required: true}
  next_phase: {description: "The phase recorded once the GPUs are free (rollout_phase), returned as the fact rollout_progress.", type: str}
  state_dir: {description: "The tool's state folder on the host - with C(next_phase).", type: path}
  run_id: {description: "This run's id - with C(next_phase).", type: str}
extends_documentation_fragment: [engine_connection]
author: serving-rollout
"""

EXAMPLES = r"""
- name: Stop the original for the swap
  original_stop:
    unit: sglang.service
    candidate_unit: sglang-candidate.service
    stop_timeout_s: 180
    runtime: docker
    container: sglang
    key: "{{ _rollout_lock_token }}"
    gpu_process_pattern: "sglang|vllm"
    gpu_free_timeout_s: 120
    engine_process_pattern: "sglang"
    engine: sglang
    straggler_grace_s: 10
  register: __rollout_original_stop
"""

RETURN = r"""
ansible_facts:
  description: "With next_phase - rollout_progress (kind phase, the phase, the run id)."
  type: dict
  returned: with next_phase
  sample: {rollout_progress: {kind: phase, phase: candidate-starting, run_id: 20261205T120000Z}}
container:
  description: The original container's reading (container_reading's reading), or null.
  type: dict
  sample: null
  returned: always
version:
  description: The original engine's version record (engine_gate's record), or null.
  type: dict
  sample: null
  returned: always
stop_attempted:
  description: Whether the stop was asked for (a restore then expects a new invocation of the original).
  type: bool
  sample: true
  returned: always
stop:
  description: The stop (stopped, escalated, how), or null when it ended before.
  type: dict
  sample: {stopped: true, escalated: false, how: systemctl stop}
  returned: always
gpu:
  description: "The GPU wait (summary, terminated: the processes ended), or null when it ended before."
  type: dict
  sample: {summary: GPUs free after 1.0 s, terminated: []}
  returned: always
"""

if __name__ == "__main__":
    raise SystemExit("original_stop runs on the controller as an action plugin (action_plugins/original_stop.py)")
