#!/usr/bin/python
"""Documentation of the fleet_record action (action_plugins/fleet_record.py runs it on the controller)."""

DOCUMENTATION = r"""
---
module: fleet_record
short_description: Begin a batch, record a host's outcome or mark a host lost, in the fleet's records
description:
  - Runs on the controller (an action plugin) with serving_rollout.fleet, under the evidence folder's lock
    (hosts of one batch finish at once); nothing on the host.
  - C(op=begin) - whether this batch may start (every host of an earlier batch passed); writes the fleet
    row of each host of the batch as started.
  - C(op=record) - writes C(host)'s C(outcome) to the run's fleet records and renders the summary again.
  - C(op=lost) - writes C(host) lost (C(why)) in the fleet row of run C(run_id), whose lock a rollback took over.
  - Changes only the controller's evidence folder (changed is always false - the host is untouched); a folder
    that cannot be written fails naming it. In check mode it writes nothing (begin lets every batch start).
options:
  op: {description: What to do., type: str, required: true, choices: [begin, record, lost]}
  evidence_dir: {description: The controller's evidence folder (the fleet's records go to fleet-<run_id>/)., type: path, required: true}
  run_id: {description: The fleet run., type: str, required: true}
  hosts: {description: Every host of the play (begin)., type: list, elements: str, default: []}
  batch: {description: The hosts of this batch (begin)., type: list, elements: str, default: []}
  host: {description: The host recorded (record, lost)., type: str, default: ""}
  outcome: {description: The host's outcome facts (record)., type: dict, default: {}}
  why: {description: Why the host was lost (lost)., type: str, default: ""}
author: serving-rollout
"""

EXAMPLES = r"""
- name: Record this host's outcome
  fleet_record:
    op: record
    evidence_dir: "{{ fleet_evidence_dir }}"
    run_id: "{{ run_id }}"
    host: "{{ inventory_hostname }}"
    outcome: "{{ fleet_outcome }}"
"""

RETURN = r"""
begin:
  description: Whether the batch stops (stop), the host that stopped it (stopped_by) and its outcome.
  type: dict
  returned: op=begin
  sample: {stop: false, stopped_by: null, outcome: null}
record:
  description: "The host's row as recorded (host, outcome, evidence...); null when the evidence folder is not writable (said as FLEET RECORD NOT WRITTEN, the play goes on)."
  type: dict
  sample: {host: gpu-1, outcome: acceptable, verdict: acceptable, duration_s: 52.3}
  returned: op=record
lost:
  description: The row marked lost.
  type: dict
  sample: {host: gpu-2, outcome: lost, failure: controller killed}
  returned: op=lost
"""

if __name__ == "__main__":
    raise SystemExit("fleet_record runs on the controller as an action plugin (action_plugins/fleet_record.py)")
