"""Reading a candidate plan (anvil-serving.followup-candidate-plan/v1): its schema errors by path, and the
control change of one of its candidates. Pure; the filters (filter_plugins/candidate_plan.py) and the plan
executor (serving_rollout/plan.py) both use it."""

import json
from pathlib import Path

from serving_rollout.module_utils import controls, equivalence

SCHEMA_FILE = Path(__file__).resolve().parent.parent / "schemas" / "candidate-plan.schema.json"

class PlanError(ValueError):
    """A plan or candidate refused, naming why."""


PLAN_SCHEMA = "anvil-serving.followup-candidate-plan/v1"
# What each control is, sets, proves and needs first lives in the catalog (module_utils/controls.py).
EVIDENCE_TEXT = controls.EVIDENCE


def _path(error):
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)


def schema_errors(schema_file, document):
    """Every error of `document` against a JSON schema in schemas/ (jsonschema), each as `$.path: what`."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(json.loads(Path(schema_file).read_text()))
    return [_message(e) for e in sorted(validator.iter_errors(document), key=lambda e: [str(p) for p in e.path])]


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
    errors = schema_errors(SCHEMA_FILE, plan)
    ids = [c.get("id") for c in plan.get("ordered_candidates") or [] if isinstance(c, dict)] \
        if isinstance(plan, dict) else []
    errors += [f"$.ordered_candidates[{n}].id: duplicate id {i!r}" for n, i in enumerate(ids) if i in ids[:n]]
    return errors


def _evidence_met(need, evidence):
    return evidence.get(need) == "ok" if need == "peer_path" else bool(evidence.get(need))


def candidate_change(plan, candidate_id, evidence=None, custom=None, engine=None, value=None):
    """The selected candidate: its catalog control's change for this engine, the proof the
    engine must show, and the plan's entry, after the control's prerequisites are met by evidence.
    A catalog id runs whether or not the plan lists it (the plan's entry is recorded when it
    does); `custom` needs its declared change and proof."""
    errors = candidate_plan_errors(plan)
    if errors:
        raise PlanError("malformed candidate plan: " + "; ".join(errors))
    if candidate_id != controls.CUSTOM and candidate_id not in controls.BY_ID:
        listed = [c["id"] for c in plan["ordered_candidates"] if c["id"] in controls.BY_ID]
        raise PlanError(f"unknown candidate id {candidate_id!r}; the plan's catalog ids: "
                        f"{', '.join(listed) or 'none'}; "
                        f"the catalog: {', '.join(controls.ids())}, and custom")
    evidence = evidence or {}
    missing = [EVIDENCE_TEXT[need] for need in controls.requires(candidate_id) if not _evidence_met(need, evidence)]
    if missing:
        raise PlanError(f"candidate {candidate_id!r} needs evidence first: {'; '.join(missing)} "
                        f"(evidence seen: {evidence!r})")
    listed = [c for c in plan["ordered_candidates"] if c["id"] == candidate_id]
    entry = listed[0] if listed else {"id": candidate_id}
    try:
        if candidate_id == controls.CUSTOM:
            change, proof = controls.custom_change(custom or entry.get("control"))
        else:
            # the setting: given for this run, else the plan entry's value, else its control mapping
            setting = value if value not in (None, "") else entry.get("value", custom or entry.get("control"))
            change = controls.change_for(candidate_id, engine, setting)
            proof = controls.proof_for(candidate_id, change)
        # how far the numbers may move: the plan entry's word, else the catalog's (None: recorded only)
        numerics = entry.get("numerics", controls.numerics(candidate_id))
        equivalence.tolerance(numerics)
    except controls.ControlError as exc:
        raise PlanError(str(exc)) from exc
    except equivalence.EquivalenceError as exc:
        raise PlanError(f"candidate {candidate_id!r}: bad numerics: {exc}") from exc
    return {"id": candidate_id, "change": change, "proof": proof, "nccl": controls.proven_by_nccl(proof),
            "group": controls.group(candidate_id),  # an upgrade is judged no worse (_rollout_rule_in_force)
            # speculation is judged by its accept length: the engine's /metrics, else its own log line
            "reads_accept_length": controls.group(candidate_id) == "speculative",
            "effect_model": controls.effect_model(candidate_id), "numerics": numerics,
            "endurance": controls.endurance(candidate_id),
            "engine": engine, "in_plan": bool(listed),
            "plan_change": entry.get("change"), "gate": entry.get("gate"),
            "prerequisites": entry.get("prerequisites", [])}
