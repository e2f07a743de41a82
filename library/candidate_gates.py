#!/usr/bin/python
"""Documentation of the candidate_gates action (action_plugins/candidate_gates.py runs it on the controller)."""

DOCUMENTATION = r"""
---
module: candidate_gates
short_description: Run the candidate's correctness gates, directly and through the router
description:
  - Runs on the controller (an action plugin) and runs the gates on the host in one module run (engine_gate's
    runs, so the engine's API key, read there from the unit's EnvironmentFiles, never travels to the controller).
  - Runs every gate of C(gates) not named in C(not_qualified) against C(base_url) (phase candidate), then, with a
    C(router_url), the smoke and JSON gates through the router (phase candidate-routed).
  - Every gate runs even after one fails, so every record is returned; the task then fails naming the first
    failed gate, its reason and what it observed.
  - When a gate fails and C(candidate_unit) is given, the candidate's systemd state is read; an engine that
    exited or restarted since it became ready (C(candidate_identity)) is named as the cause, the gate's own
    failure (a refused connection) beside it.
  - A gate named in C(not_qualified) (a gate that cannot be meaningful on the host's model) is a record with
    verdict not-qualified and its reason; it is never run and never passed.
  - Read-only - it sends requests to the engine and changes nothing on the host (check mode too).
options:
  base_url: {description: "The candidate engine's URL.", type: str, required: true}
  gates:
    description: The gates, in order (engine_gate's names).
    type: list
    elements: str
    required: true
  not_qualified: {description: "Gates that cannot qualify on this host, each with why ({gate: reason}).", type: dict, default: {}}
  router_url: {description: "The router in front of the engine (empty - none).", type: str, default: ""}
  model: {description: The model id sent in requests., type: str, required: true}
  api_key_var: {description: The variable holding the API key in the EnvironmentFiles., type: str}
  env_files: {description: "The unit's EnvironmentFiles (the API key read there).", type: list, elements: path, default: []}
  timeout_s: {description: Time limit of one request., type: float, required: true}
  target_tokens: {description: Prompt size for needle and tool_call (words)., type: int}
  depth: {description: Needle depth, 0 (start) to 1 (end)., type: float}
  contract_words: {description: Exact word count of the strict output contract., type: int}
  candidate_unit: {description: "The candidate's unit, read when a gate fails (empty - not read).", type: str, default: ""}
  candidate_identity: {description: "The candidate's MainPID, InvocationID, NRestarts at ready.", type: dict, default: {}}
  numerics:
    description: >-
      The numerical-equivalence probe once every gate passed - prompts, tokens, reference (the original's answers),
      tolerance, timeout_s (numerics_probe's options); a result beyond the tolerance fails the action.
    type: dict
  numerics_label:
    description: The candidate's id, named when its numbers fail.
    type: str
extends_documentation_fragment: [engine_connection]
author: serving-rollout
"""

EXAMPLES = r"""
- name: Run the candidate's gates
  candidate_gates:
    base_url: http://127.0.0.1:30000
    gates: [smoke, json, needle, tool_call, contract]
    not_qualified: {needle: "random weights: no recall to measure"}
    router_url: http://127.0.0.1:8080
    model: default
    api_key_var: SGLANG_API_KEY
    env_files: [/etc/sglang/sglang.env]
    timeout_s: 120
  register: __rollout_gates
"""

RETURN = r"""
numerics:
  description: "The candidate's numerics record (numerics_probe's record), or null without C(numerics)."
  type: dict
  sample: {verdict: pass, reason: 8/8 prompts identical}
  returned: always
records:
  description: >-
    Every gate's record (gate, phase, inputs, observed, expected, verdict, reason, duration), in the order run,
    then the not-qualified ones; returned when a gate fails too.
  type: list
  sample: [{gate: smoke, phase: candidate, verdict: pass, duration_s: 0.03}]
  elements: dict
  returned: always
"""

if __name__ == "__main__":
    raise SystemExit("candidate_gates runs on the controller as an action plugin (action_plugins/candidate_gates.py)")
