"""Action plugin: write a host's proposal on the controller - its pins as observed, an ordered candidate plan and a
report (serving_rollout/proposal.py reads the facts against the catalog). The facts come from the play (the fresh
capture, systemd's reading of the unit, the engine's start-up log); the host's peer-path verdict and decode
prediction from its evidence folder. Writes evidence/<host>/proposal-<run id>/ (never over an existing one); in
check mode it writes nothing and shows the report. Documentation: library/proposal_write.py."""

import json
from pathlib import Path

from ansible.errors import AnsibleActionFail
from ansible.utils.display import Display

from serving_rollout import evidence, proposal
from serving_rollout.candidate_plan import candidate_plan_errors
from serving_rollout.play.actions import PlayAction

REPO = Path(__file__).resolve().parent.parent

display = Display()


def latest(host_dir, pattern):
    found = sorted(Path(host_dir).glob(pattern), reverse=True)
    return found[0] if found else None


def peer_path(host_dir):
    """The newest peer-path verdict of the host, with its evidence, or None."""
    path = latest(host_dir, "peer-path-*/peer-path-observation.json")
    if path is None:
        return None
    verdict = (json.loads(path.read_text()).get("peer_path") or {}).get("verdict")
    return {"verdict": verdict, "evidence": str(path.relative_to(Path(host_dir).parent))}


def shown(path):
    """A path as an operator types it from the repository's root (where bin/serving-rollout is), else absolute."""
    path = Path(path).resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def inventory_of(task_vars):
    """The inventory this play was given, as shown()."""
    sources = task_vars.get("ansible_inventory_sources") or [task_vars.get("inventory_dir") or "INVENTORY"]
    return shown(sources[0]) if sources[0] != "INVENTORY" else "INVENTORY"


class ActionModule(PlayAction):
    def step(self, p, task_vars):
        host_dir = Path(p["evidence_dir"]) / p["host"]
        capture = latest(host_dir, "capture-*/p2p-support-observation.json")
        captured = str(capture.relative_to(host_dir.parent)) if capture else None
        facts = {"recipe": p["recipe"], "scan": p["scan"], "peer_path": peer_path(host_dir),
                 "unit_state": p["unit_state"],
                 "prediction": evidence.latest_prediction(host_dir), "capture": {**p["capture"], "evidence": captured}}
        found = proposal.pins(p["recipe"], p["scan"], facts["capture"])
        plan = proposal.propose(facts)
        document = proposal.plan_document(p["host"], plan, facts["capture"]["evidence"])
        problems = candidate_plan_errors(document)
        if problems:  # the tool's own plan must be one plan.yml takes
            raise AnsibleActionFail(f"the proposed plan is not a valid candidate plan: {'; '.join(problems)}")
        folder = host_dir / f"proposal-{p['run_id']}"
        text = proposal.report(p["host"], p["unit"], found, plan,
                               f"bin/serving-rollout plan {shown(folder / 'plan.json')} -i {inventory_of(task_vars)}")
        result = {"changed": not self._task.check_mode, "folder": str(folder),
                  "candidates": [c["id"] for c in plan["candidates"]], "not_proposed": plan["not_proposed"]}
        display.display(text)
        if self._task.check_mode:
            return result
        try:
            folder.mkdir(parents=True, exist_ok=False)
            (folder / "pins.yml").write_text(proposal.pins_yaml(p["host"], found))
            (folder / "plan.json").write_text(json.dumps(document, indent=2) + "\n")
            (folder / "report.md").write_text(text)
        except OSError as exc:  # an existing folder, a full or read-only disk: named, no traceback
            raise AnsibleActionFail(f"cannot write the proposal in {folder}: {exc.strerror or exc}") from None
        return result
