#!/usr/bin/python
"""Ansible module: read one invocation of a unit from the journal, redacted, and judge it."""

DOCUMENTATION = r"""
---
module: journal_scan
short_description: Read one invocation's journal with the engine's adapter - phase, crash and its cause, noise, NCCL
description:
  - Reads the journal of a unit's invocation (C(_SYSTEMD_INVOCATION_ID)), the current one
    by default, on the host, as journald stores it (C(journalctl -o json --all), so a message holding a
    progress bar's carriage returns or colours is never C([N blob data])), cut into lines and cleaned
    by one reader (module_utils/log_lines.py), and judges it with the engine's adapter
    (module_utils/engine_adapters.py, checked against a corpus of real logs).
  - Redacts secrets before anything is returned - the values of secret-named variables in
    the unit's EnvironmentFiles, and NAME=value / --api-key value patterns.
  - Returns the start-up phase reached, whether the ready line was logged (progress only -
    readiness is HTTP's), whether a crash signature appeared and the line that names its cause,
    error lines (fatal signatures, and warnings not seen in the original's own baseline),
    noise (warnings known harmless or seen in the baseline, an engine's clean-stop errors),
    the NCCL version (every format) and transport per rank pair (and whether P2P was in
    effect), the settings NCCL read from the environment, custom all-reduce state with its
    evidence, the KV-cache size, and a redacted excerpt.
  - Read-only; supports check mode.
options:
  unit:
    description: The unit.
    type: str
    required: true
  engine:
    description: >-
      The engine the unit runs (its adapter reads the log); C(unknown) reads only what every
      engine shares (Python, CUDA and NCCL signatures).
    type: str
    required: true
    choices: [sglang, vllm, unknown]
  invocation_id:
    description: The invocation to read; empty means the unit's current one.
    type: str
    default: ""
  known_noise:
    description: >-
      Signature keys of the healthy original's baseline invocation (a scan's C(signatures)):
      warnings seen there are shown as noise, not errors.
    type: list
    elements: str
    default: []
  stop_requested:
    description: The tool stopped this invocation, so the engine's clean-stop errors are noise.
    type: bool
    default: false
  extra_error_patterns:
    description: The operator's own regular expressions of fatal lines, beside the adapter's.
    type: list
    elements: str
    default: []
  env_files:
    description: EnvironmentFiles whose secret-named values are redacted.
    type: list
    elements: path
    default: []
  excerpt_lines:
    description: Lines of the redacted excerpt (from the end).
    type: int
    default: 60
  change:
    description: >-
      The candidate's one control change (serving_recipe's C(selected.change)); for an engine
      argument (C(kind=arg)) the scan adds C(arg_effect): whether the engine's own configuration
      dump (vLLM's C(non-default args), SGLang's C(server_args)) shows it at the value.
    type: dict
    default: {}
  proof:
    description: >-
      How the engine proves the change (serving_recipe's C(selected.proof), from the controls
      catalog, module_utils/controls.py); the scan then adds C(proof) ({kind, proven, expected,
      saw}: what the engine said instead when not proven).
    type: dict
    default: {}
  version_report:
    description: >-
      The candidate engine's version report (engine_gate C(gate=version)'s record), for a proof of kind
      C(engine_version) - an upgrade is proven by the version the new engine reports.
    type: dict
    default: {}
author: serving-rollout
"""

EXAMPLES = r"""
- name: Scan the candidate's start
  journal_scan:
    unit: sglang-candidate.service
    engine: sglang
    known_noise: "{{ baseline.scan.signatures }}"
    env_files: [/etc/sglang/sglang.env]
"""

RETURN = r"""
scan:
  description: >-
    invocation_id, lines, ready (the ready line was logged), phase, crashed, crash, crash_phase (the
    start-up phase the crash struck in), cause, cause_frame (the traceback frame that raised it), errors,
    warnings, noise, signatures, nccl, custom_all_reduce (enabled, disabled or unknown),
    custom_all_reduce_evidence, kv_cache_tokens, max_concurrency (the concurrency the engine states once its
    KV cache is sized), versions_logged (the releases its start-up lines name), accept_length (speculation's accept length as the engine logs it: {value, source,
    line, reports}, or null), ready_after_s (first line to the first ready line), excerpt;
    collectives ({backend: nccl, gloo or None, evidence: the line});
    arg_effect ({flag, key, expected, reported, proven, why}) when change is an engine argument;
    proof ({kind, proven, expected, saw}) when a proof is given.
  type: dict
  sample: {crashed: false, errors: [], nccl: {versions: [2.28.9]}, collectives: {backend: nccl}}
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host_commands import ModuleFailure, runner
from ansible.module_utils.journal_reading import scan_journal


def main():
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str", "required": True},
            "engine": {"type": "str", "required": True, "choices": ["sglang", "vllm", "unknown"]},
            "invocation_id": {"type": "str", "default": ""},
            "known_noise": {"type": "list", "elements": "str", "default": []},
            "stop_requested": {"type": "bool", "default": False},
            "extra_error_patterns": {"type": "list", "elements": "str", "default": []},
            "env_files": {"type": "list", "elements": "path", "default": []},
            "excerpt_lines": {"type": "int", "default": 60},
            "change": {"type": "dict", "default": {}},
            "proof": {"type": "dict", "default": {}},
            "version_report": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    try:
        module.exit_json(changed=False, scan=scan_journal(runner(module), module.params))
    except ModuleFailure as exc:
        module.fail_json(msg=str(exc), **exc.detail)


if __name__ == "__main__":
    main()
