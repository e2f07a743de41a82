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

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host_commands import runner
from ansible.module_utils.systemd_reading import ReadingError, busctl, probe
from ansible.module_utils.unit_oracle import (
    EXEC_PROPERTIES,
    differences,
    digested_values,
    equal_proof,
    one_control_proof,
    parse_show,
    proof_reason,
    reading,
)
from ansible.module_utils.unit_recipe import CHANGES, redact_argv


def read_unit(module, unit, key):
    run = runner(module)
    try:
        exec_lines = {prop: busctl(run, unit, "Service", prop) for prop in EXEC_PROPERTIES}
        environment = busctl(run, unit, "Service", "Environment")
        environment_files = busctl(run, unit, "Service", "EnvironmentFiles")
    except ReadingError as exc:
        module.fail_json(msg=str(exc))
    rc, out, err = run(["systemctl", "show", "--all", "--", unit])
    if rc != 0:
        module.fail_json(msg=f"systemctl show {unit} failed: {err.strip()}")
    settings = parse_show(out)
    if settings.get("LoadState") not in ("loaded",):
        module.fail_json(msg=f"{unit} is {settings.get('LoadState')} for systemd (LoadError "
                             f"{settings.get('LoadError', '')!r}): it cannot be proven")
    start = exec_lines["ExecStart"][0][1] if exec_lines["ExecStart"] else []
    env, argv = {}, []
    if not module.check_mode:
        try:
            env, argv = probe(run, module.params["python"], environment, environment_files, start[1:])
        except ReadingError as exc:
            module.fail_json(msg=str(exc))
    return reading(exec_lines, environment, environment_files, settings, digested_values(env, key), argv)


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
    p = module.params
    if p["change"].get("kind") not in (*CHANGES, "none"):
        module.fail_json(msg=f"change.kind must be {', '.join(CHANGES)} or none, got {p['change'].get('kind')!r}")
    key = os.urandom(32)  # digests comparable within this call only
    original = read_unit(module, p["original"], key)
    candidate = read_unit(module, p["candidate"], key)
    diffs = differences(original, candidate, shown=redact_argv)
    same = p["change"]["kind"] == "none"
    proof = equal_proof(diffs, p["launcher_word"]) if same else one_control_proof(diffs, p["change"],
                                                                                  p["container"] or None)
    # Only the allow-listed views leave the host: raw argv words can hold secrets.
    public = [{k: d[k] for k in ("what", "before", "after")} for d in diffs]
    proof["unexplained"] = [{k: d[k] for k in ("what", "before", "after")} for d in proof["unexplained"]]
    proof["warnings"] = [{k: d[k] for k in ("what", "before", "after")} for d in proof.get("warnings") or []]
    for warning in proof["warnings"]:  # outside what the engine runs: named, never a second control
        module.warn(f"{p['candidate']} also differs in {warning['what']}: {warning['before']!r} -> "
                    f"{warning['after']!r} (not what the engine runs or with what: not refused)")
    if module.check_mode:
        module.exit_json(changed=False, proof={"ok": None, "control": None, "unexplained": [], "seen": None},
                         differences=public)
    if not proof["ok"] and same:
        module.fail_json(msg=f"{p['candidate']} is not the same as {p['original']} in systemd's own reading: "
                             + "; ".join(f"{d['what']}: {d['before']!r} -> {d['after']!r}" for d in proof["unexplained"]),
                         proof=proof, differences=public)
    if not proof["ok"]:
        module.fail_json(msg=f"{p['candidate']} is not {p['original']} with one control changed in systemd's own "
                             f"reading ({proof['control']}): {proof_reason(proof, 'systemd')}", proof=proof,
                         differences=public)
    module.exit_json(changed=False, proof=proof, differences=public)


if __name__ == "__main__":
    main()
