"""snapshot_read's steps (library/snapshot_read.py is its wrapper): `run` is host_commands'
runner; a failure is ModuleFailure."""

import json
import os

from .host_commands import ModuleFailure
from .put_back import left_to_put_back, untouched_refusal

PROPERTIES = ("ActiveState", "UnitFileState", "LoadState", "NRestarts", "InvocationID", "NeedDaemonReload")


def show(run, unit, required=True):
    """The unit's properties; a failed read fails the module when required, else is None."""
    rc, out, err = run(["systemctl", "show", "-p", ",".join(PROPERTIES), "--", unit])
    if rc != 0 and required:
        raise ModuleFailure(f"systemctl show {unit} failed (rc {rc}): {err.strip()}")
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line) if rc == 0 else None


def clean(run, original, candidate_unit, promoted):
    """Nothing left to put back (put_back.left_to_put_back), or False where systemd cannot say. original: the
    unit's properties already read (None: unreadable)."""
    candidate = show(run, candidate_unit, required=False)
    return original is not None and candidate is not None and not promoted \
        and not left_to_put_back(candidate, original)[2]


def read_manifest(manifest_path):
    try:
        with open(manifest_path, encoding="utf-8") as handle:
            manifest = json.load(handle)
    except (OSError, ValueError) as exc:
        raise ModuleFailure(f"cannot read the snapshot {manifest_path}: {exc}") from exc
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list):
        raise ModuleFailure(f"{manifest_path} is not a snapshot manifest (no files list): {str(manifest)[:200]}")
    return manifest


def promoted_run_id(path):
    """The run whose promotion the record names ('unreadable' for a record that cannot be read: still a promotion)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return str(json.load(handle).get("run_id") or "unreadable")
    except (OSError, ValueError, AttributeError):
        return "unreadable"


def read_snapshot(run, p):
    """snapshot_read's answer (its arguments as p): the restore recipe, whether a promotion is to undo and whether
    anything is left to put back; with no snapshot, proof that the host was never changed by this tool (else
    refused, naming why)."""
    folder = os.path.join(p["state_dir"], p["unit"])
    manifest_path = os.path.join(folder, "manifest.json")
    if os.path.exists(manifest_path):
        manifest = read_manifest(manifest_path)
        promoted = os.path.exists(os.path.join(folder, "promoted.json"))
        return {"changed": False, "found": True, "manifest": manifest, "state": {}, "promoted": promoted,
                "promoted_run_id": promoted_run_id(os.path.join(folder, "promoted.json")) if promoted else None,
                "clean": clean(run, show(run, p["unit"], required=False), p["candidate_unit"], promoted)}
    state = show(run, p["unit"])
    problem = untouched_refusal(p["unit"], p["candidate_unit"],
                                os.path.lexists(os.path.join(p["unit_dir"], p["candidate_unit"])), state, manifest_path)
    if problem:
        raise ModuleFailure(problem, found=False, state=state)
    return {"changed": False, "found": False, "manifest": None, "promoted": False, "state": state,
            "clean": clean(run, state, p["candidate_unit"], False)}
