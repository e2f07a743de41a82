"""A promoted unit watched over a window, the bake after a fleet promotion's batch: systemd's reading of the unit
(ActiveState, NRestarts, InvocationID) and one smoke completion each interval, and at the end the watched
invocation's journal judged by the engine's adapter. A unit that left active, restarted, began another invocation,
failed its smoke twice in a row or logged a crash fails the bake; so does a unit systemd cannot be asked about.
The window's two ends are kept (epoch seconds) with, when asked, the engine's /metrics read at each: what
serving_rollout/bake_metrics.py compares with the window before the promotion.
Read-only. Pure: commands through `run` (host_commands' runner), the smoke through `smoke`, time through `clock` and
`sleep`, all given."""

import time

from .host_commands import ModuleFailure
from .journal_reading import scan_journal

PROPERTIES = ("ActiveState", "SubState", "NRestarts", "InvocationID")
SMOKE_FAILURES_IN_A_ROW = 2  # one lost request is noise on a busy host; two in a row is a regression


def reading(run, unit):
    """systemd's reading of the unit now: {ActiveState, SubState, NRestarts, InvocationID}."""
    rc, out, err = run(["systemctl", "show", "-p", ",".join(PROPERTIES), "--", unit])
    if rc != 0:
        raise ModuleFailure(f"systemctl show {unit} failed (exit {rc}): {err.strip() or 'nothing on stderr'}")
    found = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return {key: found.get(key, "") for key in PROPERTIES}


def moved(start, now):
    """Why the unit at `now` is not the one watched from `start`, or None."""
    if now["ActiveState"] != "active":
        return f"the unit left active: {now['ActiveState']}/{now['SubState']}"
    if now["NRestarts"] != start["NRestarts"]:
        return f"the unit restarted: NRestarts {start['NRestarts']} -> {now['NRestarts']}"
    if now["InvocationID"] != start["InvocationID"]:
        return f"the unit began another invocation ({start['InvocationID'][:12]} -> {now['InvocationID'][:12]})"
    return None


def smoke_problem(samples):
    """The smoke's failure when the last SMOKE_FAILURES_IN_A_ROW samples all failed it, else None."""
    last = samples[-SMOKE_FAILURES_IN_A_ROW:]
    if len(last) == SMOKE_FAILURES_IN_A_ROW and all(s["smoke"] != "pass" for s in last):
        return f"the smoke completion failed {SMOKE_FAILURES_IN_A_ROW} times in a row: {last[-1]['smoke_reason']}"
    return None


def watch(run, smoke, p, clock=time.monotonic, sleep=time.sleep, metrics=None, wall=time.time):
    """The bake of p["unit"] for p["window_s"] seconds, a sample every p["interval_s"]; it ends early at the first
    reason to fail. {verdict: pass|fail, reasons, start, samples, journal, window: {start, end} (epoch s),
    metrics: {start, end} (the engine's readings at those moments, when `metrics` reads them)}."""
    start = reading(run, p["unit"])
    if start["ActiveState"] != "active":
        return {"verdict": "fail", "reasons": [f"the unit is not active at the bake's start: {start['ActiveState']}"],
                "start": start, "samples": [], "journal": None, "window": None, "metrics": None}
    first = metrics() if metrics else {"at": wall()}
    deadline, samples, reasons = clock() + p["window_s"], [], []
    while not reasons:
        now = reading(run, p["unit"])
        record = smoke()
        samples.append({**now, "at_s": round(p["window_s"] - (deadline - clock()), 1), "smoke": record["verdict"],
                        "smoke_reason": record["reason"]})
        reasons = [r for r in (moved(start, now), smoke_problem(samples)) if r]
        if reasons or clock() >= deadline:
            break
        sleep(min(p["interval_s"], max(0.0, deadline - clock())))
    last = metrics() if metrics else {"at": wall()}
    journal = scan_journal(run, {**p, "invocation_id": start["InvocationID"], "known_noise": [],
                                 "stop_requested": False, "extra_error_patterns": [], "excerpt_lines": 20,
                                 "change": {}, "proof": {}, "version_report": {}})
    if journal["crashed"]:
        reasons.append(f"the engine's journal shows a crash: {journal['crash']}: {journal['cause']}")
    return {"verdict": "fail" if reasons else "pass", "reasons": reasons, "start": start, "samples": samples,
            "journal": {key: journal.get(key) for key in ("crashed", "crash", "cause", "errors", "excerpt")},
            "window": {"start": first["at"], "end": last["at"]},
            "metrics": {"start": first, "end": last} if metrics else None}
