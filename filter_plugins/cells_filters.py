"""Filters for latency cells: a median, chunks merged into a cell, a progress line, and arms
regrouped into matched cells."""

import statistics

from ansible.errors import AnsibleFilterError

from serving_rollout.module_utils.conditions import median_conditions  # pure, shared with latency_cell on the host


def median(values):
    """Median of a non-empty list of numbers."""
    numbers = [v for v in (values or []) if isinstance(v, int | float)]
    if not numbers:
        raise AnsibleFilterError(f"median needs at least one number, got {values!r}")
    return statistics.median(numbers)


def merge_cell_chunks(chunks):
    """The chunks of one cell (latency_cell results, in order) as one cell: requests, failures
    and contract violations joined; telemetry kept per chunk with its request range."""
    if not isinstance(chunks, list) or not chunks or not all(isinstance(c, dict) and "requests" in c for c in chunks):
        raise AnsibleFilterError(f"merge_cell_chunks needs a non-empty list of latency_cell results, "
                                 f"got {chunks!r:.200}")
    keys = {(c.get("name"), c.get("arm")) for c in chunks}
    if len(keys) != 1:
        raise AnsibleFilterError(f"merge_cell_chunks got chunks of several cells: {sorted(keys, key=str)}")
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
    return cell


def ab_look(candidate, baseline, look, requests, chunk, bracket, alpha=0.05, cells=1, min_effect=0.02, rule=None):
    """Look `look` at a cell's candidate arm (merged so far) against its first baseline bracket, in a
    sequential cell of at most `requests` looked at every `chunk` with a first bracket of `bracket`
    (module_utils/abstats.sequential_look): stop now or go on, at the design's boundary."""
    from serving_rollout.module_utils.abstats import sequential_design, sequential_look

    if not isinstance(candidate, dict) or not isinstance(baseline, dict):
        raise AnsibleFilterError(f"ab_look needs two merged cells, got {candidate!r:.100} and {baseline!r:.100}")
    try:
        design = sequential_design(int(requests), int(chunk), int(bracket))
        return sequential_look(baseline["requests"], candidate["requests"], look, design, alpha, cells, min_effect,
                               rule)
    except ValueError as exc:
        raise AnsibleFilterError(f"ab_look: {exc}") from exc


def cell_progress(cell, of):
    """'request k of n, elapsed E s, running median E2E M ms' for a cell merged so far."""
    if not isinstance(cell, dict) or not isinstance(cell.get("requests"), list):
        raise AnsibleFilterError(f"cell_progress needs a merged cell, got {cell!r:.200}")
    answered = [r["e2e_s"] for r in cell["requests"] if r.get("error") is None and r.get("e2e_s") is not None]
    running = f"{statistics.median(answered) * 1000:.1f} ms" if answered else "n/a"
    return (f"request {len(cell['requests'])} of {of}, elapsed {cell.get('elapsed_s', 0.0):.1f} s, "
            f"running median E2E {running}")


def ab_cells(by_arm):
    """{arm: [cell...]} with arms baseline-1, candidate, baseline-2 -> matched cells for ab_verdict."""
    missing = [arm for arm in ("baseline-1", "candidate", "baseline-2") if arm not in (by_arm or {})]
    if missing:
        raise AnsibleFilterError(f"ab_cells needs arms baseline-1, candidate, baseline-2; missing {missing}")
    cells = []
    for first in by_arm["baseline-1"]:
        name = first["name"]
        arms = {arm: next((c for c in by_arm[arm] if c["name"] == name), None) for arm in by_arm}
        if any(cell is None for cell in arms.values()):
            raise AnsibleFilterError(f"cell {name!r} is missing from arms {[a for a, c in arms.items() if c is None]}")
        cells.append({"name": name,
                      "baseline": [arms["baseline-1"]["requests"], arms["baseline-2"]["requests"]],
                      "candidate": arms["candidate"]["requests"],
                      "sequential": arms["candidate"].get("sequential"),
                      "conditions": {"baseline": arms["baseline-1"].get("conditions"),
                                     "candidate": arms["candidate"].get("conditions")},
                      "disturbed": [f"{arm}: {d}" for arm in ("candidate", "baseline-2")
                                    for d in arms[arm].get("disturbed") or []],
                      "contract_violations": [dict(v, arm=arm) for arm, cell in arms.items()
                                              for v in cell["contract_violations"]]})
    return cells


class FilterModule:
    def filters(self):
        return {"median": median, "merge_cell_chunks": merge_cell_chunks, "cell_progress": cell_progress,
                "ab_cells": ab_cells, "ab_look": ab_look}
