"""Action plugin: the controller's side of a run's evidence, inside the play - the evidence folder checked
before any change, the decode prediction weighed, the run folder finalized (decision, card, plot, manifest,
seal, index) and a run's evidence trusted before promotion. The work is serving_rollout.evidence's; this file
calls it and turns its refusals into a failed task that names them. Documentation: library/run_evidence.py."""

import os

from ansible.errors import AnsibleActionFail
from ansible.utils.display import Display

from serving_rollout import evidence
from serving_rollout.play.actions import PlayAction

display = Display()


def check_dir(p):
    problem = evidence.check_dir(p["path"], p["min_free_mib"])
    if problem:
        raise AnsibleActionFail(problem)
    return {"changed": False}


def predict(p):
    """The prediction, said on the console (flagged when below the minimum effect); refused when flagged and
    refuse_flagged (the A/B would spend GPU time on an effect it cannot call)."""
    prediction = evidence.predict_flag(p["path"], p["min_effect"], p["decode_ms_per_token"] or None)
    if prediction["flag"] and p["refuse_flagged"]:
        raise AnsibleActionFail(f"{prediction['reason']} (evidence {prediction.get('evidence')}); the A/B would spend "
                                "GPU time on an effect it cannot call. Set rollout_refuse_below_predicted_effect=false "
                                "to run it anyway")
    display.display(f"FLAGGED: {prediction['reason']}" if prediction["flag"] else (
        f"predicted decode gain {prediction['predicted_effect'] * 100:.1f}%" if prediction["known"]
        else f"no prediction: {prediction['reason']}"))
    return {"changed": False, "prediction": prediction}


def finalize(p):
    try:
        return {"changed": True, "record": evidence.finalized(p["path"])}
    except SystemExit as exc:  # a full or read-only disk, or a run folder finalized before (never twice)
        raise AnsibleActionFail(str(exc)) from None


def trust(p):
    record = evidence.trust(p["path"])
    if record["problems"]:
        raise AnsibleActionFail(f"run {p['path']} cannot be trusted: " + "; ".join(record["problems"]))
    return {"changed": False, "trust": record}


OPS = {"check_dir": check_dir, "predict": predict, "finalize": finalize, "trust": trust}


class ActionModule(PlayAction):
    def step(self, p, task_vars):
        if p["op"] in ("finalize", "trust") and not os.path.isdir(p["path"]):
            raise AnsibleActionFail(f"no run directory at {p['path']}")
        if p["op"] == "finalize" and self._task.check_mode:
            return {"changed": True, "msg": f"check mode: {p['path']} not finalized"}
        return OPS[p["op"]](p)
