"""Filter: the records of gates that cannot be meaningful on a host's model (never run, never passed)."""

from ansible.errors import AnsibleFilterError


def not_qualified_records(not_qualified, gates, phase):
    """One record per gate of `gates` named in `not_qualified` ({gate: why}): verdict
    not-qualified with the reason, as a gate record shows it (module_utils/gates.py)."""
    if not isinstance(not_qualified, dict) or not all(isinstance(v, str) and v.strip() for v in not_qualified.values()):
        raise AnsibleFilterError("not_qualified must map each gate to the reason it cannot qualify; "
                                 f"got {not_qualified!r}")
    if not isinstance(gates, list):
        raise AnsibleFilterError(f"gates must be a list of gate names; got {gates!r}")
    return [{"gate": gate, "phase": phase, "verdict": "not-qualified",
             "reason": f"not qualified: {not_qualified[gate]}", "inputs": {}, "observed": {}, "expected": None}
            for gate in gates if gate in not_qualified]


class FilterModule:
    def filters(self):
        return {"not_qualified_records": not_qualified_records}
