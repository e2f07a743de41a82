"""Filters for latency cells: a median, and arms regrouped into matched cells. (An arm's chunks are
merged and looked at by serving_rollout/play/arm.py, which the latency_arm action runs.)"""

import statistics

from ansible.errors import AnsibleFilterError


def median(values):
    """Median of a non-empty list of numbers."""
    numbers = [v for v in (values or []) if isinstance(v, int | float)]
    if not numbers:
        raise AnsibleFilterError(f"median needs at least one number, got {values!r}")
    return statistics.median(numbers)


def arm_cells(measured):
    """{arm: latency_arm's registered loop result, or None} -> {arm: [cell...]} for the arms that were measured to
    the end (an arm skipped, failed part-way or never reached is left out, as if never measured)."""
    if not isinstance(measured, dict):
        raise AnsibleFilterError(f"arm_cells needs {{arm: registered result}}, got {measured!r}")
    done = {}
    for arm, result in measured.items():
        if not isinstance(result, dict) or result.get("failed") or result.get("skipped") or "results" not in result:
            continue
        cells = [item.get("cell") for item in result["results"]]
        if any(not isinstance(cell, dict) for cell in cells):
            raise AnsibleFilterError(f"arm_cells: arm {arm!r} has a result without its cell: {result['results']!r}")
        done[arm] = cells
    return done


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
        return {"median": median, "ab_cells": ab_cells, "arm_cells": arm_cells}
