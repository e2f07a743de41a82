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
  base_url:
    description: Engine URL, e.g. http://127.0.0.1:30000 (required, here or in C(connection)).
    type: str
  gate:
    description: Which gate.
    type: str
    choices: [contract, json, needle, server_info, smoke, tool_call, version]
    required: true
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
  model:
    description: Model id sent in requests (C(default) when neither it nor C(connection) names one).
    type: str
  api_key_var:
    description: Name of the variable holding the API key in C(env_files).
    type: str
  env_files:
    description: EnvironmentFiles to read C(api_key_var) from.
    type: list
    elements: path
    default: []
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
extends_documentation_fragment: [engine_connection]
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
  description: The gate record.
  type: dict
  sample: {gate: smoke, phase: candidate, verdict: pass, observed: hello, duration_s: 0.03}
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.engine_client import CONNECTION_SPEC, connect_module
from ansible.module_utils.env_files import module_api_key
from ansible.module_utils.gates import GATES, run_gate


def main():
    module = AnsibleModule(
        argument_spec={
            "base_url": {"type": "str"},
            "connection": CONNECTION_SPEC,
            "gate": {"type": "str", "required": True, "choices": sorted(GATES)},
            "target_tokens": {"type": "int", "default": 4000},
            "depth": {"type": "float", "default": 0.5},
            "contract_words": {"type": "int", "default": 32},
            "contract_pattern": {"type": "str", "default": "^[A-Z]+[0-9]+$"},
            "model": {"type": "str"},
            "api_key_var": {"type": "str"},
            "env_files": {"type": "list", "elements": "path", "default": []},
            "timeout_s": {"type": "float", "default": 60},
            "phase": {"type": "str", "default": ""},
            "fail_on_fail": {"type": "bool", "default": False},
        },
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
    record = run_gate(p["gate"], options, phase=p["phase"])
    if record["verdict"] != "pass" and p["fail_on_fail"]:
        module.fail_json(msg=f"gate {p['gate']} failed ({p['phase']}): {record['reason']}", record=record)
    module.exit_json(changed=False, record=record)


if __name__ == "__main__":
    main()
