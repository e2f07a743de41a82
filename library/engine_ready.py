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
  stall_s:
    description: >-
      With C(unit), the boot watchdog - the engine's journal (this invocation) is its progress: a new line keeps
      the wait alive, none for this many seconds with the process alive is a hang (0 - off; the time-out only).
    type: float
    default: 0
  env_files:
    description: The unit's EnvironmentFiles, whose secret values are redacted from the log line shown.
    type: list
    elements: path
    default: []
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
stage:
  description: ready, or how the start failed - crash (the unit exited), hang (no progress for stall_s), slow (still
    logging at the time-out), timeout (no log to judge by).
  type: str
  returned: always
  sample: ready
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.engine_client import wait_healthy
from ansible.module_utils.env_files import redact_line, secret_values


def main():
    module = AnsibleModule(
        argument_spec={
            "base_url": {"type": "str", "required": True},
            "path": {"type": "str", "default": "/health_generate"},
            "timeout_s": {"type": "float", "required": True},
            "unit": {"type": "str"},
            "stall_s": {"type": "float", "default": 0},
            "env_files": {"type": "list", "elements": "path", "default": []},
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

    secrets = secret_values(p["env_files"])
    invocation = {}

    def progress():
        """(journal cursor, last line) of the unit's current invocation: the start-up's progress."""
        if not invocation.get("id"):
            _, out, _ = module.run_command(["systemctl", "show", "-p", "InvocationID", "--value", "--", p["unit"]])
            invocation["id"] = out.strip()
        if not invocation["id"]:
            return None, None
        _, out, _ = module.run_command(["journalctl", f"_SYSTEMD_INVOCATION_ID={invocation['id']}", "-o", "cat",
                                        "-n", "1", "--show-cursor", "--no-pager"])
        lines = [line for line in out.splitlines() if line.strip()]
        cursor = next((line for line in lines if line.startswith("-- cursor:")), None)
        text = next((line for line in reversed(lines) if not line.startswith("-- ")), None)
        return cursor, redact_line(text, secrets)[:200] if text else None

    watch = p["unit"] and p["stall_s"] > 0
    result = wait_healthy(p["base_url"], p["path"], p["timeout_s"], unit_failed=unit_failed,
                          progress=progress if watch else None, stall_s=p["stall_s"])
    if not result["ok"]:
        module.fail_json(msg=result["error"], **{k: v for k, v in result.items() if k != "ok"})
    module.exit_json(changed=False, **{k: v for k, v in result.items() if k != "ok"})


if __name__ == "__main__":
    main()
