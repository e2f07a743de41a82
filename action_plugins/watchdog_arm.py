"""Action plugin: arm the host-side watchdog before the original stops. Each step runs on the host as its own
module, in order; the first that fails ends it with its step and message (the original is still serving).

1. the lease the watchdog reads is renewed to cover the stop, the wait for free GPUs, the candidate's start and
   one lease more (rollout_lock held; a lock taken over ends it);
2. the watchdog is written and started (rollout_watchdog): if this controller dies from here on, it restores
   the original itself when the lease runs out;
3. the phase stopping-original is recorded (rollout_phase) and returned as the task's progress fact, so an
   interrupted run from here on says to run rollback.yml.
Documentation: library/watchdog_arm.py."""

from serving_rollout.play.actions import StepsAction


class ActionModule(StepsAction):
    def steps(self, args, steps, done):
        steps.module("give the watchdog its first lease", "rollout_lock", path=args["lock_path"],
                     token=args["lock_token"], state="held", lease_s=args["lease_s"], must_hold=True)
        steps.module("start the host-side watchdog", "rollout_watchdog", watchdog_unit=args["watchdog_unit"],
                     unit=args["unit"], candidate_unit=args["candidate_unit"], state_dir=args["state_dir"],
                     run_id=args["run_id"], lock_path=args["lock_path"], stop_timeout_s=args["stop_timeout_s"],
                     snapshot_files=args["snapshot_files"])
        steps.phase(args, "stopping-original")
