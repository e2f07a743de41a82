"""Filters that read a candidate plan; the logic is serving_rollout.candidate_plan's."""

from ansible.errors import AnsibleFilterError

from serving_rollout import candidate_plan as plan


def candidate_plan_load(text, path):
    """A plan file's JSON, or an error naming the file and where its JSON breaks."""
    try:
        return plan.candidate_plan_load(text, path)
    except plan.PlanError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def candidate_plan_errors(document):
    """Every schema error of a plan, each naming its JSON path; [] when valid."""
    return plan.candidate_plan_errors(document)


def candidate_change(document, candidate_id, evidence=None, custom=None, engine=None, value=None):
    """The selected candidate (its catalog control's change for this engine and the proof the
    engine must show), after its prerequisites are met by evidence."""
    try:
        return plan.candidate_change(document, candidate_id, evidence, custom, engine, value)
    except plan.PlanError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self):
        return {"candidate_plan_errors": candidate_plan_errors, "candidate_change": candidate_change,
                "candidate_plan_load": candidate_plan_load}
