"""Action plugin: adopt the current original as the restore recipe - the explicit, human step after an intended
change to it (a key rotation, an operator's edit). Each step runs on the host as its own module, in order; the
first that fails ends it with its step and message.

1. the candidate unit's state (systemd): refused while a candidate is loaded or running (rollback.yml first);
2. the current original (serving_recipe: its unit, drop-ins and EnvironmentFiles); refused when systemd runs a
   version other than its files (NeedDaemonReload=yes): renew adopts files, and what serves would not be them;
3. a new verified copy of them replacing the snapshot (serving_snapshot replace), both versions kept (values off
   the allow-list redacted).
Documentation: library/snapshot_renew.py."""

from ansible.errors import AnsibleActionFail

from serving_rollout.module_utils.put_back import candidate_present
from serving_rollout.play.actions import StepsAction


class ActionModule(StepsAction):
    def initial(self):
        return {"changed": False, "manifest": None, "both_versions": []}

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
        renewed = steps.module("adopt it as the restore recipe (a new verified copy)", "serving_snapshot",
                               unit=args["unit"], files=current["files"], state=current["unit"], dest=args["dest"],
                               replace=True)
        done.update(manifest=renewed.get("manifest"), both_versions=renewed.get("both_versions") or [])
