"""Action plugin: adopt the current original as the restore recipe - the explicit, human step after an intended
change to it (a key rotation, an operator's edit). Each step runs on the host as its own module, in order; the
first that fails ends it with its step and message.

1. the candidate unit's state (systemd): refused while a candidate is loaded or running (rollback.yml first);
2. the current original (serving_recipe: its unit, drop-ins and EnvironmentFiles); refused when systemd runs a
   version other than its files (NeedDaemonReload=yes): renew adopts files, and what serves would not be them;
3. a promotion in place (promoted.json beside the snapshot): refused, since the snapshot is then the pre-promotion
   original, the only way back; with over_promotion, that snapshot is first copied aside (its manifest checked)
   and kept, and the promotion record goes with it;
4. a new verified copy of them replacing the snapshot (serving_snapshot replace), both versions kept (values off
   the allow-list redacted).
Documentation: library/snapshot_renew.py."""

import base64
import json

from ansible.errors import AnsibleActionFail

from serving_rollout.module_utils.put_back import candidate_present
from serving_rollout.play.actions import StepsAction


class ActionModule(StepsAction):
    def initial(self):
        return {"changed": False, "manifest": None, "both_versions": [], "kept_pre_promotion": None}

    def over_promotion(self, args, steps):
        """None without a promotion in place; refused with one unless over_promotion, then the pre-promotion
        snapshot's folder, copied aside and checked, its promotion record moved with it."""
        dest, record = args["dest"], f"{args['dest']}/promoted.json"
        if not steps.module("look for a promotion in place", "ansible.builtin.stat", path=record).get("stat", {}).get(
                "exists"):
            return None
        content = steps.module("read the promotion record", "ansible.builtin.slurp", src=record)["content"]
        try:  # a record that cannot be read is still a promotion in place (snapshot_reading.promoted_run_id's rule)
            run_id = str(json.loads(base64.b64decode(content)).get("run_id") or "unreadable")
        except (ValueError, AttributeError):
            run_id = "unreadable"
        keep = f"{dest}.pre-promotion-{run_id}"
        if not args["over_promotion"]:
            raise AnsibleActionFail(
                f"refused before any change: run {run_id} is promoted on this host ({record}), so {args['unit']} "
                "is the promoted unit and the snapshot is the pre-promotion original, the only way back. To go "
                "back to that original: rollback.yml. To keep the promoted unit as the original from now on: renew "
                f"with -e rollout_renew_over_promotion=true (the pre-promotion original is then kept in {keep})")
        steps.module("keep the pre-promotion original aside", "ansible.builtin.copy", src=f"{dest}/",
                     dest=f"{keep}/", remote_src=True, mode="preserve")
        sums = [steps.module(f"check {folder}/manifest.json", "ansible.builtin.stat", path=f"{folder}/manifest.json",
                             checksum_algorithm="sha256").get("stat", {}).get("checksum") for folder in (dest, keep)]
        if not self._task.check_mode and (None in sums or sums[0] != sums[1]):
            raise AnsibleActionFail(f"the copy of {dest} in {keep} does not match it (manifest sha256 {sums}); "
                                    "nothing was adopted")
        steps.module("move the promotion record with it", "ansible.builtin.file", path=record, state="absent")
        return keep

    def steps(self, args, steps, done):
        candidate = args["candidate_unit"]
        status = steps.module(f"read {candidate}", "ansible.builtin.systemd_service", name=candidate)
        status = status.get("status") or {}
        if candidate_present(status):  # the same test a restore makes (module_utils/put_back.py)
            raise AnsibleActionFail(f"{candidate} is {status.get('LoadState', 'not-found')}/"
                                    f"{status.get('ActiveState', 'inactive')}: run rollback.yml first, then renew")
        current = steps.module(f"read the current {args['unit']}", "serving_recipe", unit=args["unit"],
                               require_digest=False)
        loaded = current.get("unit") or {}
        if loaded.get("NeedDaemonReload") == "yes":
            raise AnsibleActionFail(
                f"{args['unit']}'s files changed after systemd loaded them (NeedDaemonReload=yes): invocation "
                f"{loaded.get('InvocationID')} (pid {loaded.get('ExecMainPID')}) runs the version systemd loaded, not "
                "the files renew would adopt. Nothing was adopted. To serve what the files say: rollback.yml (it "
                f"reloads and restarts {args['unit']} and proves it), or systemctl daemon-reload && systemctl restart "
                f"{args['unit']}; then renew")
        done["kept_pre_promotion"] = self.over_promotion(args, steps)
        renewed = steps.module("adopt it as the restore recipe (a new verified copy)", "serving_snapshot",
                               unit=args["unit"], files=current["files"], state=current["unit"], dest=args["dest"],
                               replace=True)
        done.update(manifest=renewed.get("manifest"), both_versions=renewed.get("both_versions") or [])
