#!/usr/bin/python
"""Ansible module: read one invocation of a unit from the journal, redacted, and judge it."""

DOCUMENTATION = r"""
---
module: journal_scan
short_description: Scan one invocation's journal for readiness, errors and NCCL transport
description:
  - Reads the journal of a unit's invocation (C(_SYSTEMD_INVOCATION_ID)), the current one
    by default, on the host.
  - Redacts secrets before anything is returned - the values of secret-named variables in
    the unit's EnvironmentFiles, and NAME=value / --api-key value patterns.
  - Returns whether the ready line appeared, error lines (by configurable patterns), the
    NCCL transport summary per rank pair (and whether P2P was in effect), whether custom
    all-reduce was enabled, and a redacted excerpt.
  - Read-only; supports check mode.
options:
  unit:
    description: The unit.
    type: str
    required: true
  invocation_id:
    description: The invocation to read; empty means the unit's current one.
    type: str
    default: ""
  error_patterns:
    description: Regular expressions of error lines.
    type: list
    elements: str
    default: ["NCCL WARN", "CUDA error", "\\bXid\\b", "Traceback"]
  ready_line:
    description: The engine's ready line.
    type: str
    default: The server is fired up and ready to roll!
  env_files:
    description: EnvironmentFiles whose secret-named values are redacted.
    type: list
    elements: path
    default: []
  excerpt_lines:
    description: Lines of the redacted excerpt (from the end).
    type: int
    default: 60
author: serving-rollout
"""

EXAMPLES = r"""
- name: Scan the candidate's start
  journal_scan:
    unit: sglang-candidate.service
    env_files: [/etc/sglang/sglang.env]
"""

RETURN = r"""
scan:
  description: invocation_id, lines, ready, errors, nccl, custom_all_reduce, excerpt.
  type: dict
  returned: always
"""

import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.env_files import redact_line as redact
from ansible.module_utils.env_files import secret_values
from ansible.module_utils.nccl_facts import p2p_in_effect, parse_log


def main():
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str", "required": True},
            "invocation_id": {"type": "str", "default": ""},
            "error_patterns": {"type": "list", "elements": "str",
                               "default": ["NCCL WARN", "CUDA error", "\\bXid\\b", "Traceback"]},
            "ready_line": {"type": "str", "default": "The server is fired up and ready to roll!"},
            "env_files": {"type": "list", "elements": "path", "default": []},
            "excerpt_lines": {"type": "int", "default": 60},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        patterns = [re.compile(x) for x in p["error_patterns"]]
    except re.error as exc:
        module.fail_json(msg=f"error_patterns holds a bad regular expression: {exc}")
    invocation = p["invocation_id"]
    if not invocation:
        rc, out, err = module.run_command(["systemctl", "show", "-p", "InvocationID", "--value", "--", p["unit"]])
        invocation = out.strip()
    if not invocation:
        module.exit_json(changed=False, scan={"invocation_id": None, "lines": 0, "ready": False, "errors": [],
                                              "nccl": None, "custom_all_reduce": None, "excerpt": [],
                                              "reason": f"{p['unit']} has no invocation"})
    rc, out, err = module.run_command(["journalctl", "--no-pager", "-o", "cat", f"_SYSTEMD_INVOCATION_ID={invocation}"])
    if rc != 0:
        module.fail_json(msg=f"journalctl failed for invocation {invocation}: {err.strip()}")
    secrets = secret_values(p["env_files"])
    lines = [redact(line, secrets) for line in out.splitlines()]
    text = "\n".join(lines)
    parsed = parse_log(text)
    custom = None
    if "Custom allreduce is disabled" in text:
        custom = "disabled"
    elif "Custom allreduce is enabled" in text:
        custom = "enabled"
    scan = {
        "invocation_id": invocation,
        "lines": len(lines),
        "ready": p["ready_line"] in text,
        "errors": [line for line in lines if any(x.search(line) for x in patterns)],
        "nccl": {"versions": parsed["versions"], "summary": parsed["summary"],
                 "p2p_in_effect": p2p_in_effect(parsed), "p2p_reasons": parsed["proof"]["reasons"],
                 "ranks": parsed["proof"]["ranks"], "nvls": parsed["nvls"],
                 "transports": sorted({t for pair in parsed["pairs"] for t in pair["transports"]})},
        "custom_all_reduce": custom,
        "excerpt": lines[-p["excerpt_lines"]:],
    }
    module.exit_json(changed=False, scan=scan)


if __name__ == "__main__":
    main()
