"""Action plugin: start the candidate and keep it as it became ready. Each step runs on the host as its own
module, in order; the first that fails ends it with its step and message.

1. the candidate unit starts (systemd_service);
2. its health endpoint answers within the deadline (engine_ready: a crash signature or a stalled log ends the
   wait early, naming the start-up phase);
3. the watchdog's lease is renewed for the gates that come next (rollout_lock held; a lock taken over ends it);
4. the ready engine's identity is read (MainPID, InvocationID, NRestarts): a new one later is a crash of the
   run (latency_arm compares them), never a slower arm;
5. with the original's container reading, the candidate's container is proven to differ from it in the one
   control, as the runtime runs both (container_reading).
Documentation: library/candidate_start.py."""

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from serving_rollout.host_steps import HostSteps, missing

REQUIRED = ("candidate_unit", "base_url", "ready_timeout_s", "engine", "boot_stall_s", "lock_path", "lock_token",
            "lease_s")
OPTIONAL = ("env_files", "runtime", "container", "original_container", "change")
IDENTITY = ("MainPID", "InvocationID", "NRestarts")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(REQUIRED + OPTIONAL)

    def run(self, tmp=None, task_vars=None):
        super().run(tmp, task_vars)
        args = self._task.args
        compare = bool(args.get("original_container"))
        absent = missing(args, REQUIRED + (("runtime", "container", "change") if compare else ()))
        if absent:
            return {"failed": True, "msg": f"candidate_start needs {', '.join(absent)}; got {sorted(args)}"}
        done = {"changed": False, "identity": {}, "container_compared": False}
        steps, unit = HostSteps(self, task_vars, done), args["candidate_unit"]
        try:
            steps.module(f"start {unit}", "ansible.builtin.systemd_service", name=unit, state="started")
            steps.module(f"wait for {unit}'s health endpoint", "engine_ready", base_url=args["base_url"],
                         timeout_s=args["ready_timeout_s"], unit=unit, engine=args["engine"],
                         stall_s=args["boot_stall_s"], env_files=args.get("env_files") or [])
            steps.module("renew the lease now the candidate is ready", "rollout_lock", path=args["lock_path"],
                         token=args["lock_token"], state="held", lease_s=args["lease_s"], must_hold=True)
            # Only these: the rest of systemd's properties (Environment=) can hold secrets.
            status = steps.module(f"read {unit}'s process identity", "ansible.builtin.systemd_service",
                                  name=unit).get("status") or {}
            done["identity"] = {key: status.get(key) for key in IDENTITY}
            if compare:
                steps.module("prove the candidate's container differs from the original's in the one control",
                             "container_reading", runtime=args["runtime"], name=f"{args['container']}-candidate",
                             key=args["lock_token"], compare_with=args["original_container"], change=args["change"])
                done["container_compared"] = True
        except AnsibleActionFail as exc:
            return {**done, **exc.result, "failed": True, "msg": exc.message}
        return done
