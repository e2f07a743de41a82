"""rollout_watchdog's steps: the host-side watchdog (watchdog.py, with the unit_stop and put_back code it runs)
written beside the unit's state and started as a transient unit, or stopped. Commands through `run` (host_commands'
runner); a step that fails raises ModuleFailure with what was read until then (`was`)."""

import inspect
import json
import os
import sys

from . import put_back, unit_stop, watchdog
from .host_commands import ModuleFailure
from .host_files import write_atomic
from .unit_stop import active_state, stop_if_running


def _stop(run, unit, result):
    """Stop the watchdog; one that ended on its own meanwhile (a lock released, a lapsed lease) is stopped as
    asked (unit_stop.stop_if_running)."""
    problem = stop_if_running(run, unit)
    if problem:
        raise ModuleFailure(problem, **result)


def stopped(run, p, check_mode):
    """state=stopped: the watchdog stopped when it runs. {changed, was}."""
    was = active_state(run, p["watchdog_unit"]) or "inactive"
    running = was in ("active", "activating")
    if running and not check_mode:
        _stop(run, p["watchdog_unit"], {"was": was})
    return {"changed": running, "was": was}


def started(run, p, check_mode):
    """state=started: the script and its JSON settings written (a folder in their place refused first), an earlier
    holder's watchdog stopped, this one started with the host's Python (systemd-run --collect). {changed, was,
    script, lease}."""
    result = {"was": active_state(run, p["watchdog_unit"]) or "inactive"}
    folder = os.path.join(p["state_dir"], p["unit"])
    path, settings = os.path.join(folder, "watchdog.py"), os.path.join(folder, "watchdog.json")
    for found in (path, settings):
        if os.path.isdir(found):
            raise ModuleFailure(f"the watchdog goes to {found}, where a folder is (remove it); the original was not "
                                "stopped", **result)
    result["lease"] = watchdog.lease_path(p["lock_path"])
    if check_mode:
        return {"changed": True, "script": path, **result}
    cfg = watchdog.config(p["unit"], p["candidate_unit"], p["state_dir"], p["run_id"], p["lock_path"],
                          p["stop_timeout_s"], p["snapshot_files"], p["promotion"])
    try:
        write_atomic(path, watchdog.script([inspect.getsource(m) for m in (unit_stop, put_back, watchdog)]), 0o700)
        write_atomic(settings, json.dumps(cfg, indent=2, sort_keys=True) + "\n", 0o600)
    except OSError as exc:
        raise ModuleFailure(f"cannot write the watchdog {path}: {exc}", **result) from exc
    if result["was"] in ("active", "activating", "failed"):  # an earlier holder's, whose duty this one takes
        _stop(run, p["watchdog_unit"], result)
    argv = ["systemd-run", f"--unit={p['watchdog_unit']}", "--collect", "--quiet",
            f"--description=serving-rollout watchdog of {p['unit']}", "--", sys.executable, path, settings]
    rc, out, err = run(argv)
    if rc != 0:
        raise ModuleFailure(f"systemd-run --unit={p['watchdog_unit']} --collect failed (rc {rc}): "
                            f"{(err or out).strip()}", rc=rc, stdout=out, stderr=err, **result)
    return {"changed": True, "script": path, **result}
