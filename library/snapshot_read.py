#!/usr/bin/python
"""Ansible module: read what rollback restores from - the original's snapshot, or proof that there is none
to need."""

DOCUMENTATION = r"""
---
module: snapshot_read
short_description: Read the original's snapshot and whether a promotion is to be undone
description:
  - Reads C(state_dir)/C(unit)/manifest.json (the restore recipe serving_snapshot wrote) and whether
    C(state_dir)/C(unit)/promoted.json exists (a promotion rollback undoes).
  - A host without a snapshot was never changed by serving-rollout - nothing to restore. That is said only of a
    unit systemd reports active and enabled, with no candidate unit installed in C(unit_dir); otherwise it fails
    naming what it found (a candidate without a snapshot means the snapshot was lost mid-run).
  - Reads both units' systemd state and returns C(clean) - nothing is left to put back (no candidate loaded or
    running, the original active and never restarted on its own, no promotion to undo) - so rollback.yml can say
    "nothing to restore" even where its lock cannot be written (a full state folder).
  - Read-only; it changes nothing and runs the same under check mode.
options:
  unit: {description: The original serving unit., type: str, required: true}
  candidate_unit: {description: The candidate's unit., type: str, required: true}
  state_dir: {description: "The tool's state folder on the host.", type: path, required: true}
  unit_dir: {description: Where a candidate unit would be installed., type: path, default: /etc/systemd/system}
author: serving-rollout
"""

EXAMPLES = r"""
- name: Look for the original's snapshot
  snapshot_read:
    unit: sglang.service
    candidate_unit: sglang-candidate.service
    state_dir: /var/lib/serving-rollout
  register: rollout_snapshot
"""

RETURN = r"""
found:
  description: Whether the snapshot exists.
  type: bool
  sample: true
  returned: always
manifest:
  description: The snapshot manifest (unit, state, files with sha256), or null without one.
  type: dict
  sample: {unit: sglang.service, files: []}
  returned: always
promoted:
  description: Whether a promotion record is there (rollback returns to the snapshot's original).
  type: bool
  sample: false
  returned: always
clean:
  description: Whether nothing is left to put back (read from systemd's state of both units and the promotion record).
  type: bool
  returned: always
  sample: true
state:
  description: "The unit's ActiveState, UnitFileState, LoadState, NRestarts and InvocationID, read when there is no
    snapshot (empty otherwise)."
  type: dict
  sample: {ActiveState: active}
  returned: always
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host_commands import host_run
from ansible.module_utils.put_back import left_to_put_back, untouched_refusal

PROPERTIES = ("ActiveState", "UnitFileState", "LoadState", "NRestarts", "InvocationID", "NeedDaemonReload")


def show(module, unit, required=True):
    """The unit's properties; a failed read fails the module when required, else is None."""
    rc, out, err = host_run(module, ["systemctl", "show", "-p", ",".join(PROPERTIES), "--", unit],
                                      environ_update={"LC_ALL": "C"})
    if rc != 0 and required:
        module.fail_json(msg=f"systemctl show {unit} failed (rc {rc}): {err.strip()}")
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line) if rc == 0 else None


def clean(module, original, candidate_unit, promoted):
    """Nothing left to put back (put_back.left_to_put_back), or False where systemd cannot say. original: the
    unit's properties already read (None: unreadable)."""
    candidate = show(module, candidate_unit, required=False)
    return original is not None and candidate is not None and not promoted \
        and not left_to_put_back(candidate, original)[2]


def read_manifest(module, manifest_path):
    try:
        with open(manifest_path, encoding="utf-8") as handle:
            manifest = json.load(handle)
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"cannot read the snapshot {manifest_path}: {exc}")
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list):
        module.fail_json(msg=f"{manifest_path} is not a snapshot manifest (no files list): {str(manifest)[:200]}")
    return manifest


def main():
    module = AnsibleModule(argument_spec={
        "unit": {"type": "str", "required": True},
        "candidate_unit": {"type": "str", "required": True},
        "state_dir": {"type": "path", "required": True},
        "unit_dir": {"type": "path", "default": "/etc/systemd/system"}}, supports_check_mode=True)
    p = module.params
    folder = os.path.join(p["state_dir"], p["unit"])
    manifest_path = os.path.join(folder, "manifest.json")
    if os.path.exists(manifest_path):
        manifest = read_manifest(module, manifest_path)
        promoted = os.path.exists(os.path.join(folder, "promoted.json"))
        module.exit_json(changed=False, found=True, manifest=manifest, state={}, promoted=promoted,
                         clean=clean(module, show(module, p["unit"], required=False), p["candidate_unit"], promoted))
    state = show(module, p["unit"])
    problem = untouched_refusal(p["unit"], p["candidate_unit"],
                                os.path.lexists(os.path.join(p["unit_dir"], p["candidate_unit"])), state, manifest_path)
    if problem:
        module.fail_json(msg=problem, found=False, state=state)
    module.exit_json(changed=False, found=False, manifest=None, promoted=False, state=state,
                     clean=clean(module, state, p["candidate_unit"], False))


if __name__ == "__main__":
    main()
