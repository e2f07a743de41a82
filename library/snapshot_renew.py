#!/usr/bin/python
"""Documentation of the snapshot_renew action (action_plugins/snapshot_renew.py runs it on the controller)."""

DOCUMENTATION = r"""
---
module: snapshot_renew
short_description: Adopt the current original unit and its files as the restore recipe
description:
  - The explicit, human step after an intended change to the original (a key rotation in its EnvironmentFile, an
    operator's edit) - never part of a rollout.
  - Runs on the controller (an action plugin) and runs each step on the host as its own module, in order; the
    first that fails ends it with its step and message.
  - Refuses while C(candidate_unit) is loaded or running (run rollback.yml first), before anything changes.
  - Reads the current original (serving_recipe) and replaces the snapshot in C(dest) with a new verified copy of
    its unit, drop-ins and EnvironmentFiles (serving_snapshot with replace).
  - Refuses while a promotion is in place (C(dest)/promoted.json), unless C(over_promotion).
  - Changes the host - it writes the new snapshot (copies, sha256 checked, and manifest.json) in C(dest); under
    check mode it writes nothing.
options:
  unit: {description: The original serving unit., type: str, required: true}
  candidate_unit: {description: "The candidate's unit (must be neither loaded nor running).", type: str, required: true}
  dest: {description: The snapshot folder on the host., type: path, required: true}
  over_promotion:
    description:
      - "With a promotion in place (C(dest)/promoted.json), renew anyway: the pre-promotion snapshot is copied to
        C(dest).pre-promotion-RUN (its manifest checked) with its promotion record, then replaced. Without it such a
        renew is refused before anything changes, naming the run and rollback.yml."
    type: bool
    default: false
author: serving-rollout
"""

EXAMPLES = r"""
- name: Adopt the current original as the restore recipe
  snapshot_renew:
    unit: sglang.service
    candidate_unit: sglang-candidate.service
    dest: /var/lib/serving-rollout/sglang.service
  register: __rollout_renewed
"""

RETURN = r"""
manifest:
  description: The new snapshot manifest (unit, state, files with sha256, taken_at, replaced).
  type: dict
  sample: {unit: sglang.service, files: []}
  returned: success
kept_pre_promotion:
  description: The folder the pre-promotion snapshot was kept in (over_promotion), else null.
  type: str
  sample: /var/lib/serving-rollout/sglang.service.pre-promotion-20261207T071336Z
  returned: always
both_versions:
  description: "Each changed file's both versions (a unit's diff, an EnvironmentFile's changed variable names; values
    redacted); empty when the snapshot already matched."
  type: list
  sample: []
  elements: str
  returned: always
"""

if __name__ == "__main__":
    raise SystemExit("snapshot_renew runs on the controller as an action plugin (action_plugins/snapshot_renew.py)")
