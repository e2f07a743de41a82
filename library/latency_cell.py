#!/usr/bin/python
"""Ansible module: run one latency cell against the engine on the host, with NVML telemetry."""

DOCUMENTATION = r"""
---
module: latency_cell
short_description: Run one latency cell (n streamed requests) against a serving engine
description:
  - Sends C(requests) streamed chat completions at C(concurrency), each a strict-contract task
    (exactly C(contract_words) code words) padded to about C(prompt_tokens) with a unique prefix,
    temperature 0, fixed output length.
  - Per request - TTFT, E2E, decode tokens/s, actual prompt tokens (from the engine's usage),
    error, and whether the response met the contract (violations are kept with the response).
  - Samples NVML (power, temperature, SM and memory clocks, clock-event reasons) during the cell.
  - A long cell can run in chunks (C(first_index), C(requests)) so the play shows progress
    between them; the latency_arm action drives the chunks and merges them (serving_rollout/play/arm.py).
  - With C(lock_path) and C(lock_token), first checks the run may go on (module_utils/cells.py may_go_on) - the
    lock still holds the token and, with C(candidate_unit), the candidate engine is the one that became ready
    (C(candidate_identity)) - and returns C(stopped) without sending a request when it may not; with
    C(check_after) it asks again after the chunk (C(stopped_after)).
  - With C(for_s) (an endurance cell), runs chunk after chunk for that long in one module run, the check above
    before each.
  - With C(lease_s) too (the candidate arm), renews the host watchdog's lease before and while the chunk runs,
    for as long as the lock holds the token (module_utils/watchdog.py LeaseKeeper) - a chunk against a stalled
    engine runs to every request's timeout, and the watchdog must never act behind a living run. That lease
    file is all it writes.
  - Runs on the host so the API key stays there. Sends load to the engine; changes nothing else.
options:
  name: {description: Cell name (e.g. 4k)., type: str, required: true}
  arm: {description: Arm label (baseline-1, candidate, baseline-2)., type: str, required: true}
  prompt_tokens: {description: Target prompt size in tokens (words)., type: int, required: true}
  requests: {description: Requests in the cell., type: int, default: 12}
  concurrency: {description: Requests in flight., type: int, default: 1}
  contract_words: {description: Exact word count of each answer., type: int, default: 32}
  contract:
    description: >-
      words (each answer exactly C(contract_words) code words) or tokens (each answer exactly
      C(contract_tokens) completion tokens by the engine's own usage count, asked with min_tokens
      and ignore_eos: for a model that cannot follow the word task, such as the lab's random one).
    type: str
    choices: [words, tokens]
    default: words
  contract_tokens: {description: Exact completion tokens of each answer (contract tokens)., type: int, default: 48}
  contract_pattern: {description: Regular expression each word must match., type: str, default: "^[A-Z]+[0-9]+$"}
  timeout_s: {description: Time limit of one request., type: float, default: 600}
  telemetry_interval_s: {description: NVML sampling interval., type: float, default: 1.0}
  lock_path: {description: "The rollout lock this run must still hold for the chunk to run (empty - not checked).", type: path}
  lock_token: {description: This run's lock token; renewals stop once the lock holds another., type: str}
  lease_s: {description: "The lease renewed before and while the chunk runs, in seconds (empty - not renewed).", type: int}
  candidate_unit: {description: "The candidate's unit, whose engine must be the one that became ready (empty - not checked).", type: str}
  candidate_identity: {description: "The candidate's ActiveState, MainPID, InvocationID, NRestarts at ready.", type: dict}
  check_after: {description: "Whether to check again after the chunk (the candidate arm: an engine that exited during its last chunk).", type: bool, default: false}
  for_s:
    description: >-
      An endurance cell's slice. Above 0, chunks of C(requests) follow one another on the host until C(for_s) seconds
      have passed since the first began, a chunk had a failed request, or the run may not go on (asked before each
      chunk, as before the first); they are returned as C(chunks). 0 - one chunk, returned as C(cell).
    type: float
    default: 0
  engine:
    description: >-
      The engine (its adapter names its /metrics); given, the engine's own /metrics is read before and
      after the chunk and the difference returned as C(engine_metrics) (requests, TTFT and E2E sums,
      tokens generated, speculation's accepted tokens and drafts), beside the client's figures.
    type: str
    choices: [sglang, vllm, unknown]
  first_index: {description: Index of the first request when the cell runs in chunks., type: int, default: 0}
  warmup:
    description: >-
      Untimed requests of the cell's shape at its concurrency before the chunk's timed ones (a freshly started engine
      serves its first prompts of a new length or batch slower); counted in the result's warmup, never in its requests.
    type: int
    default: 0
  reference_conditions:
    description:
      - Conditions of the first baseline bracket (cpu_busy, cpu_steal, temp_c, power_w, clock_events,
        gpu_processes). A chunk run under different ones is measured again, at most C(remeasure_max) times.
    type: dict
  remeasure_max: {description: Most re-measurements of a disturbed chunk., type: int, default: 2}
  condition_limits:
    description: How far conditions may differ (cpu_busy, cpu_steal, temp_c, power_frac); defaults in module_utils/conditions.py.
    type: dict
extends_documentation_fragment: [engine_connection, engine_request]
author: serving-rollout
"""

EXAMPLES = r"""
- name: Candidate cell at 4K
  latency_cell:
    base_url: http://127.0.0.1:30000
    name: 4k
    arm: candidate
    prompt_tokens: 4000
"""

RETURN = r"""
lease_renewals:
  description: How often the lease was renewed while the chunk ran (with lock_path), else null.
  type: int
  returned: always
  sample: 3
stopped:
  description: >-
    Why the run must stop measuring, checked before the chunk - none of its requests was sent (with for_s, before
    each chunk: those run before it are in chunks) - else null.
  type: str
  returned: always
  sample: "the lock was taken over by ctl-2 (run 20261205T101010Z); this run stops measuring"
stopped_after:
  description: The same, checked again after the chunk (with check_after), else null.
  type: str
  returned: always
  sample: "the candidate engine exited during the last cell: ActiveState failed, MainPID 41 -> 0, ..."
lease_problem:
  description: Why a renewal failed (a full state folder), else null; the renewals ended there.
  type: str
  sample: ''
  returned: always
cell:
  description: >-
    The chunk (with for_s 0; else null) - name, arm, requests (per-request records), failures, contract_violations,
    telemetry, elapsed_s, conditions (what could disturb the timings), remeasured (discarded attempts and why),
    disturbed (why the kept attempt still differs from the reference, or null), engine_metrics (with engine), warmup
    ({requests, failures} of the untimed warm-up, with warmup).
  type: dict
  sample: {name: 1k, requests: [{ttft_s: 0.022, e2e_s: 0.146}], failures: 0}
  returned: always
chunks:
  description: With for_s above 0, the chunks in order, each as C(cell) is (those run before a stop too), else null.
  type: list
  elements: dict
  sample: [{name: endurance, requests: [{index: 0, e2e_s: 0.146}], failures: 0}]
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cells import measure
from ansible.module_utils.engine_client import ENGINE_ARGS, connect_module
from ansible.module_utils.env_files import module_api_key
from ansible.module_utils.host_commands import exit_with, runner


def main():
    module = AnsibleModule(
        argument_spec={
            **ENGINE_ARGS,
            "name": {"type": "str", "required": True},
            "arm": {"type": "str", "required": True},
            "prompt_tokens": {"type": "int", "required": True},
            "requests": {"type": "int", "default": 12},
            "concurrency": {"type": "int", "default": 1},
            "contract_words": {"type": "int", "default": 32},
            "contract": {"type": "str", "default": "words", "choices": ["words", "tokens"]},
            "contract_tokens": {"type": "int", "default": 48},
            "contract_pattern": {"type": "str", "default": "^[A-Z]+[0-9]+$"},
            "timeout_s": {"type": "float", "default": 600},
            "telemetry_interval_s": {"type": "float", "default": 1.0},
            "first_index": {"type": "int", "default": 0},
            "warmup": {"type": "int", "default": 0},
            "reference_conditions": {"type": "dict"},
            "remeasure_max": {"type": "int", "default": 2},
            "condition_limits": {"type": "dict"},
            "engine": {"type": "str", "choices": ["sglang", "vllm", "unknown"]},
            "lock_path": {"type": "path"},
            "lock_token": {"type": "str", "no_log": True},
            "lease_s": {"type": "int"},
            "candidate_unit": {"type": "str"},
            "candidate_identity": {"type": "dict"},
            "check_after": {"type": "bool", "default": False},
            "for_s": {"type": "float", "default": 0},
        },
        required_together=[("lock_path", "lock_token")],
        # (not check_after: its default false counts as given, and a cell without a lock would be refused)
        required_by={"lease_s": "lock_path", "candidate_unit": "lock_path"},
        supports_check_mode=False,
    )
    connect_module(module)
    exit_with(module, measure, runner(module), module.params, lambda: module_api_key(module))

if __name__ == "__main__":
    main()
