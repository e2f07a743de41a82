#!/usr/bin/python
"""Documentation of the proposal_write action (action_plugins/proposal_write.py runs it on the controller)."""

DOCUMENTATION = r"""
---
module: proposal_write
short_description: Write a host's proposal - its pins as observed, an ordered candidate plan and a report
description:
  - Runs on the controller (an action plugin); nothing on the host.
  - From the facts the play read (the capture, systemd's reading of the unit, the engine's start-up log) and the
    host's evidence on the controller (the newest capture and peer-path observations, the decode prediction), reads
    every catalog control against the host (serving_rollout/proposal.py).
  - Writes C(evidence_dir)/C(host)/proposal-C(run_id)/ - pins.yml (serving_expected as observed, each value with
    where it was read, for the operator to copy; never written into an inventory), plan.json (valid against
    schemas/candidate-plan.schema.json, ready for plan.yml) and report.md (the same for a person, with what was
    not proposed and why). An existing folder is never overwritten. In check mode it writes nothing and shows the
    report.
options:
  evidence_dir: {description: "The evidence folder on the controller.", type: path, required: true}
  host: {description: The inventory host., type: str, required: true}
  run_id: {description: "This run's id (names the folder).", type: str, required: true}
  unit: {description: The serving unit., type: str, required: true}
  recipe: {description: "The unit's recipe as serving_recipe adopted it (systemd's reading, values redacted).", type: dict, required: true}
  scan: {description: "journal_scan's scan of the engine's start-up log (collectives, NCCL versions, accept length).", type: dict, default: {}}
  capture: {description: "The host facts of the capture (host_facts - iommu, nvml, nccl).", type: dict, default: {}}
  unit_state: {description: "systemd's state of the serving unit (ActiveState, SubState): an original that does not serve gets nothing proposed.", type: dict, default: {}}
author: serving-rollout
"""

EXAMPLES = r"""
- name: Write the proposal
  proposal_write:
    evidence_dir: "{{ playbook_dir }}/../evidence"
    host: "{{ inventory_hostname }}"
    run_id: "{{ run_id }}"
    unit: sglang.service
    recipe: "{{ propose_original.recipe }}"
    scan: "{{ propose_log.scan }}"
    capture: "{{ host_facts_result }}"
    unit_state: "{{ propose_original.unit }}"
"""

RETURN = r"""
folder:
  description: The proposal's folder on the controller.
  type: str
  returned: always
  sample: /srv/serving-rollout/evidence/gpu-1/proposal-20261205T120000Z
candidates:
  description: The proposed candidates' ids, in order.
  type: list
  elements: str
  returned: always
  sample: [p2p, cumem, custom-all-reduce, scheduler-and-speculation]
not_proposed:
  description: "Each catalog control not proposed, with why (id, why)."
  type: list
  elements: dict
  returned: always
  sample: [{id: engine-image, why: "an engine upgrade is the operator's choice of build (the catalog's engine-image)"}]
"""

if __name__ == "__main__":
    raise SystemExit("proposal_write runs on the controller as an action plugin (action_plugins/proposal_write.py)")
