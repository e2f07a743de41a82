"""Action plugin: a run's observation documents written on the controller in one step - checked, redacted,
each created new in <dir>/<host>/<kind>-<run_id>/ (serving_rollout/observations.py does the work).
Documentation: library/observation_write.py."""

import os

from ansible.errors import AnsibleActionFail

from serving_rollout import observations
from serving_rollout.play.actions import PlayAction


class ActionModule(PlayAction):
    def step(self, p, task_vars):
        problems = observations.problems(p["kind"], p["run_id"], p["documents"])
        if problems:
            raise AnsibleActionFail("; ".join(problems))
        host = task_vars.get("inventory_hostname", "localhost")
        folder = os.path.join(p["dir"], host, f"{p['kind']}-{p['run_id']}")
        identifiers = [host, str(task_vars.get("ansible_host") or ""), *p["extra_identifiers"]] \
            if p["redact_host_identifiers"] else []
        if self._task.check_mode:
            return {"changed": p["report_change"], "dir": folder, "written": [], "msg": "check mode: nothing written"}
        try:
            written = observations.write_documents(folder, host, p["run_id"], p["documents"], identifiers)
        except observations.WriteError as exc:
            return {"failed": True, "msg": f"the evidence of {p['kind']} run {p['run_id']} was not written to "
                                          f"{folder}: {exc}", "error": str(exc), "dir": folder, "written": exc.written}
        return {"changed": p["report_change"], "dir": folder, "written": written}
