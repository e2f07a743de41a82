"""serving_snapshot's logic: a verified copy of the original unit and its files on the host, kept whole or
not at all, never overwritten for an original that changed (library/serving_snapshot.py is its wrapper)."""

import difflib
import hashlib
import json
import os
import shutil
import time

from .host_commands import ModuleFailure
from .host_files import free_space, write_atomic
from .unit_recipe import parse_env_file, redact_unit_text


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def describe(path):
    try:
        info = os.stat(path)
        return {"path": path, "sha256": sha256_of(path), "size": info.st_size,
                "mode": f"{info.st_mode & 0o7777:04o}", "uid": info.st_uid, "gid": info.st_gid}
    except OSError as exc:
        raise ModuleFailure(f"cannot read original file {path}: {exc.strerror}") from exc


def read_text(path):
    try:
        with open(path, errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def both_versions(entry, current_path):
    """What changed, secrets kept out: a diff of unit text, or changed variable names."""
    before, after = read_text(entry.get("copy", "")), read_text(current_path)
    if entry.get("kind") == "EnvironmentFile":
        old, new = parse_env_file(before), parse_env_file(after)
        names = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        return f"{current_path}: variables changed: {', '.join(names) or 'formatting only'}"
    return "".join(difflib.unified_diff(redact_unit_text(before).splitlines(keepends=True),
                                        redact_unit_text(after).splitlines(keepends=True),
                                        fromfile=f"snapshot of {current_path}", tofile=f"{current_path} now"))


def write_snapshot(dest, current, manifest, manifest_path):
    """Copy the files, verify the copies and write the manifest, whole or not at all. The copies go to a staging
    folder first and are verified there, then replace the earlier copies in one rename, then the manifest is
    written; any failure (a full disk) takes this attempt's copies back and puts the earlier ones back, so no
    stray copy of a secret-bearing file stays. None, or what failed and - checked, not assumed - what is left."""
    files_dir, staging = os.path.join(dest, "files"), os.path.join(dest, f".files-{os.getpid()}")
    old, swapped, had_old = staging + ".old", False, os.path.isdir(os.path.join(dest, "files"))
    try:
        os.makedirs(dest, mode=0o700, exist_ok=True)
        os.chmod(dest, 0o700)
        os.makedirs(staging, mode=0o700)
        for index, info in enumerate(current):
            name = f"{index:02d}-{os.path.basename(info['path'])}"
            shutil.copyfile(info["path"], os.path.join(staging, name))
            os.chmod(os.path.join(staging, name), 0o600)
            if sha256_of(os.path.join(staging, name)) != info["sha256"]:
                raise ValueError(f"copy of {info['path']} does not match its source")
            manifest["files"].append({**info, "copy": os.path.join(files_dir, name)})
        if os.path.isdir(files_dir):
            os.rename(files_dir, old)
        os.rename(staging, files_dir)
        swapped = True
        write_atomic(manifest_path, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode(), 0o600)
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return f"{why} ({free_space(dest)}); {undo_snapshot(files_dir, staging, old, swapped, had_old)}"
    shutil.rmtree(old, ignore_errors=True)
    return None


def undo_snapshot(files_dir, staging, old, swapped, had_old):
    """Take a failed attempt's copies back and the earlier ones back in place; say what is left, as found."""
    shutil.rmtree(staging, ignore_errors=True)
    if swapped:  # files_dir holds this attempt's copies
        shutil.rmtree(files_dir, ignore_errors=True)
    try:
        if os.path.isdir(old) and not os.path.lexists(files_dir):
            os.rename(old, files_dir)
    except OSError:
        pass  # named below: the earlier copies stay under their temporary name
    left = [path for path in (staging, old) if os.path.lexists(path)]
    if swapped and os.path.lexists(files_dir) and not had_old:  # this attempt's copies, there was no earlier one
        left.append(files_dir)
    if left:
        return f"this attempt's copies could NOT all be removed: {', '.join(left)} (remove them by hand)"
    return "nothing of this attempt was left behind (checked); an earlier snapshot is as it was"


def take(unit, files, state, dest, replace=False, check_mode=False):
    """The snapshot of `files` in `dest` (serving_snapshot's result: changed, manifest, snapshot_path, both_versions):
    kept when it still matches, refused (ModuleFailure, both versions redacted) when the files changed unless
    `replace`, nothing written in check mode."""
    if not files or any("path" not in f for f in files):
        raise ModuleFailure(f"files must be a non-empty list of {{path, kind}}, got {files}")
    manifest_path = os.path.join(dest, "manifest.json")
    current = [{**describe(f["path"]), "kind": f.get("kind", "file")} for f in files]
    versions, old, changed_files = [], None, []  # both versions of each changed file, read before a replace
    if os.path.exists(manifest_path):
        with open(manifest_path) as handle:
            old = json.load(handle)
        old_hashes = {f["path"]: f["sha256"] for f in old["files"]}
        new_hashes = {f["path"]: f["sha256"] for f in current}
        if old_hashes == new_hashes:
            return {"changed": False, "manifest": old, "snapshot_path": dest}
        changed_files = [f"{path}: snapshot {old_hashes.get(path, 'absent')[:12]} now "
                         f"{new_hashes.get(path, 'absent')[:12]}"
                         for path in sorted(set(old_hashes) | set(new_hashes))
                         if old_hashes.get(path) != new_hashes.get(path)]
        versions = [both_versions(entry, entry["path"]) for entry in old["files"]
                    if old_hashes.get(entry["path"]) != new_hashes.get(entry["path"])]
        if not replace:
            raise ModuleFailure("the original changed since its snapshot; nothing was overwritten: "
                                + "; ".join(changed_files) + ". If the change is intended (a key rotation, an "
                                "operator's edit), adopt the current original as the new restore recipe with "
                                "playbooks/renew.yml (it shows both versions and needs no candidate running)",
                                both_versions=versions, snapshot=old, current=current, changed_files=changed_files)
    manifest = {"schema": "serving-rollout.snapshot/v1", "unit": unit,
                "taken_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "state": {k: state.get(k) for k in ("UnitFileState", "ActiveState", "FragmentPath", "DropInPaths")
                          if k in state},
                "files": []}
    if old is not None:  # replaced: what the earlier restore recipe was, for the record
        manifest["replaced"] = {"taken_at": old.get("taken_at"),
                                "files": [{"path": f["path"], "sha256": f["sha256"]} for f in old["files"]],
                                "changed": changed_files}
    if check_mode:
        return {"changed": True, "manifest": {**manifest, "files": current}, "snapshot_path": dest,
                "both_versions": versions}
    problem = write_snapshot(dest, current, manifest, manifest_path)
    if problem:
        raise ModuleFailure(f"snapshot not taken in {dest}: {problem}; the original was not touched")
    return {"changed": True, "manifest": manifest, "snapshot_path": dest, "both_versions": versions}
