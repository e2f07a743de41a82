#!/usr/bin/python
"""Documentation of the latency_arm action (action_plugins/latency_arm.py runs it on the controller)."""

DOCUMENTATION = r"""
---
module: latency_arm
short_description: Measure one cell of one A/B arm, chunk by chunk, with progress and the go-on checks
description:
  - Runs on the controller (an action plugin) and drives latency_cell on the host one chunk of
    C(chunk) requests at a time, so an operator sees request k of n, elapsed time and the running
    median between chunks, then the cell's summary.
  - Before each chunk, and in the candidate arm after its last - the run's lock must still be its own (rollout_lock, state held; in the
    candidate arm it renews the host watchdog's lease) and, in the candidate arm, the candidate
    unit must be the engine that became ready (ActiveState, MainPID, InvocationID, NRestarts);
    otherwise it fails, naming which changed.
  - Requests per cell - the candidate C(requests); the first baseline bracket C(bracket); the second
    one chunk (its drift check); every arm C(requests) when not C(sequential).
  - In the candidate arm of a sequential cell it looks at the cell after every chunk against its
    first baseline bracket and stops at the first clear look (serving_rollout/play/abstats.py).
  - Changes nothing on the host but the lock's lease (not renewed under check mode); sends load to the engine.
options:
  arm: {description: baseline-1, candidate or baseline-2., type: str, required: true}
  cell: {description: "The cell: name and prompt_tokens.", type: dict, required: true}
  requests: {description: The candidate's requests per cell (the most)., type: int, required: true}
  chunk: {description: Requests per chunk (progress and looks between chunks)., type: int, required: true}
  bracket: {description: Requests of the first baseline bracket., type: int, required: true}
  sequential: {description: Sequential cells (else every arm runs C(requests))., type: bool, default: true}
  first_bracket: {description: The first baseline bracket's cells (the reference of the other arms)., type: list, elements: dict}
  alpha: {description: Error rate of the verdict., type: float, default: 0.05}
  cells: {description: Cells of the run (Holm's family)., type: int, default: 1}
  min_effect: {description: Smallest effect that counts., type: float, default: 0.02}
  rule: {description: The decision rule (serving_rollout/play/abstats.py)., type: dict}
  lock_path: {description: The run's lock file on the host., type: path, required: true}
  lock_token: {description: The run's lock token., type: str, required: true}
  lease_s: {description: The watchdog's lease renewed before each candidate chunk., type: int}
  candidate_unit: {description: The candidate's unit (candidate arm)., type: str}
  candidate_identity: {description: "The candidate's MainPID, InvocationID, NRestarts at ready.", type: dict}
  base_url: {description: Engine URL on the host., type: str, required: true}
  model: {description: Model id sent in requests., type: str}
  api_key_var: {description: Variable holding the API key in env_files., type: str}
  env_files: {description: EnvironmentFiles to read api_key_var from., type: list, elements: path}
  contract_words: {description: Exact word count of each answer., type: int}
  contract: {description: words or tokens (latency_cell)., type: str}
  timeout_s: {description: Time limit of one request., type: float}
  concurrency: {description: Requests in flight., type: int}
  remeasure_max: {description: Times a disturbed chunk is measured again., type: int}
  warmup_waves:
    description: >-
      Untimed waves of the cell's shape at its concurrency before its first timed chunk (latency_cell warmup): a
      freshly started engine is slower on its first prompts of a new shape; none before an endurance cell.
    type: int
    default: 0
  condition_limits: {description: How far conditions may differ., type: dict}
  engine: {description: "The engine (its /metrics are read beside the client's figures, latency_cell).", type: str}
  accept_length_from_log:
    description: >-
      A speculative candidate (the catalog's choice) - when its /metrics give no accept length, the candidate
      arm reads the engine's own log line for it once after the cell (journal_scan) and keeps it as
      C(engine_log) with its source.
    type: bool
    default: false
  duration_s:
    description: >-
      An endurance cell - chunks until this many seconds have passed (not a request count), stopping at
      its first failed request; no looks. Its chunks run on the host 10 s at a time (latency_cell for_s, the
      checks before each chunk there), one module run and one progress line a slice. Then the candidate's
      journal is read (journal_scan) and serving_rollout/play/arm.py judges it - a hang, a failed request, E2E drift
      beyond C(drift_limit), a crash or an error line new under load fails the task, its verdict and scan
      returned all the same.
    type: float
  drift_limit: {description: "The endurance cell's E2E drift limit, last third against first (with C(duration_s)).", type: float, default: 0.1}
  known_noise: {description: "Journal lines that are not errors on this host (with C(duration_s), journal_scan).", type: list, elements: str}
  extra_error_patterns: {description: "The operator's own error patterns (with C(duration_s), journal_scan).", type: list, elements: str}
extends_documentation_fragment: [engine_connection]
author: serving-rollout
"""

EXAMPLES = r"""
- name: Measure the candidate arm, cell by cell
  latency_arm:
    arm: candidate
    cell: "{{ item }}"
    requests: 12
    chunk: 4
    bracket: 8
    first_bracket: "{{ _rollout_cells_by_arm['baseline-1'] }}"
    lock_path: /var/lib/serving-rollout/sglang.service.lock
    lock_token: "{{ _rollout_lock_token }}"
    candidate_unit: sglang-candidate.service
    candidate_identity: "{{ __rollout_candidate_started.identity }}"
    base_url: http://127.0.0.1:30000
  loop: "{{ rollout_cells }}"
"""

RETURN = r"""
cell:
  description: >-
    The merged cell (latency_cell's records of every chunk joined; telemetry per chunk; conditions,
    remeasured, disturbed) and, in a sequential candidate arm, its last look under C(sequential).
  type: dict
  sample: {name: 1k, requests: [], failures: 0, elapsed_s: 1.2}
  returned: success
verdict:
  description: "The endurance cell's verdict (ok, reason, requests, failures, drift, drift_limit), with C(duration_s)."
  type: dict
  sample: {verdict: pass, reason: 20 requests over 4.6 s, none failed}
  returned: with duration_s, when the cell completed
scan:
  description: "The candidate's journal read after the endurance cell (journal_scan's scan), with C(duration_s)."
  type: dict
  sample: {errors: []}
  returned: with duration_s, when the cell completed
"""

if __name__ == "__main__":
    raise SystemExit("latency_arm runs on the controller as an action plugin (action_plugins/latency_arm.py)")
