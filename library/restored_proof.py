#!/usr/bin/python
"""Documentation of the restored_proof action (action_plugins/restored_proof.py runs it on the controller)."""

DOCUMENTATION = r"""
---
module: restored_proof
short_description: Prove the original is back - the same unit, file for file, serving cleanly and answering
description:
  - Runs on the controller (an action plugin) and runs each check on the host as its own module, in order;
    the first that fails ends the proof with its message, and what was read until then is returned.
  - systemd (systemd_service) - the unit is active, enabled, unrestarted (NRestarts 0), from C(fragment_path),
    and in a new invocation when C(invocation_before) is given (this run stopped it).
  - Every file of C(files) is byte for byte its snapshot (stat, sha256).
  - A container (C(runtime) docker or podman with C(container)) has its name and runs C(image), as
    C(runtime) inspect reports them.
  - The restored invocation's journal (journal_scan) shows no crash and no error new against the original's
    own start.
  - Each of C(gates) (engine_gate, phase restored, all in one module run) passes; the first that failed is named.
  - Read-only - it changes nothing on the host; the gates send a few requests to the engine.
options:
  unit: {description: The restored original unit., type: str, required: true}
  fragment_path: {description: The unit file systemd must load it from (the snapshot's)., type: str, required: true}
  invocation_before: {description: "The invocation before this run stopped it; empty - not stopped by this run.", type: str, default: ""}
  files: {description: "The snapshot's files (path, sha256).", type: list, elements: dict, required: true}
  runtime: {description: "The original's runtime (process, docker, podman).", type: str, default: process}
  container: {description: The original's container name (empty - none)., type: str, default: ""}
  image: {description: The original recipe's image reference., type: str}
  engine: {description: The engine (its adapter reads the journal)., type: str, required: true}
  known_noise: {description: "Error signatures of the original's own start (journal_scan).", type: list, elements: str, default: []}
  extra_error_patterns: {description: The operator's extra error patterns (journal_scan)., type: list, elements: str, default: []}
  env_files: {description: "The unit's EnvironmentFiles (secret values redacted; the API key read there).", type: list, elements: path, default: []}
  base_url: {description: The engine's URL., type: str, required: true}
  model: {description: The served model's name., type: str, required: true}
  api_key_var: {description: The variable holding the API key in the EnvironmentFiles., type: str}
  gate_timeout_s: {description: Each gate's deadline in seconds., type: float, required: true}
  gates: {description: "The gates to pass (smoke, json, ...).", type: list, elements: str, default: []}
  keys: {description: "systemd properties returned in C(state) beside those checked (never the rest - Environment can hold secrets).", type: list, elements: str, default: []}
extends_documentation_fragment: [engine_connection]
author: serving-rollout
"""

EXAMPLES = r"""
- name: Prove the restoration
  restored_proof:
    unit: sglang.service
    fragment_path: /etc/systemd/system/sglang.service
    files: "{{ _rollout_snapshot_manifest.files }}"
    engine: sglang
    base_url: http://127.0.0.1:30000
    model: Qwen/Qwen3-235B-A22B-Instruct-2507-FP8
    gate_timeout_s: 120
    gates: [smoke, json]
  register: rollout_restored_proof
"""

RETURN = r"""
proven:
  description: Whether every check passed.
  type: bool
  sample: true
  returned: always
state:
  description: The unit's systemd properties the proof checks, and C(keys).
  type: dict
  sample: {ActiveState: active, UnitFileState: enabled, NRestarts: '0'}
  returned: always
files:
  description: The snapshot's file entries proven byte for byte.
  type: list
  sample: [{path: /etc/systemd/system/sglang.service, same: true}]
  elements: dict
  returned: always
container:
  description: The container's inspect line (name, image id, image reference), or null.
  type: str
  sample: ''
  returned: always
scan:
  description: The journal's reading (journal_scan's scan), or null when the proof ended before it.
  type: dict
  sample: {crashed: false, errors: []}
  returned: always
gates:
  description: The gates' records, in order.
  type: list
  sample: [{gate: smoke, verdict: pass}]
  elements: dict
  returned: always
"""

if __name__ == "__main__":
    raise SystemExit("restored_proof runs on the controller as an action plugin (action_plugins/restored_proof.py)")
