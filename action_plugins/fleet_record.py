"""Action plugin: the fleet's records on the controller, inside the play - a batch begins only if every
earlier host passed, a host's outcome is recorded (and the summary rendered again), a host lost to a killed
run is marked so. Every write is under the evidence folder's lock (serving_rollout.fleet, which does the
work). Documentation: library/fleet_record.py."""

from ansible.errors import AnsibleActionFail
from ansible.utils.display import Display

from serving_rollout import fleet
from serving_rollout.play.actions import PlayAction

display = Display()

OPS = {
    "begin": lambda p: {"begin": fleet.begin(p["evidence_dir"], p["run_id"], p["hosts"], p["batch"])},
    "record": lambda p: {"record": fleet.record(p["evidence_dir"], p["run_id"], p["host"], p["outcome"])},
    "lost": lambda p: {"lost": fleet.mark_lost(p["evidence_dir"], p["run_id"], p["host"], p["why"])},
}


class ActionModule(PlayAction):
    def step(self, p, task_vars):
        if self._task.check_mode:
            return {"changed": False, "begin": {"stop": False}, "msg": "check mode: no fleet record written"}
        try:
            with fleet.locked(p["evidence_dir"]):
                result = {"changed": False, **OPS[p["op"]](p)}  # controller records only
        except OSError as exc:  # a read-only or full evidence disk: the folder and the error, no traceback
            msg = f"evidence folder {p['evidence_dir']} is not writable: {exc.strerror}"
            if p["op"] != "record":
                raise AnsibleActionFail(msg) from None
            # a host's outcome is never masked by its record: said, and the play goes on
            display.warning(f"FLEET RECORD NOT WRITTEN: {msg}")
            return {"changed": False, "record": None, "msg": msg}
        begun = result.get("begin") or {}
        if begun.get("stop"):
            display.display(f"NOT STARTED: {begun['stopped_by']} ended '{begun['outcome']}'; "
                            f"{', '.join(p['batch'])} not touched")
        return result
