"""One arm of the A/B, cell by cell, as the latency_arm action plugin runs it on the controller:
how many requests a cell of an arm gets, its chunks merged into one cell, the candidate's
sequential look, and the progress and summary lines (whether the run may go on is asked on the host
before each chunk: cells.py may_go_on).

Pure functions; ValueError names the bad value."""

import statistics

from serving_rollout.module_utils import engine_metrics
from serving_rollout.module_utils.conditions import median_conditions
from serving_rollout.module_utils.engine_adapters import log_failure


def cell_size(arm, requests, chunk, bracket, sequential):
    """Requests of one cell in `arm`: the candidate (or every arm when not sequential) its
    `requests`, the first baseline bracket `bracket`, the second one chunk (its drift check)."""
    for name, value in (("requests", requests), ("chunk", chunk), ("bracket", bracket)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer of at least 1, got {value!r}")
    if arm not in ("baseline-1", "candidate", "baseline-2"):
        raise ValueError(f"arm must be baseline-1, candidate or baseline-2, got {arm!r}")
    if arm == "candidate" or not sequential:
        return requests
    return min(chunk, bracket) if arm == "baseline-2" else bracket


def cell_shape(cell, requests, chunk, bracket, concurrency):
    """(requests, chunk, bracket, concurrency) of one cell: the arm's, or a throughput cell's own
    `concurrency` and `requests` (its first bracket two thirds of them), its chunks whole waves of
    `concurrency` requests at least `chunk` long, so every chunk keeps that many in flight."""
    own = cell.get("concurrency")
    if own is None and "requests" not in cell:
        return requests, chunk, bracket, concurrency
    concurrency = int(own if own is not None else concurrency)
    requests = int(cell.get("requests", requests))
    if concurrency < 1 or requests < 2:
        raise ValueError(f"cell {cell.get('name')!r}: concurrency must be >= 1 and requests >= 2, "
                         f"got {concurrency} and {requests}")
    chunk = concurrency * max(1, -(-chunk // concurrency))
    bracket = chunk * -(-max(chunk, -(-requests * 2 // 3)) // chunk)  # whole chunks: whole waves
    return requests, chunk, min(bracket, requests), concurrency


def merge_chunks(chunks):
    """The chunks of one cell (latency_cell results, in order) as one cell: requests, failures
    and contract violations joined; telemetry kept per chunk with its request range."""
    if not isinstance(chunks, list) or not chunks or not all(isinstance(c, dict) and "requests" in c for c in chunks):
        raise ValueError(f"merge_chunks needs a non-empty list of latency_cell results, got {chunks!r:.200}")
    keys = {(c.get("name"), c.get("arm")) for c in chunks}
    if len(keys) != 1:
        raise ValueError(f"merge_chunks got chunks of several cells: {sorted(keys, key=str)}")
    cell = {key: chunks[0][key] for key in ("name", "arm", "prompt_tokens_target", "concurrency") if key in chunks[0]}
    cell["requests"] = [r for c in chunks for r in c["requests"]]
    cell["failures"] = sum(c.get("failures", 0) for c in chunks)
    cell["contract_violations"] = [v for c in chunks for v in c.get("contract_violations", [])]
    cell["elapsed_s"] = sum(c.get("elapsed_s", 0.0) for c in chunks)
    cell["telemetry"] = [dict(c.get("telemetry") or {},
                              requests=[c["requests"][0]["index"], c["requests"][-1]["index"]])
                         for c in chunks if c["requests"]]
    cell["conditions"] = median_conditions([c.get("conditions") for c in chunks])
    cell["remeasured"] = [r for c in chunks for r in c.get("remeasured") or []]
    cell["disturbed"] = [c["disturbed"] for c in chunks if c.get("disturbed")]
    cell["chunk_e2e"] = [[r["e2e_s"] for r in c["requests"] if r.get("error") is None and r.get("e2e_s")]
                         for c in chunks]
    if any("engine_metrics" in c for c in chunks):
        cell["engine_metrics"] = engine_metrics.merge([c.get("engine_metrics") for c in chunks])
    return cell


def look_at(candidate, baseline, look, requests, chunk, bracket, alpha=0.05, cells=1, min_effect=0.02, rule=None):
    """Look `look` at a cell's candidate arm (merged so far) against its first baseline bracket, in a
    sequential cell of at most `requests` looked at every `chunk` with a first bracket of `bracket`
    (abstats.sequential_look): stop now or go on, at the design's boundary."""
    from .abstats import sequential_design, sequential_look

    if not isinstance(candidate, dict) or not isinstance(baseline, dict):
        raise ValueError(f"look_at needs two merged cells, got {candidate!r:.100} and {baseline!r:.100}")
    design = sequential_design(int(requests), int(chunk), int(bracket))
    return sequential_look(baseline["requests"], candidate["requests"], look, design, alpha, cells, min_effect, rule)


def progress(cell, of):
    """'request k of n, elapsed E s, running median E2E M ms' for a cell merged so far."""
    if not isinstance(cell, dict) or not isinstance(cell.get("requests"), list):
        raise ValueError(f"progress needs a merged cell, got {cell!r:.200}")
    answered = [r["e2e_s"] for r in cell["requests"] if r.get("error") is None and r.get("e2e_s") is not None]
    running = f"{statistics.median(answered) * 1000:.1f} ms" if answered else "n/a"
    return (f"request {len(cell['requests'])} of {of}, elapsed {cell.get('elapsed_s', 0.0):.1f} s, "
            f"running median E2E {running}")


def summary(cell):
    """'n=N, median TTFT .., median E2E .., prompt tokens .., F failed, V contract violations[, ...]'
    for a finished cell (its sequential look, re-measured chunks and remaining disturbance named)."""
    answered = [r for r in cell["requests"] if r.get("error") is None]
    parts = [f"n={len(cell['requests'])}"]

    def median_of(key, scale=1.0, unit=""):
        # a request that answered may still lack a figure (no token streamed before its end)
        values = [r[key] for r in answered if isinstance(r.get(key), int | float) and r[key]]
        return f"{statistics.median(values) * scale:.{1 if unit else 0}f}{unit}" if values else "n/a"

    if answered:
        parts += [f"median TTFT {median_of('ttft_s', 1000, ' ms')}", f"median E2E {median_of('e2e_s', 1000, ' ms')}",
                  f"prompt tokens {median_of('prompt_tokens')}"]
    parts += [f"{cell['failures']} failed", f"{len(cell['contract_violations'])} contract violations"]
    look = cell.get("sequential") or {}
    if look.get("stop"):
        parts.append(f"stopped at look {look['look']} of {look['looks']} (verdict clear)")
    if cell.get("remeasured"):
        parts.append(f"{len(cell['remeasured'])} chunk(s) re-measured")
    if cell.get("disturbed"):
        parts.append(f"still disturbed: {'; '.join(cell['disturbed'])}")
    return ", ".join(parts)


def endurance_judgement(cell, duration_s, drift_limit, hang_s):
    """The endurance cell's verdict: {ok, reason, chunks, requests, drift}. It fails on a request that
    failed (one with no answer within hang_s is a hang) and on E2E drift beyond drift_limit, the
    median of the last third of its chunks against the first third's (a leak or a slow-down that
    grows with time under load; an exit or restart stopped the cell before this)."""
    if not isinstance(cell, dict) or not isinstance(cell.get("requests"), list):
        raise ValueError(f"endurance_judgement needs a merged cell, got {cell!r:.200}")
    requests = cell["requests"]
    failed = [r for r in requests if r.get("error") is not None]
    out = {"duration_s": duration_s, "elapsed_s": round(cell.get("wall_s", cell.get("elapsed_s", 0.0)), 1),
           "requests": len(requests),
           "failures": len(failed), "drift": None, "drift_limit": drift_limit}
    if failed:
        error = str(failed[0]["error"])
        hung = "timed out" in error.lower() or "timeout" in error.lower()
        what = f"a hang: request {failed[0]['index']} got no answer within {hang_s:g} s" if hung else \
            f"request {failed[0]['index']} failed"
        return {**out, "ok": False, "reason": f"endurance: {what} ({error[:200]}); {len(failed)} of {len(requests)} "
                                              f"requests failed after {out['elapsed_s']:g} s under load"}
    chunks = cell.get("chunk_e2e") or []
    third = len(chunks) // 3
    if third >= 1:
        first = statistics.median(v for c in chunks[:third] for v in c)
        last = statistics.median(v for c in chunks[-third:] for v in c)
        out["drift"] = round(last / first - 1, 4) if first else None
    if out["drift"] is not None and out["drift"] > drift_limit:
        return {**out, "ok": False, "reason": f"endurance: E2E drifted {out['drift'] * 100:+.1f}% from the first third "
                                              f"of its {len(chunks)} chunks to the last (limit "
                                              f"{drift_limit * 100:.0f}%) over {out['elapsed_s']:g} s under load"}
    drift = "n/a (under three chunks)" if out["drift"] is None else f"{out['drift'] * 100:+.1f}%"
    return {**out, "ok": True, "reason": f"endurance: {len(requests)} requests over {out['elapsed_s']:g} s, none "
                                         f"failed, E2E drift {drift} (limit {drift_limit * 100:.0f}%)"}


def endurance_failure(verdict, scan):
    """Why the endurance cell fails, or None: its verdict (a hang, a failed request, drift) first, then the
    candidate's journal read after it (journal_scan's scan: a crash, or error lines new under load)."""
    if not verdict.get("ok"):
        return verdict.get("reason") or "endurance: failed"
    failure = log_failure(scan)  # a warning new under load counts too
    return f"endurance: {failure}" if failure else None


def stalled(chunk, timeout_s):
    """Why a chunk shows a hang, or None: every one of its requests ended at its timeout (the engine took them
    and answered none). Named after one chunk: at most chunk x timeout_s / concurrency after the stall began."""
    records = chunk.get("requests") or []
    if records and all(str(r.get("error") or "").startswith("TimeoutError") for r in records):
        return (f"the engine stalled (a hang): all {len(records)} requests of the last chunk timed out after "
                f"{float(timeout_s):g} s each")
    return None


ARMS = ("baseline-1", "candidate", "baseline-2")


def matched_cells(by_arm):
    """{arm: [cell...]} (each arm's latency_arm cells) -> the matched cells ab_verdict judges, one per cell of
    baseline-1: {name, baseline (both brackets' requests), candidate, sequential, conditions, disturbed,
    contract_violations}. ValueError names a missing arm or a cell missing from an arm."""
    missing = [arm for arm in ARMS if not isinstance((by_arm or {}).get(arm), list)]
    if missing:
        raise ValueError(f"the A/B verdict needs the cells of arms {list(ARMS)}; missing {missing}")
    cells = []
    for first in by_arm["baseline-1"]:
        arms = {arm: next((c for c in by_arm[arm] if c.get("name") == first.get("name")), None) for arm in ARMS}
        absent = [arm for arm, cell in arms.items() if cell is None or "requests" not in cell]
        if absent:
            raise ValueError(f"cell {first.get('name')!r} is missing from arms {absent}")
        cells.append({"name": first["name"],
                      "baseline": [arms["baseline-1"]["requests"], arms["baseline-2"]["requests"]],
                      "candidate": arms["candidate"]["requests"],
                      "sequential": arms["candidate"].get("sequential"),
                      "conditions": {"baseline": arms["baseline-1"].get("conditions"),
                                     "candidate": arms["candidate"].get("conditions")},
                      "disturbed": [f"{arm}: {d}" for arm in ("candidate", "baseline-2")
                                    for d in arms[arm].get("disturbed") or []],
                      "contract_violations": [dict(v, arm=arm) for arm, cell in arms.items()
                                              for v in cell.get("contract_violations") or []]})
    return cells
