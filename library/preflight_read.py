#!/usr/bin/python
"""Documentation of the preflight_read action (action_plugins/preflight_read.py runs it on the controller)."""

DOCUMENTATION = r"""
---
module: preflight_read
short_description: Read what the preflight checks judge, in one step
description:
  - Runs on the controller (an action plugin) and runs each read on the host as its own module, in order; the
    first that fails ends it with its step and message.
  - Reads the unit's state (systemd_service), the engine's health route (uri), the engine's own arguments
    (engine_gate server_info), NVML (nvml_info), the unit's current invocation's journal (journal_scan), the
    processes on the GPUs (gpu_free) and, for a docker or podman unit, its container's id.
  - Read-only - it changes nothing on the host (check mode too).
options:
  unit: {description: The serving unit., type: str, required: true}
  base_url: {description: "The engine's URL (here or in C(connection)).", type: str, required: true}
  engine: {description: The engine (its adapter reads the journal)., type: str, required: true}
  api_key_var: {description: The variable holding the API key in the EnvironmentFiles., type: str}
  env_files: {description: "The unit's EnvironmentFiles (the API key read there).", type: list, elements: path, default: []}
  extra_error_patterns: {description: "The operator's own fatal journal patterns.", type: list, elements: str, default: []}
  gpu_process_pattern: {description: "The pattern of GPU worker processes (gpu_free; empty - NVML's list).", type: str, default: ""}
  recipe: {description: "The unit's adopted recipe (serving_recipe): its runtime and container name.", type: dict, default: {}}
  phase: {description: Recorded with the engine's arguments., type: str, default: preflight}
extends_documentation_fragment: [engine_connection]
author: serving-rollout
"""

EXAMPLES = r"""
- name: Read the unit, the engine, NVML, the journal and the GPUs' processes
  preflight_read:
    unit: sglang.service
    base_url: http://127.0.0.1:30000
    engine: sglang
    gpu_process_pattern: "sglang|vllm"
  register: serving_preflight_read
"""

RETURN = r"""
status:
  description: "The unit's systemd properties (systemd_service's status), read first."
  type: dict
  returned: always
  sample: {ActiveState: active, InvocationID: 5f1c0d6e2b8a4f0e9c7d3a1b2c4e6f80, MainPID: "4242"}
facts:
  description: "What preflight_checks judges - unit, health_status, server_info, recipe, nvml, journal (journal_scan's scan), gpu_processes, container_id."
  type: dict
  returned: success
  contains:
    health_status: {description: "The health route's HTTP status (-1 - no answer).", type: int, sample: 200}
    journal: {description: "journal_scan's scan of the current invocation.", type: dict}
    container_id: {description: "The unit's container id, '' for a process unit.", type: str, sample: ""}
"""

if __name__ == "__main__":
    raise SystemExit("preflight_read runs on the controller as an action plugin (action_plugins/preflight_read.py)")
