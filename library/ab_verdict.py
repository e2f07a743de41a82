#!/usr/bin/python
"""Documentation of the ab_verdict action (action_plugins/ab_verdict.py runs it on the controller)."""

DOCUMENTATION = r"""
---
module: ab_verdict
short_description: Verdicts per metric per cell and an overall decision, with numpy and scipy
description:
  - Runs on the controller (an action plugin; numpy and scipy are the controller's). Per cell and metric (TTFT, E2E, decode
    tokens/s) - n, median, p90/p99 where n allows, the relative median delta with a bootstrap
    interval, a rank test, and better / worse / inconclusive with a minimum effect size.
  - A cell whose responses broke the output contract is ineligible and not timed; a drift
    between the two baseline brackets beyond C(drift_limit) makes it inconclusive; failed
    requests are counted.
  - The decision rule is configurable; by default acceptable only if no eligible cell is worse
    on TTFT or E2E and at least one is better.
  - Read-only - arithmetic on the controller; supports check mode.
options:
  arms:
    description: >-
      Each arm's cells as its latency_arm loop returned them, {baseline-1, candidate, baseline-2: [cell...]}
      (the rollout role's _rollout_cells_by_arm); matched here by name, one cell per cell of baseline-1 - both
      brackets' requests against the candidate's, its last sequential look, the arms' conditions, what disturbed
      them and the output-contract violations. An arm or a cell missing fails, naming it.
    type: dict
    required: true
  min_effect: {description: Smallest relative change that counts., type: float, default: 0.02}
  alpha:
    description: >-
      Family-wise error of the decision - the chance that an identical candidate gets a verdict other than
      inconclusive (split over the cells, Holm within a look, a sequential boundary over the looks:
      module_utils/abstats.METHOD).
    type: float
    default: 0.05
  drift_limit: {description: Largest allowed relative drift between baseline brackets., type: float, default: 0.05}
  max_failed_requests:
    description: >-
      Failed candidate requests a cell may have; more in any cell is a reject (a crash or an error is never
      bought back by latency). A cell with too few successful requests in an arm makes the decision inconclusive
      at best.
    type: int
    default: 0
  rule: {description: "Decision rule {guard: [metrics], need_better: [metrics]}.", type: dict}
  condition_limits: {description: "How far the arms' conditions may differ (module_utils/conditions.py).", type: dict}
author: serving-rollout
requirements: [numpy, scipy]
"""

EXAMPLES = r"""
- name: Judge the cells
  ab_verdict:
    arms: "{{ _rollout_cells_by_arm }}"
"""

RETURN = r"""
cells:
  description: Per cell verdicts.
  type: list
  sample: [{name: 1k, verdict: better, metrics: {e2e_s: {delta: -0.032}}}]
  returned: always
decision:
  description: decision (acceptable, reject, inconclusive), rule, method (the error control) and reasons.
  type: dict
  sample: {decision: acceptable, promotion_allowed: true, reasons: ['1k: E2E -3.2% better']}
  returned: always
"""

if __name__ == "__main__":
    raise SystemExit("ab_verdict runs on the controller as an action plugin (action_plugins/ab_verdict.py)")
