#!/usr/bin/python
"""Ansible module: run one correctness gate against a serving engine, from the host."""

DOCUMENTATION = r"""
---
module: engine_gate
short_description: Run a correctness gate against an OpenAI-compatible engine
description:
  - Runs on the serving host so the engine's API key, read there from the unit's
    EnvironmentFiles, never travels to the controller.
  - Returns a record (gate, inputs, observed, expected, verdict, duration, reason). A failed
    gate is a record with verdict fail, not a module failure, unless C(fail_on_fail).
  - Unreachable engine, non-JSON body, truncated stream and time-outs are a failed gate
    with the reason.
  - Read-only - it sends requests to the engine and changes nothing on the host (check mode too).
options:
  gate:
    description: Which gate (this or C(runs)).
    type: str
    choices: [contract, json, needle, server_info, smoke, tool_call, version]
  runs:
    description: >-
      Several gates in one module run, in order, each with this module's other options (a candidate's gates, then
      the routed ones through the router's URL); every one runs even after one fails. Returned as C(records).
    type: list
    elements: dict
    suboptions:
      gate:
        description: Which gate.
        type: str
        choices: [contract, json, needle, server_info, smoke, tool_call, version]
        required: true
      base_url:
        description: This gate's engine URL (a router's), else C(base_url).
        type: str
      phase:
        description: This gate's phase, else C(phase).
        type: str
  target_tokens:
    description: Prompt size for needle and tool_call (words; the engine's usage gives the real count).
    type: int
    default: 4000
  depth:
    description: Needle depth, 0 (start) to 1 (end).
    type: float
    default: 0.5
  contract_words:
    description: Exact word count of the strict output contract.
    type: int
    default: 32
  contract_pattern:
    description: Regular expression every contract word must match.
    type: str
    default: "^[A-Z]+[0-9]+$"
  timeout_s:
    description: Time limit of one request.
    type: float
    default: 60
  phase:
    description: Recorded with the verdict (baseline, candidate, restored).
    type: str
    default: ""
  fail_on_fail:
    description: Fail the task when the gate fails.
    type: bool
    default: false
extends_documentation_fragment: [engine_connection, engine_request]
author: serving-rollout
"""

EXAMPLES = r"""
- name: Smoke
  engine_gate:
    base_url: http://127.0.0.1:30000
    gate: smoke
    api_key_var: SGLANG_API_KEY
    env_files: [/etc/sglang/sglang.env]
"""

RETURN = r"""
record:
  description: The gate record (with C(gate); else null).
  type: dict
  sample: {gate: smoke, phase: candidate, verdict: pass, observed: hello, duration_s: 0.03}
  returned: always
records:
  description: The records of C(runs), in order (else null).
  type: list
  elements: dict
  sample: [{gate: smoke, phase: candidate, verdict: pass}, {gate: smoke, phase: candidate-routed, verdict: pass}]
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.engine_client import ENGINE_ARGS, connect_module
from ansible.module_utils.env_files import module_api_key
from ansible.module_utils.gates import GATES, run_gate


def main():
    module = AnsibleModule(
        argument_spec={
            **ENGINE_ARGS,
            "gate": {"type": "str", "choices": sorted(GATES)},
            "runs": {"type": "list", "elements": "dict", "options": {
                "gate": {"type": "str", "required": True, "choices": sorted(GATES)},
                "base_url": {"type": "str"}, "phase": {"type": "str"}}},
            "target_tokens": {"type": "int", "default": 4000},
            "depth": {"type": "float", "default": 0.5},
            "contract_words": {"type": "int", "default": 32},
            "contract_pattern": {"type": "str", "default": "^[A-Z]+[0-9]+$"},
            "timeout_s": {"type": "float", "default": 60},
            "phase": {"type": "str", "default": ""},
            "fail_on_fail": {"type": "bool", "default": False},
        },
        required_one_of=[("gate", "runs")],
        mutually_exclusive=[("gate", "runs")],
        supports_check_mode=True,
    )
    connect_module(module)
    p = module.params
    if not 0.0 <= p["depth"] <= 1.0:
        module.fail_json(msg=f"depth must be within 0..1, got {p['depth']}")
    if p["target_tokens"] < 16 or p["contract_words"] < 1:
        module.fail_json(msg=f"target_tokens must be >= 16 and contract_words >= 1, got "
                             f"{p['target_tokens']} and {p['contract_words']}")
    options = {**p, "api_key": module_api_key(module)}
    runs = p["runs"] or [{"gate": p["gate"]}]
    records = [run_gate(run["gate"], {**options, "base_url": run.get("base_url") or p["base_url"]},
                        phase=run.get("phase") or p["phase"]) for run in runs]
    returned = {"record": None, "records": records} if p["runs"] else {"record": records[0], "records": None}
    failed = next((record for record in records if record["verdict"] != "pass"), None)
    if failed and p["fail_on_fail"]:
        module.fail_json(msg=f"gate {failed['gate']} failed ({failed['phase']}): {failed['reason']}", **returned)
    module.exit_json(changed=False, **returned)


if __name__ == "__main__":
    main()
