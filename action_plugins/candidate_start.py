"""Action plugin: start the candidate and keep it as it became ready. Each step runs on the host as its own
module, in order; the first that fails ends it with its step and message.

1. the candidate unit starts (systemd_service);
2. its health endpoint answers within the deadline (engine_ready: a crash signature or a stalled log ends the
   wait early, naming the start-up phase);
3. the watchdog's lease is renewed for the gates that come next (rollout_lock held; a lock taken over ends it);
4. the ready engine's identity is read (MainPID, InvocationID, NRestarts): a new one later is a crash of the
   run (latency_arm compares them), never a slower arm;
5. with the original's container reading, the candidate's container is proven to differ from it in the one
   control, as the runtime runs both (container_reading);
6. with read_version (an engine upgrade), the ready engine's own version report (engine_gate version);
7. with next_phase, that phase recorded (rollout_phase) and returned as the task's progress fact;
8. with `scan` (journal_scan's options: the baseline's known noise, the change and its proof), the candidate's
   start-up log judged against the original's: a crash or an error line new against the original fails it
   ("candidate failed at start: <phase>: <cause>"), and so does a control the engine does not show ("no effect";
   restored, no A/B spent on it). The scan is returned either way, for the evidence.
Documentation: library/candidate_start.py."""

from ansible.errors import AnsibleActionFail

from serving_rollout.module_utils.engine_adapters import log_failure
from serving_rollout.play.actions import StepsAction

IDENTITY = ("MainPID", "InvocationID", "NRestarts")


class ActionModule(StepsAction):
    def required(self, args):
        return ((("runtime", "container", "change") if args.get("original_container") else ())
                + (("unit", "state_dir", "run_id") if args.get("next_phase") else ()))

    def initial(self):
        return {"changed": False, "identity": {}, "container_compared": False, "version": None, "scan": None}

    def steps(self, args, steps, done):
        unit = args["candidate_unit"]
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
        if args.get("original_container"):
            steps.module("prove the candidate's container differs from the original's in the one control",
                         "container_reading", runtime=args["runtime"], name=f"{args['container']}-candidate",
                         key=args["lock_token"], compare_with=args["original_container"], change=args["change"])
            done["container_compared"] = True
        if args["read_version"]:
            done["version"] = steps.version_report(args, "candidate", "candidate")
        if args.get("next_phase"):
            steps.phase(args, args["next_phase"])
        if args.get("scan") is not None:
            self.judge_start(args, steps, done)

    @staticmethod
    def judge_start(args, steps, done):
        """Ready is HTTP's (the health route answered); the start-up log is judged against the original's own,
        and the catalog says what the engine must show (module_utils/controls.py)."""
        scan = steps.module("read the candidate's start-up log", "journal_scan", unit=args["candidate_unit"],
                            engine=args["engine"], env_files=args.get("env_files") or [],
                            version_report=done["version"] or {}, **args["scan"])["scan"]
        done["scan"] = scan
        failure = log_failure(scan)  # a warning the original's own start did not print counts
        if failure:
            raise AnsibleActionFail(f"candidate failed at start: {scan.get('phase') or 'unknown phase'}: {failure}")
        proof = scan["proof"]
        if not proof["proven"]:
            raise AnsibleActionFail(f"no effect: {args.get('label') or 'candidate'} ({proof['kind']}): expected "
                                    f"{proof['expected']}; the engine showed {proof['saw']}")
