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

import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.controls import ControlError, prove
from ansible.module_utils.engine_adapters import arg_effect, collectives, read_log, ready_after_s, versions_logged
from ansible.module_utils.env_files import redact_line as redact
from ansible.module_utils.env_files import secret_values
from ansible.module_utils.host_commands import host_run
from ansible.module_utils.log_lines import JOURNAL_JSON, journal_entries
from ansible.module_utils.nccl_facts import p2p_in_effect, parse_log
from ansible.module_utils.unit_recipe import REDACTED, is_public_flag, is_public_name


def proven_arg(engine, text, change):
    """A candidate's engine-argument control as the engine's own configuration dump shows it
    (engine_adapters.arg_effect); values only for allow-listed flags."""
    effect = arg_effect(engine, text, change["name"], change.get("value"))
    if not is_public_flag(change["name"]):
        if effect["reported"] is not None and not effect["proven"]:
            effect["why"] = f"{engine} reports another value of {effect['key']}"
        effect.update({k: REDACTED for k in ("expected", "reported") if effect[k] is not None})
    return effect


def shown_proof(proof, change, arg_shown=None):
    """A proof as evidence may show it: for a flag or variable off the allow-list, neither the
    candidate's value nor the one the engine reports appears (an arg's reason is proven_arg's,
    already redacted)."""
    kind, name, value = change.get("kind"), change.get("name") or "", change.get("value")
    public = is_public_flag(name) if kind == "arg" else is_public_name(name) if kind == "env" else True
    if public:
        return proof
    shown = dict(proof)
    if value not in (None, True):
        shown["expected"] = proof["expected"].replace(str(value), REDACTED)
    if proof["saw"]:
        shown["saw"] = (arg_shown or {}).get("why") or f"another value of {name} ({REDACTED})"
    return shown


def judge(engine, lines, known=(), stop_requested=False, extra=()):
    """The scan of redacted lines: the adapter's reading, NCCL's, and the operator's own patterns."""
    text = "\n".join(lines)
    read = read_log(engine, text, known=known, stop_requested=stop_requested)
    parsed = parse_log(text)
    operator = [line for line in lines if any(x.search(line) for x in extra) and line not in read["errors"]]
    return {
        "lines": len(lines),
        "ready": read["ready_logged"],
        "phase": read["phase"],
        "crashed": read["crashed"] or bool(operator),
        "crash": read["crash"] or ("operator-pattern" if operator else None),
        "crash_phase": read["crash_phase"],
        "cause": read["cause"] or (operator[0] if operator else None),
        "cause_frame": read["cause_frame"],
        "errors": read["errors"] + operator,
        "warnings": read["warnings"],
        "noise": read["noise"],
        "stuck": read["stuck"],
        "signatures": read["signatures"],
        "nccl": {"versions": sorted(set(parsed["versions"]) | set(read["nccl_versions"])),
                 "summary": parsed["summary"], "settings": parsed["settings"],
                 "p2p_in_effect": p2p_in_effect(parsed), "p2p_reasons": parsed["proof"]["reasons"],
                 "ranks": parsed["proof"]["ranks"], "nvls": parsed["nvls"],
                 "transports": sorted({t for pair in parsed["pairs"] for t in pair["transports"]})},
        "custom_all_reduce": read["custom_all_reduce"]["state"],
        "custom_all_reduce_evidence": read["custom_all_reduce"]["evidence"],
        "kv_cache_tokens": read["kv_cache_tokens"],
        "versions_logged": versions_logged(engine, text),
        "max_concurrency": read["max_concurrency"],
        "accept_length": read["accept_length"],
        "collectives": dict(zip(("backend", "evidence"), collectives(text), strict=True)),
    }


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
    p = module.params
    try:
        extra = [re.compile(x) for x in p["extra_error_patterns"]]
    except re.error as exc:
        module.fail_json(msg=f"extra_error_patterns holds a bad regular expression: {exc}")
    invocation = p["invocation_id"]
    if not invocation:
        rc, out, err = host_run(module, ["systemctl", "show", "-p", "InvocationID", "--value", "--", p["unit"]])
        invocation = out.strip()
    if not invocation:
        empty = judge(p["engine"], [])
        module.exit_json(changed=False, scan=dict(empty, invocation_id=None, excerpt=[],
                                                  reason=f"{p['unit']} has no invocation"))
    # the messages as journald stores them (a progress bar's carriage returns and colours would print as
    # "[N blob data]" otherwise), cut and cleaned by the one line reader
    rc, out, err = host_run(module, ["journalctl", "--no-pager", *JOURNAL_JSON, f"_SYSTEMD_INVOCATION_ID={invocation}"])
    if rc != 0:
        module.fail_json(msg=f"journalctl failed for invocation {invocation}: {err.strip()}", rc=rc, stderr=err)
    secrets = secret_values(p["env_files"])
    try:
        entries = journal_entries(out)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    stamped = [(entry["time"], redact(line, secrets)) for entry in entries for line in entry["lines"]]
    lines = [line for _, line in stamped]
    scan = judge(p["engine"], lines, p["known_noise"], p["stop_requested"], extra)
    scan.update(invocation_id=invocation, excerpt=lines[-p["excerpt_lines"]:],
                ready_after_s=ready_after_s(p["engine"], stamped))
    if p["change"].get("kind") == "arg":
        scan["arg_effect"] = proven_arg(p["engine"], "\n".join(lines), p["change"])
    if p["proof"]:
        try:
            proof = prove(p["proof"], p["change"], p["engine"], "\n".join(lines),
                          {**scan, "version_report": p["version_report"]})
            scan["proof"] = shown_proof(proof, p["change"], scan.get("arg_effect"))
        except ControlError as exc:
            module.fail_json(msg=str(exc))
    module.exit_json(changed=False, scan=scan)


if __name__ == "__main__":
    main()
