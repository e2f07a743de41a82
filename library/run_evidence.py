#!/usr/bin/python
"""Documentation of the run_evidence action (action_plugins/run_evidence.py runs it on the controller)."""

DOCUMENTATION = r"""
---
module: run_evidence
short_description: Check, weigh, finalize or trust a run's evidence on the controller
description:
  - Runs on the controller (an action plugin) with serving_rollout.evidence; nothing on the host.
  - C(op=check_dir) - before any change, the evidence folder exists or can be made, takes a file and has
    C(min_free_mib) free; otherwise it fails naming the folder and what is wrong. Writes only a test file it removes.
  - C(op=predict) - whether the decode-size probe's predicted gain (the host's peer-path evidence under C(path))
    clears C(min_effect), said on the console; with C(refuse_flagged) a flagged one fails naming its reason; reads only.
  - C(op=finalize) - writes the run folder C(path)'s decision record, result card, plot, manifest and seal and
    adds the run to the evidence index; a folder already finalized is refused (never overwritten). Returns the
    decision and the record the host keeps of it. In check mode it writes nothing and reports changed.
  - C(op=trust) - what promotion acts on - the files match the manifest, the manifest its seal, the index
    the decision's verdict; fails naming every problem otherwise; reads only.
options:
  op: {description: What to do., type: str, required: true, choices: [check_dir, predict, finalize, trust]}
  path: {description: "The evidence folder (check_dir), the host's folder (predict) or the run's folder.", type: path, required: true}
  min_free_mib: {description: Room the evidence folder needs (check_dir)., type: float, default: 0}
  min_effect: {description: The A/B's minimum effect (predict)., type: float, default: 0.02}
  decode_ms_per_token: {description: The baseline's decode time per token (predict; 0 - from the latest finished run)., type: float, default: 0}
  refuse_flagged: {description: "Fail when the predicted gain is flagged below C(min_effect) (predict); else it is only said.", type: bool, default: false}
author: serving-rollout
"""

EXAMPLES = r"""
- name: Finalize the run directory
  run_evidence:
    op: finalize
    path: "{{ rollout_evidence_dir }}/{{ inventory_hostname }}/rollout-{{ run_id }}"
  register: __rollout_finalize
"""

RETURN = r"""
prediction:
  description: The predicted gain against the minimum effect (flag, known, reason, predicted_effect...).
  type: dict
  returned: op=predict
  sample: {flag: false, known: false, reason: no peer-path evidence with a decode prediction}
record:
  description: The decision record, with host_record (run_id, verdict, promotable, decision_sha256) for the host.
  type: dict
  returned: op=finalize
  contains:
    host_record: {description: What the host keeps of the decision., type: dict}
trust:
  description: verdict, promotion_allowed, decision_sha256 and problems (empty when trusted).
  type: dict
  sample: {problems: [], decision: acceptable}
  returned: op=trust
"""

if __name__ == "__main__":
    raise SystemExit("run_evidence runs on the controller as an action plugin (action_plugins/run_evidence.py)")
