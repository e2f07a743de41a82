"""What a restore has to do, read from systemd's properties of the units and the tool's state folder.
Pure functions: the original_restore and snapshot_renew actions and the snapshot_read module ask systemd and
the host, these decide."""

import os

from .unit_stop import GONE


def candidate_present(candidate):
    """Whether anything of a candidate is left, from its unit's properties: loaded, or still running. A candidate
    whose unit file was deleted while it ran is not-found but still active: systemd keeps running it, so it
    counts whatever its load state."""
    return (candidate.get("LoadState", "not-found") == "loaded"
            or candidate.get("ActiveState", "inactive") not in GONE)


def restore_lease(args):
    """The lease a restore renews before it acts: its own worst case (the stop's deadline, the wait for free GPUs
    and the stragglers' grace, the start's deadline) beyond the run's lease, so the host's watchdog never acts
    beside a living restore, and finishes one whose controller died."""
    return int(sum(float(args[key]) for key in ("stop_timeout_s", "gpu_free_timeout_s", "straggler_grace_s",
                                                "ready_timeout_s", "lease_s")))


def left_to_put_back(candidate, original):
    """(candidate present, original restarted or not what its files say, anything to do) from both units'
    properties. An original whose files changed after systemd loaded them (NeedDaemonReload=yes) runs something
    other than its files: it is reloaded and restarted like one that restarted on its own."""
    present = candidate_present(candidate)
    restarted = str(original.get("NRestarts", "0")) != "0" or original.get("NeedDaemonReload") == "yes"
    return present, restarted, present or restarted or original.get("ActiveState") != "active"


def untouched_refusal(unit, candidate_unit, candidate_installed, state, manifest_path):
    """Why a host without a snapshot cannot be called untouched, or None. Without a snapshot this tool never
    changed the unit, so there is nothing to restore - unless a candidate unit is installed (the snapshot was
    lost mid-run) or the unit does not serve (something else is wrong, and rollback must not say 'fine')."""
    if candidate_installed:
        return (f"{candidate_unit} is installed but there is no snapshot of {unit} ({manifest_path} is missing): "
                "nothing to restore from")
    if state.get("ActiveState") != "active" or state.get("UnitFileState") != "enabled":
        return (f"no snapshot of {unit} on this host (serving-rollout never changed it) and it is not serving: "
                f"ActiveState={state.get('ActiveState')} UnitFileState={state.get('UnitFileState')} "
                f"LoadState={state.get('LoadState')}")
    if state.get("NeedDaemonReload") == "yes":
        return (f"no snapshot of {unit} on this host (serving-rollout never changed it), and systemd runs a version "
                f"of it other than its files (NeedDaemonReload=yes, invocation {state.get('InvocationID')}): what "
                "serves is not what the files say. Nothing was changed; `systemctl daemon-reload && systemctl "
                f"restart {unit}` makes them one, then run rollback.yml again to prove it")
    return None


def candidate_paths(candidate_unit, unit, state_dir):
    """(unit paths systemd reads, the candidate's own copies): all a candidate leaves on a host."""
    name = candidate_unit[:-len(".service")] if candidate_unit.endswith(".service") else candidate_unit
    quadlet = f"/etc/containers/systemd/{name}.container"
    units = [f"/etc/systemd/system/{candidate_unit}", f"/etc/systemd/system/{candidate_unit}.d",
             quadlet, f"{quadlet}.d"]
    return units, [os.path.join(state_dir, unit, "candidate-env")]


def phase_record(unit, candidate_unit, phase, run_id):
    """The state file's content: the run id only while a run is under way."""
    record = {"unit": unit, "candidate": candidate_unit, "phase": phase}
    return record if phase == "restored" else dict(record, run_id=run_id)
