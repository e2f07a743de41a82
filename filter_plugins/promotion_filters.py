"""Filter: what differs between the original a run measured and the original a host runs now."""

from ansible.errors import AnsibleFilterError


def original_identity_problems(identity, snapshot_files, loaded_unit=None):
    """Each difference between a run's recorded original (identity: {files: [{path, sha256}]}) and the host's
    current restore recipe (its snapshot's files) or systemd's loading of it; [] when they are one original."""
    if not isinstance(identity, dict) or not isinstance(snapshot_files, list):
        raise AnsibleFilterError(f"original_identity_problems needs a dict and a list, got {identity!r:.80}, "
                                 f"{snapshot_files!r:.80}")
    measured = {f.get("path"): f.get("sha256") for f in identity.get("files") or []}
    if not measured:
        return ["the run recorded no identity of the original it measured (its evidence predates that record)"]
    now = {f.get("path"): f.get("sha256") for f in snapshot_files}
    problems = [f"{path}: measured {(measured.get(path) or 'absent')[:12]}, now {(now.get(path) or 'absent')[:12]}"
                for path in sorted(set(measured) | set(now), key=str) if measured.get(path) != now.get(path)]
    if (loaded_unit or {}).get("NeedDaemonReload") == "yes":
        problems.append("systemd runs a version of the unit other than its files (NeedDaemonReload=yes)")
    return problems


class FilterModule:
    def filters(self):
        return {"original_identity_problems": original_identity_problems}
