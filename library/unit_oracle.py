#!/usr/bin/python
"""Ansible module: systemd's own reading of an original and its candidate, and the one-control proof."""

DOCUMENTATION = r"""
---
module: unit_oracle
short_description: Prove, in systemd's own reading, that a candidate unit differs from its original in one control
description:
  - Reads both units as systemd loaded them (after daemon-reload) - every Exec line's argv as systemd
    split it (D-Bus through busctl), Environment, EnvironmentFiles with their '-' flags, every other
    setting (C(systemctl show --all)) - and what the engine would get - the environment and the
    ExecStart argv after systemd's C($VAR)/C(${VAR}) expansion, from a transient probe that systemd
    itself starts with the unit's Environment and EnvironmentFiles (C(systemd-run --wait --pipe),
    running only a Python one-liner that prints its argv and environment).
  - Fails, naming every other difference, unless the two readings differ in exactly the one control
    (C(change)) and the candidate's expected identity (its container's name, its own copy of an
    EnvironmentFile, whose content is compared as the environment).
  - Values of secret-named variables are never returned - only a digest keyed per call, so the two
    readings can be compared and nothing can be looked up; argv is shown by the allow-list.
  - Changes nothing on the host but the transient probe units, which exit at once and are collected;
    supports check mode (the probe does not run and the proof is not made).
options:
  original:
    description: The original unit.
    type: str
    required: true
  candidate:
    description: The candidate unit (written and daemon-reloaded, not started).
    type: str
    required: true
  change:
    description: >-
      The one control, as the candidate plan selected it (kind env, arg, speculative, image or program; name; value).
      Kind none proves the two units the same instead (adopt -> managed: a recipe's render against the
      original), up to the order of the engine's flags after C(launcher_word).
    type: dict
    required: true
  launcher_word:
    description: With change kind none, the last word of the engine's launcher (its module or script path).
    type: str
    default: ""
  container:
    description: The original's container name, when it runs one (the candidate's is that name plus -candidate).
    type: str
    default: ""
  python:
    description: The interpreter the probe runs.
    type: path
    default: /usr/bin/python3
author: serving-rollout
"""

EXAMPLES = r"""
- name: Prove the candidate differs from the original in exactly one control, as systemd reads both
  unit_oracle:
    original: sglang.service
    candidate: sglang-candidate.service
    change: {kind: env, name: NCCL_P2P_DISABLE, value: "0"}
"""

RETURN = r"""
proof:
  description: >-
    ok, control, seen (the control's difference was found), unexplained (every other difference in what the engine
    runs and with what - Exec argv, environment, user, directories, limits - which refuses the candidate), warnings
    (differences in any other setting, a restart policy or a timeout - shown, not refused).
  type: dict
  sample: {ok: true, control: env NCCL_P2P_DISABLE, unexplained: [], warnings: []}
  returned: always
differences:
  description: Every difference between the two readings (what, before, after; values redacted).
  type: list
  sample: [{what: environment NCCL_P2P_DISABLE, before: '1', after: '0'}]
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host_commands import exit_with, runner
from ansible.module_utils.unit_oracle import prove_units


def main():
    module = AnsibleModule(
        argument_spec={
            "original": {"type": "str", "required": True},
            "candidate": {"type": "str", "required": True},
            "change": {"type": "dict", "required": True},
            "container": {"type": "str", "default": ""},
            "python": {"type": "path", "default": "/usr/bin/python3"},
            "launcher_word": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    exit_with(module, prove_units, runner(module), module.params, module.check_mode, module.warn)


if __name__ == "__main__":
    main()
