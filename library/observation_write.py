#!/usr/bin/python
"""Documentation of the observation_write action (action_plugins/observation_write.py runs it on the controller)."""

DOCUMENTATION = r"""
---
module: observation_write
short_description: Write a run's observation documents, redacted, into a new run folder on the controller
description:
  - Runs on the controller (an action plugin, serving_rollout/observations.py); nothing on the host.
  - Checks first, naming each bad value - the run id a plain name, the kind lower-case, each document
    named <lower-case>.json with a serving-rollout.<name>/vN schema.
  - Redacts every document - values of secret-looking keys and secret assignments in text (allow-listed
    controls stay, serving_rollout/redaction.py) and, with C(redact_host_identifiers), the host's name,
    address and C(extra_identifiers) (GPU UUIDs) replaced by stable labels.
  - Writes each document as {schema, host, run_id, **body} into C(dir)/<host>/C(kind)-C(run_id)/ (made 0750),
    each file created new (0640) - an existing file is never overwritten, a partial one is removed, and a
    full or read-only disk fails naming the path. In check mode it writes nothing.
options:
  dir: {description: The controller's evidence folder., type: path, required: true}
  kind: {description: What the run was (capture, peer-path, rollout, rollback) - names the folder., type: str, required: true}
  run_id: {description: The run's id (one per run, every host)., type: str, required: true}
  documents: {description: "The documents - [{name: file.json, schema: ..., body: {...}}].", type: list, elements: raw, required: true}
  redact_host_identifiers: {description: Replace the host's name and address and C(extra_identifiers) with labels., type: bool, default: false}
  extra_identifiers: {description: More identifiers to replace (GPU UUIDs, serials)., type: list, elements: str, default: []}
  report_change: {description: Report the new folder as a change (rollback.yml does not - it is not a host change)., type: bool, default: true}
author: serving-rollout
"""

EXAMPLES = r"""
- name: Write the run's observations
  observation_write:
    dir: "{{ playbook_dir }}/../evidence"
    kind: capture
    run_id: "{{ run_id }}"
    documents:
      - name: versions.json
        schema: serving-rollout.versions/v1
        body: {kernel: "{{ kernel }}"}
"""

RETURN = r"""
dir:
  description: The run folder.
  type: str
  returned: always
  sample: evidence/lab-gpu-1/capture-20261205T064812Z-3f9a
written:
  description: The documents written (on a failure, those written before it).
  type: list
  elements: str
  returned: always
  sample: [iommu-observation.json, versions.json]
error:
  description: What stopped the writing (the path and the cause).
  type: str
  sample: ''
  returned: failed while writing
"""

if __name__ == "__main__":
    raise SystemExit("observation_write runs on the controller as an action plugin (action_plugins/observation_write.py)")
