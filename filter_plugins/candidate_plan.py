"""Filters that read a candidate plan (anvil-serving.followup-candidate-plan/v1)."""

from ansible.errors import AnsibleFilterError

PLAN_SCHEMA = "anvil-serving.followup-candidate-plan/v1"
# Known candidate ids -> the one control each changes, and the evidence each needs first.
KNOWN = {
    "p2p": {"requires": ["capture", "peer_path"]},
    "cumem": {"requires": ["capture"]},
    "custom-all-reduce": {"requires": ["peer_path"]},
    "scheduler-and-speculation": {"requires": ["transport_stable"]},
    "custom": {"requires": []},
}
EVIDENCE_TEXT = {
    "capture": "a capture of the host's IOMMU/ACS/NVML/NCCL facts (capture.yml)",
    "peer_path": "a peer-path proof with verdict ok (peer-path.yml)",
    "transport_stable": "a transport candidate decided and stable (serving_recipe_evidence.transport_stable)",
}


def candidate_plan_errors(plan):
    """Every schema error, each naming its path in the document; [] when the plan is valid."""
    if not isinstance(plan, dict):
        return [f"$: the plan must be a JSON object, got {type(plan).__name__}"]
    errors = []
    if plan.get("schema") != PLAN_SCHEMA:
        errors.append(f"$.schema: expected {PLAN_SCHEMA!r}, got {plan.get('schema')!r}")
    candidates = plan.get("ordered_candidates")
    if not isinstance(candidates, list) or not candidates:
        errors.append("$.ordered_candidates: must be a non-empty list")
        candidates = []
    seen = set()
    for n, entry in enumerate(candidates):
        where = f"$.ordered_candidates[{n}]"
        if not isinstance(entry, dict):
            errors.append(f"{where}: must be an object")
            continue
        for field in ("id", "change", "gate"):
            if not isinstance(entry.get(field), str) or not entry.get(field):
                errors.append(f"{where}.{field}: must be a non-empty string")
        if entry.get("id") in seen:
            errors.append(f"{where}.id: duplicate id {entry['id']!r}")
        seen.add(entry.get("id"))
        prerequisites = entry.get("prerequisites", [])
        if not isinstance(prerequisites, list) or not all(isinstance(p, str) for p in prerequisites):
            errors.append(f"{where}.prerequisites: must be a list of strings")
    controls = plan.get("comparison_controls", [])
    if not isinstance(controls, list) or not all(isinstance(c, str) for c in controls):
        errors.append("$.comparison_controls: must be a list of strings")
    return errors


def _change_for(candidate_id, custom, p2p_mode):
    if candidate_id == "p2p":
        if p2p_mode not in ("set0", "drop"):
            raise AnsibleFilterError(f"p2p_mode must be set0 or drop, got {p2p_mode!r}")
        return {"kind": "env", "name": "NCCL_P2P_DISABLE", "value": "0" if p2p_mode == "set0" else None}
    if candidate_id == "cumem":
        return {"kind": "env", "name": "NCCL_CUMEM_ENABLE", "value": None}
    if candidate_id == "custom-all-reduce":
        return {"kind": "arg", "name": "--disable-custom-all-reduce", "value": None}
    if candidate_id == "scheduler-and-speculation":
        if set(custom) == {"chunked_prefill_size"}:
            return {"kind": "arg", "name": "--chunked-prefill-size", "value": str(custom["chunked_prefill_size"])}
        if set(custom) == {"speculative"} and isinstance(custom["speculative"], dict):
            return {"kind": "speculative", "value": custom["speculative"]}
        raise AnsibleFilterError("scheduler-and-speculation needs exactly one of {chunked_prefill_size: N} "
                                 f"or {{speculative: {{--speculative-*: value}}}}, got {custom!r}")
    # custom: the operator declares one control
    if not isinstance(custom, dict) or custom.get("kind") not in ("env", "arg", "speculative") \
            or (custom["kind"] != "speculative" and not custom.get("name")) or "value" not in custom:
        raise AnsibleFilterError(f"a custom candidate needs {{kind: env|arg|speculative, name, value}}, got {custom!r}")
    return {k: custom[k] for k in ("kind", "name", "value") if k in custom}


def candidate_change(plan, candidate_id, evidence=None, custom=None, p2p_mode="set0"):
    """The control change for a plan's candidate, after its prerequisites are met by evidence."""
    errors = candidate_plan_errors(plan)
    if errors:
        raise AnsibleFilterError("malformed candidate plan: " + "; ".join(errors))
    ids = [c["id"] for c in plan["ordered_candidates"]]
    if candidate_id not in KNOWN or (candidate_id != "custom" and candidate_id not in ids):
        valid = sorted(i for i in ids if i in KNOWN) + ["custom"]
        raise AnsibleFilterError(f"unknown candidate id {candidate_id!r}; valid ids: {', '.join(valid)}")
    evidence = evidence or {}
    missing = [EVIDENCE_TEXT[need] for need in KNOWN[candidate_id]["requires"]
               if not (evidence.get(need) == "ok" if need == "peer_path" else evidence.get(need))]
    if missing:
        raise AnsibleFilterError(f"candidate {candidate_id!r} needs evidence first: {'; '.join(missing)} "
                                 f"(evidence seen: {evidence!r})")
    entry = next((c for c in plan["ordered_candidates"] if c["id"] == candidate_id), {"id": "custom"})
    return {"id": candidate_id, "change": _change_for(candidate_id, custom or {}, p2p_mode),
            "plan_change": entry.get("change"), "gate": entry.get("gate"),
            "prerequisites": entry.get("prerequisites", [])}


class FilterModule:
    def filters(self):
        return {"candidate_plan_errors": candidate_plan_errors, "candidate_change": candidate_change}
