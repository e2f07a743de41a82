"""Reading a candidate plan (anvil-serving.followup-candidate-plan/v1): its schema errors by path, and the
control change of one of its candidates. Pure; the filters (filter_plugins/candidate_plan.py) and the plan
executor (serving_rollout/plan.py) both use it."""

import json
from pathlib import Path

SCHEMA_FILE = Path(__file__).resolve().parent.parent / "schemas" / "candidate-plan.schema.json"

class PlanError(ValueError):
    """A plan or candidate refused, naming why."""


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


def _path(error):
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)


def _message(error):
    """A jsonschema error as `$.path.to.field: what is wrong`, the field named for a missing one."""
    if error.validator == "required":
        missing = error.message.split("'")[1]
        return f"{_path(error)}.{missing}: required, missing"
    if error.validator == "const":
        return f"{_path(error)}: expected {error.validator_value!r}, got {error.instance!r}"
    if error.validator == "minLength":
        return f"{_path(error)}: must be a non-empty string, got {error.instance!r}"
    return f"{_path(error)}: {error.message}"


def candidate_plan_load(text, path):
    """A plan file's JSON, or an error naming the file and where its JSON breaks."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise PlanError(f"plan file {path} is not valid JSON: {exc}") from exc


def candidate_plan_errors(plan):
    """Every schema error (schemas/candidate-plan.schema.json, checked with jsonschema), each
    naming its path in the document; [] when the plan is valid."""
    import jsonschema

    schema = json.loads(SCHEMA_FILE.read_text())
    validator = jsonschema.Draft202012Validator(schema)
    errors = [_message(e) for e in sorted(validator.iter_errors(plan), key=lambda e: [str(p) for p in e.path])]
    ids = [c.get("id") for c in plan.get("ordered_candidates") or [] if isinstance(c, dict)] \
        if isinstance(plan, dict) else []
    errors += [f"$.ordered_candidates[{n}].id: duplicate id {i!r}" for n, i in enumerate(ids) if i in ids[:n]]
    return errors


def _change_for(candidate_id, custom, p2p_mode):
    if candidate_id == "p2p":
        if p2p_mode not in ("set0", "drop"):
            raise PlanError(f"p2p_mode must be set0 or drop, got {p2p_mode!r}")
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
        raise PlanError("scheduler-and-speculation needs exactly one of {chunked_prefill_size: N} "
                                 f"or {{speculative: {{--speculative-*: value}}}}, got {custom!r}")
    # custom: the operator declares one control
    if not isinstance(custom, dict) or custom.get("kind") not in ("env", "arg", "speculative") \
            or (custom["kind"] != "speculative" and not custom.get("name")) or "value" not in custom:
        raise PlanError(f"a custom candidate needs {{kind: env|arg|speculative, name, value}}, got {custom!r}")
    return {k: custom[k] for k in ("kind", "name", "value") if k in custom}


def candidate_change(plan, candidate_id, evidence=None, custom=None, p2p_mode="set0"):
    """The control change for a plan's candidate, after its prerequisites are met by evidence."""
    errors = candidate_plan_errors(plan)
    if errors:
        raise PlanError("malformed candidate plan: " + "; ".join(errors))
    ids = [c["id"] for c in plan["ordered_candidates"]]
    if candidate_id not in KNOWN or (candidate_id != "custom" and candidate_id not in ids):
        valid = sorted(i for i in ids if i in KNOWN) + ["custom"]
        raise PlanError(f"unknown candidate id {candidate_id!r}; valid ids: {', '.join(valid)}")
    evidence = evidence or {}
    missing = [EVIDENCE_TEXT[need] for need in KNOWN[candidate_id]["requires"]
               if not (evidence.get(need) == "ok" if need == "peer_path" else evidence.get(need))]
    if missing:
        raise PlanError(f"candidate {candidate_id!r} needs evidence first: {'; '.join(missing)} "
                                 f"(evidence seen: {evidence!r})")
    entry = next((c for c in plan["ordered_candidates"] if c["id"] == candidate_id), {"id": "custom"})
    return {"id": candidate_id, "change": _change_for(candidate_id, custom or {}, p2p_mode),
            "plan_change": entry.get("change"), "gate": entry.get("gate"),
            "prerequisites": entry.get("prerequisites", [])}
