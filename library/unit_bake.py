#!/usr/bin/python
"""Ansible module: watch a promoted serving unit over a window (a fleet promotion's bake); read-only."""

DOCUMENTATION = r"""
---
module: unit_bake
short_description: Watch a promoted serving unit over a window and judge it
description:
  - The bake after a fleet promotion's batch (module_utils/bake.py). For C(window_s) seconds, every C(interval_s),
    reads systemd's ActiveState, NRestarts and InvocationID of C(unit) and sends the engine one smoke completion;
    at the end reads the watched invocation's journal through the engine's adapter.
  - The bake fails when the unit left active, restarted or began another invocation, when the smoke failed twice in
    a row, or when the journal shows a crash; it ends at the first such reason.
  - Changes nothing on the host (the smoke is one small request to the engine). Under check mode it takes one
    sample and reads the journal, without waiting out the window.
extends_documentation_fragment: [engine_connection, engine_request]
options:
  unit: {description: The promoted serving unit., type: str, required: true}
  engine:
    description: The engine whose adapter reads the journal.
    type: str
    required: true
    choices: [sglang, vllm, unknown]
  window_s: {description: How long the bake watches., type: float, required: true}
  interval_s: {description: Seconds between samples., type: float, default: 10}
  timeout_s: {description: The smoke completion's time-out., type: float, default: 60}
  scrape_metrics:
    description: Read the engine's /metrics at the window's start and end (the bake's metric comparison when no
      Prometheus is named); else only the two moments are kept, for the controller to ask Prometheus.
    type: bool
    default: false
author: serving-rollout
"""

EXAMPLES = r"""
- name: Bake the promoted unit for ten minutes
  unit_bake:
    unit: sglang.service
    engine: sglang
    connection: "{{ _rollout_connection }}"
    window_s: 600
    interval_s: 15
"""

RETURN = r"""
bake:
  description: "verdict (pass or fail), reasons, start (systemd's reading when it began), samples (each reading with
    its smoke's verdict), journal (crashed, crash, cause, errors, excerpt; values from EnvironmentFiles redacted),
    window (start and end, epoch seconds), metrics (the engine's series at both ends, with scrape_metrics)."
  type: dict
  sample: {verdict: pass, reasons: [], start: {ActiveState: active, NRestarts: "0"}, samples: []}
  returned: success
"""

from ansible.module_utils.bake import watch
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.engine_client import ENGINE_ARGS, connect_module
from ansible.module_utils.engine_metrics import bake_reading
from ansible.module_utils.env_files import module_api_key
from ansible.module_utils.gates import run_gate
from ansible.module_utils.host_commands import exit_with, runner


def main():
    module = AnsibleModule(argument_spec={
        **ENGINE_ARGS, "unit": {"type": "str", "required": True},
        "engine": {"type": "str", "required": True, "choices": ["sglang", "vllm", "unknown"]},
        "window_s": {"type": "float", "required": True}, "interval_s": {"type": "float", "default": 10},
        "timeout_s": {"type": "float", "default": 60}, "scrape_metrics": {"type": "bool", "default": False}},
        supports_check_mode=True)
    connect_module(module)
    p = module.params
    if p["window_s"] <= 0 or p["interval_s"] <= 0:
        module.fail_json(msg=f"window_s and interval_s must be above 0, got {p['window_s']} and {p['interval_s']}")
    options = {**p, "api_key": module_api_key(module)}
    if module.check_mode:  # a dry run reads the unit once rather than watching it for the whole window
        p = {**p, "window_s": 0.0}
    metrics = (lambda: bake_reading(p["engine"], options["base_url"], options["api_key"])) \
        if p["scrape_metrics"] else None
    exit_with(module, lambda: {"changed": False, "bake": watch(runner(module), lambda: run_gate("smoke", options),
                                                                p, metrics=metrics)})


if __name__ == "__main__":
    main()
