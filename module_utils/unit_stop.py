"""Stop a systemd unit within the tool's own deadline, whatever the engine does with SIGTERM.

A vLLM API server does not exit on SIGTERM while a client stream is open (it waits for the
connections to close, whatever its shutdown timeout), and a unit may say TimeoutStopSec=infinity:
a stop that trusts the engine can hang. This one asks systemd to stop the unit (SIGTERM, the
unit's own ExecStop), waits up to the deadline, then has systemd SIGKILL every process of the
unit, and if something still lives names it.
"""

import time

GONE = ("inactive", "failed")


def active_state(run, unit):
    """The unit's ActiveState ('' when systemd cannot say). run(argv) -> (rc, stdout, stderr)."""
    _, out, _ = run(["systemctl", "show", "-p", "ActiveState", "--value", "--", unit])
    return out.strip()


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
