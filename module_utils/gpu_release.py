"""What a wait for free GPUs says: one line for the console, and the reason a run cannot go on (held
by processes, or wedged: busy with no process). Pure functions of library/gpu_free.py's readings."""


def release_summary(waited_s, terminated):
    """The console line: how long the wait took and which of the stopped engine's processes were ended
    (empty when the GPUs were free at once)."""
    parts = []
    if waited_s >= 1:
        parts.append(f"waited {waited_s:.1f} s for GPU workers to exit")
    if terminated:
        named = ", ".join(f"{p['pid']} by {p['ended_by']}" for p in terminated if "ended_by" in p)
        parts.append(f"terminated {len(terminated)} process(es) of the stopped engine still holding the GPUs: {named}")
    return "; ".join(parts)


def release_problem(source, left, foreign, wedged, timeout_s):
    """Why the GPUs are not free for the next engine, or None: processes still holding them (the foreign
    ones are named, never touched), or GPUs busy with no process (only a reset frees those)."""
    if left:
        held = ", ".join(f"{p.get('pid')} ({p.get('cmdline') or p.get('unit') or 'gpu ' + str(p.get('gpu'))})"
                         for p in left)
        message = f"GPUs still held after {timeout_s:g} s ({source}): {held}"
        if foreign:
            message += (f"; not the engine's, so not touched: {', '.join(str(p['pid']) for p in foreign)}. "
                        "Stop them (kill PID), then run rollback.yml, which starts the original once the GPUs are free")
        return message
    if wedged:
        return (f"GPU(s) wedged: {', '.join(str(g['index']) for g in wedged)} busy "
                f"({', '.join(str(g['util_pct']) for g in wedged)} % utilisation, "
                f"{', '.join(str(round(g['power_w'])) for g in wedged)} W) with no process after the engine stopped; "
                "nothing is started on them: a GPU reset is needed (nvidia-smi -r, or a reboot), then rollback.yml")
    return None
