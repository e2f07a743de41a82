"""Installing a managed unit's rendered files so that a failure never leaves a half-installed unit.

Before the first file changes, every file the install writes or removes is copied into a keep folder
and each copy's sha256 checked against its source (a verified copy); a file that did not exist is
recorded as absent. A failure while writing (a full disk, a read-only folder) puts every file back from
that copy, then raises. The role restores from the same copy when the unit then fails to restart.
"""

import hashlib
import json
import os
import shutil

from .host_files import write_atomic
from .unit_recipe import redact_unit_text

MANIFEST = "manifest.json"


class InstallFailed(Exception):
    """The install failed; `restored` lists the files put back from the verified copy."""

    def __init__(self, message, restored):
        super().__init__(message)
        self.restored = restored


def sha256_bytes(data):
    return hashlib.sha256(data).hexdigest()


def read_bytes(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (FileNotFoundError, NotADirectoryError):  # absent (a parent that is a file: absent too)
        return None


def plan(files, remove):
    """What installing `files` ({path: text}) and removing `remove` (paths) changes on this host:
    {"write": [paths whose text differs or that are missing], "remove": [paths in remove that exist]}."""
    write = [path for path, text in files.items() if read_bytes(path) != text.encode()]
    gone = [path for path in remove if path not in files and os.path.lexists(path)]
    return {"write": write, "remove": gone}


def text_of(path):
    data = read_bytes(path)
    return "" if data is None else data.decode(errors="replace")


def diffs(changes, files):
    """Ansible's before/after per file the plan changes, unit text redacted on both sides (an adopted
    hand-written unit may hold a secret inline; the render holds only references)."""
    shown = [{"before_header": path, "after_header": path, "before": redact_unit_text(text_of(path)),
              "after": redact_unit_text(files[path])} for path in changes["write"]]
    return shown + [{"before_header": path, "after_header": f"{path} (removed)",
                     "before": redact_unit_text(text_of(path)), "after": ""} for path in changes["remove"]]


def keep_copy(paths, keep):
    """A verified copy of `paths` in `keep` (replacing an earlier one): each file's bytes, sha256, mode and
    owner, or that it was absent, in keep/manifest.json. Raises OSError when a copy does not verify."""
    staging = keep.rstrip("/") + ".new"
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(os.path.join(staging, "files"), mode=0o700)
    entries = []
    for index, path in enumerate(paths):
        data = read_bytes(path)
        if data is None:
            entries.append({"path": path, "existed": False})
            continue
        status = os.stat(path)
        copy = os.path.join(staging, "files", str(index))
        write_atomic(copy, data, 0o600)
        if sha256_bytes(read_bytes(copy)) != sha256_bytes(data):
            raise OSError(f"the copy of {path} in {copy} does not match it")
        entries.append({"path": path, "existed": True, "copy": os.path.join("files", str(index)),
                        "sha256": sha256_bytes(data), "mode": status.st_mode & 0o7777,
                        "owner": [status.st_uid, status.st_gid]})
    write_atomic(os.path.join(staging, MANIFEST), json.dumps({"files": entries}, indent=2) + "\n", 0o600)
    shutil.rmtree(keep, ignore_errors=True)
    os.replace(staging, keep)
    return entries


def restore(keep):
    """Put every file of the verified copy in `keep` back as it was (an absent one removed); the paths
    that changed. Each restored file is checked against the copy's sha256."""
    with open(os.path.join(keep, MANIFEST)) as handle:
        entries = json.load(handle)["files"]
    restored = []
    for entry in entries:
        path = entry["path"]
        if not entry["existed"]:
            if os.path.lexists(path):
                os.unlink(path)
                restored.append(path)
            continue
        data = read_bytes(os.path.join(keep, entry["copy"]))
        if data is None or sha256_bytes(data) != entry["sha256"]:
            raise OSError(f"the kept copy of {path} in {keep} is missing or does not match its sha256")
        if read_bytes(path) == data:
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomic(path, data, entry["mode"], tuple(entry["owner"]))
        if sha256_bytes(read_bytes(path)) != entry["sha256"]:
            raise OSError(f"{path} does not match its kept copy after the restore")
        restored.append(path)
    return restored


def install(files, changes, keep, mode=0o644):
    """Carry out `changes` (plan(files, remove)): write those of `files` and remove those paths after a
    verified copy of all of them is in `keep`; on any failure put them back from it and raise InstallFailed
    naming the failure. Returns the plan carried out."""
    if not changes["write"] and not changes["remove"]:
        return changes
    keep_copy(changes["write"] + changes["remove"], keep)
    try:
        for path in changes["write"]:
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
            write_atomic(path, files[path], mode)
        for path in changes["remove"]:
            os.unlink(path)
    except OSError as exc:
        failed = f"{exc.filename or path}: {exc.strerror or exc}"
        try:
            restored = restore(keep)
        except OSError as again:
            raise InstallFailed(f"installing failed at {failed}, and the restore failed too: {again}; the verified "
                                f"copy is in {keep}", []) from again
        raise InstallFailed(f"installing failed at {failed}; every file was put back from the verified copy in "
                            f"{keep} (restored: {', '.join(restored) or 'none had changed yet'})", restored) from exc
    return changes
