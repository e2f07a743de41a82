#!/usr/bin/python
"""Ansible module: the numerical-equivalence probe (greedy answers of fixed prompts, with logprobs)."""

DOCUMENTATION = r"""
---
module: numerics_probe
short_description: Greedy answers of fixed prompts with logprobs, compared with a reference
description:
  - Sends the same fixed prompts (module_utils/equivalence.py) at temperature 0 with logprobs and
    returns each answer's tokens, the chosen tokens' logprobs and how far each choice led its
    runner-up.
  - With C(reference) (the original's answers) it compares - greedy agreement, the first
    divergence, the chosen tokens' logprob drift - and, with C(tolerance), judges pass or fail.
    A divergence where the original's choice was a near-tie (within the tolerance's tie margin) is
    numerics noise; a confident choice replaced is corruption.
  - Runs on the serving host so the API key, read there from the unit's EnvironmentFiles, never
    travels to the controller. A request that fails is a record with verdict error, not a module
    failure.
  - Read-only - it sends requests to the engine and changes nothing on the host (check mode too).
options:
  prompts:
    description: How many fixed prompts (1-256).
    type: int
    default: 16
  tokens:
    description: Tokens generated per prompt.
    type: int
    default: 32
  reference:
    description: The original's answers (this module's C(record.answers) from the original's run).
    type: list
    elements: dict
  tolerance:
    description:
      - A tolerance name (exact, reduction-order, kernels) or a mapping with max_logprob_drift and
        tie_margin; empty - recorded, not judged.
    type: raw
  timeout_s:
    description: Time limit of one request.
    type: float
    default: 120
  phase:
    description: Recorded with the result (baseline, candidate, restored).
    type: str
    default: ""
extends_documentation_fragment: [engine_connection, engine_request]
author: serving-rollout
"""

EXAMPLES = r"""
- name: The original's greedy answers (the reference)
  numerics_probe:
    base_url: http://127.0.0.1:30000
    phase: baseline
  register: reference

- name: The candidate's, judged against them
  numerics_probe:
    base_url: http://127.0.0.1:30000
    reference: "{{ reference.record.answers }}"
    tolerance: exact
    phase: candidate
"""

RETURN = r"""
record:
  description:
    - phase, prompts, tokens, answers (tokens, logprobs, margins per prompt, or its error), errors,
      comparison (with a reference - prompts identical, agreement, first_divergence,
      max_logprob_drift, divergences, tolerance), verdict (pass, fail, recorded, error) and reason.
  type: dict
  sample: {phase: candidate, verdict: pass, reason: 8/8 prompts identical}
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.engine_client import ENGINE_ARGS, connect_module
from ansible.module_utils.env_files import module_api_key
from ansible.module_utils.equivalence import EquivalenceError, probe, record_for, tolerance


def main():
    module = AnsibleModule(
        argument_spec={
            **ENGINE_ARGS,
            "prompts": {"type": "int", "default": 16},
            "tokens": {"type": "int", "default": 32},
            "reference": {"type": "list", "elements": "dict"},
            "tolerance": {"type": "raw"},
            "timeout_s": {"type": "float", "default": 120},
            "phase": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    connect_module(module)
    p = module.params
    if not 1 <= p["tokens"] <= 4096:
        module.fail_json(msg=f"tokens must be 1..4096, got {p['tokens']}")
    try:
        spec = tolerance(p["tolerance"])
        if p["reference"] is not None and len(p["reference"]) != p["prompts"]:
            raise EquivalenceError(f"the reference has {len(p['reference'])} answers, the probe sends {p['prompts']}")
        result = probe(p["base_url"], p["prompts"], p["tokens"], model=p["model"], api_key=module_api_key(module),
                       timeout_s=p["timeout_s"])
        verdict = record_for(result, p["reference"], spec)
    except EquivalenceError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, record={"phase": p["phase"], "prompts": p["prompts"], "tokens": p["tokens"],
                                            **result, **verdict})


if __name__ == "__main__":
    main()
