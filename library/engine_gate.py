#!/usr/bin/python
"""Ansible module: run one correctness gate against a serving engine, from the host."""

DOCUMENTATION = r"""
---
module: engine_gate
short_description: Run a gate (smoke, json) against an OpenAI-compatible engine
description:
  - Runs on the serving host so the engine's API key, read there from the unit's
    EnvironmentFiles, never travels to the controller.
  - Returns a record (gate, inputs, observed, expected, verdict, duration, reason). A failed
    gate is a record with verdict fail, not a module failure, unless C(fail_on_fail).
  - Unreachable engine, non-JSON body, truncated stream and time-outs are a failed gate
    with the reason.
options:
  base_url:
    description: Engine URL, e.g. http://127.0.0.1:30000.
    type: str
    required: true
  gate:
    description: Which gate.
    type: str
    choices: [smoke, json]
    required: true
  model:
    description: Model id sent in requests.
    type: str
    default: default
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
record: {description: The gate record., type: dict, returned: always}
"""

import json
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.engine_client import chat
from ansible.module_utils.unit_recipe import parse_env_file

JSON_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
               "required": ["city", "country"]}


def api_key(module):
    name = module.params["api_key_var"]
    if not name:
        return None
    for path in module.params["env_files"]:
        try:
            with open(path) as handle:
                value = parse_env_file(handle.read()).get(name)
        except OSError as exc:
            module.fail_json(msg=f"cannot read EnvironmentFile {path} for {name}: {exc.strerror}")
        if value:
            module.no_log_values.add(value)
            return value
    module.fail_json(msg=f"{name} is not set in {module.params['env_files']}")


def smoke(params, key):
    body = {"model": params["model"], "messages": [{"role": "user", "content": "Say hello."}],
            "max_tokens": 8, "temperature": 0}
    result = chat(params["base_url"], body, api_key=key, timeout=params["timeout_s"])
    ok = result["ok"] and bool((result["content"] or "").strip())
    reason = result["error"] or (None if ok else "empty completion")
    return body, {"content": result["content"], "usage": result["usage"], "status": result["status"]}, \
        "a non-empty completion", ok, reason


def json_gate(params, key):
    body = {"model": params["model"], "max_tokens": 64, "temperature": 0,
            "messages": [{"role": "user", "content": "Return the city and country of the Eiffel Tower as JSON. "
                                                     "city: Paris country: France"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "place", "schema": JSON_SCHEMA}}}
    result = chat(params["base_url"], body, api_key=key, timeout=params["timeout_s"])
    observed = {"content": result["content"], "status": result["status"]}
    if not result["ok"]:
        return body, observed, "a JSON object with city and country", False, result["error"]
    try:
        value = json.loads(result["content"] or "")
    except ValueError:
        return body, observed, "a JSON object with city and country", False, "response is not JSON"
    missing = [k for k in JSON_SCHEMA["required"] if not isinstance(value, dict) or not isinstance(value.get(k), str)]
    reason = f"missing or non-string keys: {missing}" if missing else None
    return body, observed, "a JSON object with city and country", not missing, reason


GATES = {"smoke": smoke, "json": json_gate}


def main():
    module = AnsibleModule(
        argument_spec={
            "base_url": {"type": "str", "required": True},
            "gate": {"type": "str", "required": True, "choices": sorted(GATES)},
            "model": {"type": "str", "default": "default"},
            "api_key_var": {"type": "str"},
            "env_files": {"type": "list", "elements": "path", "default": []},
            "timeout_s": {"type": "float", "default": 60},
            "phase": {"type": "str", "default": ""},
            "fail_on_fail": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    key = api_key(module)
    started = time.monotonic()
    inputs, observed, expected, ok, reason = GATES[p["gate"]](p, key)
    record = {"gate": p["gate"], "phase": p["phase"], "engine": p["base_url"], "inputs": inputs,
              "observed": observed, "expected": expected, "verdict": "pass" if ok else "fail",
              "reason": reason, "duration_s": round(time.monotonic() - started, 4)}
    if not ok and p["fail_on_fail"]:
        module.fail_json(msg=f"gate {p['gate']} failed ({p['phase']}): {reason}", record=record)
    module.exit_json(changed=False, record=record)


if __name__ == "__main__":
    main()
