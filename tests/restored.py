"""The restored state, checked with testinfra on any host (the lab host, a molecule instance):
the original's files byte for byte as adopted, active and enabled, no restart, nothing of the
candidate left. Used by molecule's verifier and the lab integration tests."""

STATE_DIR = "/var/lib/serving-rollout"


def candidate_of(unit):
    """sglang.service -> sglang-candidate.service; sglang@qwen.service -> sglang@qwen-candidate.service."""
    name, _, suffix = unit.rpartition(".")
    return f"{name}-candidate.{suffix}"


def restored_problems(host, unit, original_files):
    """[] when `unit` on the testinfra `host` is the original, restored; otherwise each problem.

    original_files: [{"path", "sha256"}] of the adopted original (recipes.json original_files)."""
    problems = []
    show = host.run(f"systemctl show -p ActiveState,UnitFileState,NRestarts {unit}").stdout
    state = dict(line.split("=", 1) for line in show.splitlines() if "=" in line)
    expected = {"ActiveState": "active", "UnitFileState": "enabled", "NRestarts": "0"}
    problems += [f"{unit} {key}={state.get(key)!r}, expected {value!r}" for key, value in expected.items()
                 if state.get(key) != value]
    if not original_files:
        problems.append("no adopted files to compare")
    for item in original_files or []:
        file = host.file(item["path"])
        if not file.exists:
            problems.append(f"{item['path']} is missing")
        elif file.sha256sum != item["sha256"]:
            problems.append(f"{item['path']} sha256 {file.sha256sum[:12]}, adopted {item['sha256'][:12]}")
    candidate = candidate_of(unit)
    if host.file(f"/etc/systemd/system/{candidate}").exists:
        problems.append(f"the candidate unit {candidate} is still installed")
    active = host.run(f"systemctl is-active {candidate}").stdout.strip()
    if active in ("active", "activating", "deactivating"):
        problems.append(f"the candidate {candidate} is {active}")
    if host.file(f"{STATE_DIR}/{unit}/candidate-env").exists:
        problems.append(f"the candidate's env copies are left in {STATE_DIR}/{unit}/candidate-env")
    if host.file(f"{STATE_DIR}/{unit}.lock").exists:
        problems.append(f"the lock {STATE_DIR}/{unit}.lock is still held")
    return problems
