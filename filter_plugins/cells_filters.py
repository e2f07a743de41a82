"""The latency cells filter: each arm's cells out of its registered loop. (An arm's chunks are
merged and looked at, and the arms matched for the verdict, by serving_rollout/play/arm.py.)"""

from ansible.errors import AnsibleFilterError


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


class FilterModule:
    def filters(self):
        return {"arm_cells": arm_cells}
