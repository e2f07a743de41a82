#!/usr/bin/python
"""Ansible module: wait, on the host, until a serving engine answers its health endpoint."""

DOCUMENTATION = r"""
---
module: engine_ready
short_description: Wait for a serving engine's health endpoint, within a deadline
description:
  - Polls C(base_url)/C(path) on the host until it answers HTTP 200 or C(timeout_s) passes,
    in one module call, so a wait that succeeds prints no failed retries.
  - With C(unit), stops early when the systemd unit enters C(failed) or stops (the engine died
    before it became ready), naming the unit's state.
  - Read-only; supports check mode (nothing is waited for).
options:
  base_url:
    description: Engine URL, e.g. http://127.0.0.1:30000.
    type: str
    required: true
  path:
    description: Health path (SGLang answers 503 on /health_generate while starting).
    type: str
    default: /health_generate
  timeout_s:
    description: Deadline in seconds.
    type: float
    required: true
  unit:
    description: The systemd unit running the engine, watched while waiting.
    type: str
author: serving-rollout
"""

EXAMPLES = r"""
- name: Wait for the candidate
  engine_ready:
    base_url: http://127.0.0.1:30000
    timeout_s: 1200
    unit: sglang-candidate.service
"""

RETURN = r"""
elapsed_s:
  description: Seconds waited.
  type: float
  returned: always
  sample: 41.5
polls:
  description: Health requests made.
  type: int
  returned: always
  sample: 83
status:
  description: The last HTTP status (200 when ready).
  type: int
  returned: always
  sample: 200
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.engine_client import wait_healthy


def main():
    module = AnsibleModule(
        argument_spec={
            "base_url": {"type": "str", "required": True},
            "path": {"type": "str", "default": "/health_generate"},
            "timeout_s": {"type": "float", "required": True},
            "unit": {"type": "str"},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["timeout_s"] <= 0:
        module.fail_json(msg=f"timeout_s must be positive, got {p['timeout_s']}")
    if module.check_mode:
        module.exit_json(changed=False, elapsed_s=0.0, polls=0, status=None)

    def unit_failed():
        if not p["unit"]:
            return None
        rc, out, _ = module.run_command(["systemctl", "show", "-p", "ActiveState,SubState", "--", p["unit"]])
        state = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        if state.get("ActiveState") in ("failed", "inactive"):
            return f"{p['unit']} is {state.get('ActiveState')}/{state.get('SubState')}"
        return None

    result = wait_healthy(p["base_url"], p["path"], p["timeout_s"], unit_failed=unit_failed)
    if not result["ok"]:
        module.fail_json(msg=result["error"], **{k: v for k, v in result.items() if k != "ok"})
    module.exit_json(changed=False, **{k: v for k, v in result.items() if k != "ok"})


if __name__ == "__main__":
    main()
