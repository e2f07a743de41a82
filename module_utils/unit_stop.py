"""Stop a systemd unit within the tool's own deadline, whatever the engine does with SIGTERM.

A vLLM API server does not exit on SIGTERM while a client stream is open (it waits for the
connections to close, whatever its shutdown timeout), and a unit may say TimeoutStopSec=infinity:
a stop that trusts the engine can hang. This one asks systemd to stop the unit (SIGTERM, the
unit's own ExecStop), waits up to the deadline, then has systemd SIGKILL every process of the
unit, and if something still lives names it.
"""

import time

from .unit_recipe import redact_argv

GONE = ("inactive", "failed")


def active_state(run, unit):
    """The unit's ActiveState ('' when systemd cannot say). run(argv) -> (rc, stdout, stderr)."""
    _, out, _ = run(["systemctl", "show", "-p", "ActiveState", "--value", "--", unit])
    return out.strip()


# What makes an active engine the same one that became ready (engine_changed; unit_identity reads them).
SAME_ENGINE = ("MainPID", "InvocationID", "NRestarts")


def unit_identity(run, unit):
    """systemd's ActiveState and SAME_ENGINE properties of the unit now: what engine_changed compares with the
    identity the candidate had when it became ready."""
    _, out, _ = run(["systemctl", "show", "-p", ",".join(("ActiveState",) + SAME_ENGINE), "--", unit])
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def engine_changed(identity, status, when="cells"):
    """Why the candidate engine no longer is the one that became ready (exited or restarted:
    a crash of the run, never a slower arm), else None. `identity` and `status` are systemd's
    ActiveState, MainPID, InvocationID, NRestarts at ready and now."""
    same = status.get("ActiveState") == "active" and all(
        str(status.get(key)) == str(identity.get(key)) for key in SAME_ENGINE)
    if same:
        return None
    what = "exited" if status.get("ActiveState") != "active" else "restarted"
    return (f"the candidate engine {what} during the {when}: ActiveState {status.get('ActiveState')}, "
            f"MainPID {identity.get('MainPID')} -> {status.get('MainPID')}, "
            f"NRestarts {identity.get('NRestarts')} -> {status.get('NRestarts')}, "
            f"InvocationID {str(identity.get('InvocationID'))[:12]} -> {str(status.get('InvocationID'))[:12]}")


def stop_if_running(run, unit):
    """`systemctl stop unit`; None when it is stopped, else the error. A unit that ended on its own between the
    caller's read and this stop is stopped too: a transient unit (systemd-run --collect, the watchdog) is then
    no longer loaded and systemctl says so with rc 5."""
    rc, out, err = run(["systemctl", "stop", "--", unit])
    if rc == 0:
        return None
    state = active_state(run, unit)
    if state in GONE or not state:
        return None
    return f"systemctl stop {unit} failed (rc {rc}, now {state}): {(err or out).strip()}"


def stop(unit, deadline_s, run, kill_wait_s=10.0, clock=time.monotonic, sleep=time.sleep, interval_s=0.5):
    """{changed, stopped, escalated, how, elapsed_s, state}. run(argv) -> (rc, stdout, stderr)."""

    def state():
        return active_state(run, unit)

    started = clock()
    before = state()
    if before in GONE or not before:
        return {"changed": False, "stopped": True, "escalated": False, "elapsed_s": 0.0, "state": before,
                "how": f"{unit} was already {before or 'unknown'}"}
    rc, _, err = run(["systemctl", "stop", "--no-block", "--", unit])
    if rc != 0:
        return {"changed": False, "stopped": False, "escalated": False, "elapsed_s": clock() - started,
                "state": before, "how": f"systemctl stop {unit} failed: {err.strip()}"}

    def wait(limit):
        while True:
            now = state()
            if now in GONE:
                return now
            if clock() - started >= limit:
                return now
            sleep(interval_s)

    now = wait(deadline_s)
    if now in GONE:
        return {"changed": True, "stopped": True, "escalated": False, "elapsed_s": clock() - started, "state": now,
                "how": f"stopped in {clock() - started:.1f} s"}
    run(["systemctl", "kill", "--kill-whom=all", "--signal=SIGKILL", "--", unit])
    now = wait(deadline_s + kill_wait_s)
    took = clock() - started
    if now in GONE:
        return {"changed": True, "stopped": True, "escalated": True, "elapsed_s": took, "state": now,
                "how": f"{unit} ignored its stop for {deadline_s:.0f} s (an engine waiting for open streams "
                       f"does); killed (SIGKILL to every process of the unit), stopped in {took:.1f} s"}
    return {"changed": True, "stopped": False, "escalated": True, "elapsed_s": took, "state": now,
            "how": f"{unit} still {now} {took:.0f} s after its stop and a SIGKILL of every process"}


def unit_processes(run, unit):
    """pid and redacted command line of every process in the unit's cgroup."""
    _, group, _ = run(["systemctl", "show", "-p", "ControlGroup", "--value", "--", unit])
    found = []
    try:
        with open(f"/sys/fs/cgroup{group.strip()}/cgroup.procs") as handle:
            pids = [int(x) for x in handle.read().split()]
    except (OSError, ValueError):
        return found
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                argv = handle.read().decode(errors="replace").strip("\0").split("\0")
        except OSError:
            continue
        found.append({"pid": pid, "cmdline": " ".join(redact_argv(argv))[:200]})
    return found
