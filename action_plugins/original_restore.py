"""Action plugin: put the original back - whatever state a run left the host in - and record it. Each step
runs on the host as its own module, in order; the first that fails ends the put-back with its step and
message, and what was done until then is returned all the same (the evidence names ended processes).

1. the candidate's and the original's systemd state are read;
2. when anything is left to put back (a candidate loaded or running, an original not active or restarted),
   the duty stays covered while this restore runs: the lease is renewed for the whole restore (lease_s) and
   the host-side watchdog (re)started for this holder, so if the controller dies mid-restore the watchdog
   finishes it; then the phase 'restoring' is recorded - a record that cannot be written (a full disk) is
   said and never stops the restore;
3. an original that restarted on its own, or that systemd loaded before its files changed (NeedDaemonReload=yes),
   is stopped and its failure state reset (NRestarts counts from the restore; systemd reloads before the start);
4. the candidate is stopped within the tool's deadline (loaded or orphaned), its container removed;
5. the GPUs come free (the stopped engine's own stragglers ended), unless the original serves on them;
6. the original's files are checked against the snapshot - never overwritten; an original edited during the
   run is started as it is (the operator's edit wins), and the action fails after the put-back naming the edit
   and the next step (renew.yml adopts it), so a unit that serves is always back and no candidate is left;
7. the original starts and its health endpoint answers within the deadline;
8. the candidate unit, its drop-ins and copies go, the phase 'restored' is recorded (said, never fatal), and
   the watchdog stops: the original serves again.
The proof that follows is restored_proof's. Documentation: library/original_restore.py."""

from ansible.errors import AnsibleActionFail

from serving_rollout.module_utils.put_back import left_to_put_back, restore_lease
from serving_rollout.play.actions import StepsAction
from serving_rollout.play.host_steps import CONTAINER_RUNTIMES


class ActionModule(StepsAction):
    def initial(self):
        return {"changed": False, "candidate_present": False, "candidate_stop": None, "gpu": None, "manifest": None}

    @staticmethod
    def phase(steps, args, phase):
        """Record the phase; a record that cannot be written is said, and the restore goes on."""
        try:
            result = steps.module(f"record the phase {phase}", "rollout_phase", state_dir=args["state_dir"],
                                  unit=args["unit"], candidate_unit=args["candidate_unit"], phase=phase,
                                  run_id=args["run_id"])
        except AnsibleActionFail as exc:
            steps.say(f"{exc.message} (the restore goes on without it)")
            if phase == "restored":  # never a stale earlier phase: no state file reads as nothing under way
                state = f"{args['state_dir']}/{args['unit']}/state.json"
                gone = steps.action._execute_module(module_name="ansible.builtin.file", task_vars=steps.task_vars,
                                                    module_args={"path": state, "state": "absent"})
                steps.say(f"{state} removed instead" if not gone.get("failed") else
                          f"{state} could not be removed either: {gone.get('msg')}")
            return
        steps.done["ansible_facts"] = result.get("ansible_facts") or {}  # the CLI and interrupted callback read it

    @staticmethod
    def cover(steps, args):
        """The watchdog holds the duty with this restore: the lease renewed, the watchdog (re)started. A lease or
        script that cannot be written (a full disk) never stops the restore: it is said, and the restore goes on
        (without a renewed lease the watchdog is stopped, so it never acts beside this restore)."""
        watchdog = {"watchdog_unit": args["watchdog_unit"], "unit": args["unit"]}
        try:
            lease = steps.module("renew the lease for the restore", "rollout_lock", path=args["lock_path"],
                                 token=args["lock_token"], state="held", lease_s=restore_lease(args))
        except AnsibleActionFail as exc:
            steps.say(f"{exc.message}; this restore holds the duty alone (the watchdog is stopped)")
            steps.module("stop the host-side watchdog", "rollout_watchdog", state="stopped", **watchdog)
            return
        if not lease.get("held"):
            raise AnsibleActionFail(f"the lock {args['lock_path']} is no longer "
                                    f"this run's (now {lease.get('lock') or 'none'}): nothing was put back")
        try:
            steps.module("start the host-side watchdog for this restore", "rollout_watchdog", **watchdog,
                         candidate_unit=args["candidate_unit"], state_dir=args["state_dir"], run_id=args["run_id"],
                         lock_path=args["lock_path"], stop_timeout_s=args["stop_timeout_s"],
                         snapshot_files=args["snapshot_files"])
        except AnsibleActionFail as exc:
            steps.say(f"{exc.message}; the restore goes on (a watchdog already running keeps its duty)")

    def steps(self, args, steps, done):
        unit, candidate_unit = args["unit"], args["candidate_unit"]
        candidate = steps.module(f"read {candidate_unit}", "ansible.builtin.systemd_service",
                                 name=candidate_unit).get("status") or {}
        original = steps.module(f"read {unit}", "ansible.builtin.systemd_service", name=unit).get("status") or {}
        present, restarted, anything = left_to_put_back(candidate, original)
        done["candidate_present"] = present
        # Nothing left to put back (the original serves cleanly, no candidate): a second rollback changes
        # nothing; the checks below still run.
        if anything:
            self.cover(steps, args)
            self.phase(steps, args, "restoring")
        edited = self.put_back(args, steps, done, present, restarted, original)
        self.phase(steps, args, "restored")
        steps.module("stop the host-side watchdog (the original serves again)", "rollout_watchdog",
                     state="stopped", watchdog_unit=args["watchdog_unit"], unit=unit)
        if edited:
            raise AnsibleActionFail(
                f"NOT restored exactly: {edited}. By the tool's rule an operator's edit wins: the edited original "
                f"{unit} was started as it is (never overwritten) and answers, the candidate is gone, the snapshot is "
                "kept. To adopt the edit as the restore recipe: playbooks/renew.yml; to put the snapshot back "
                "instead: undo the edit, then playbooks/rollback.yml", result={"both_versions": done["both_versions"]})

    def put_back(self, args, steps, done, present, restarted, original):
        unit, candidate_unit = args["unit"], args["candidate_unit"]
        stale = original.get("NeedDaemonReload") == "yes"
        if stale:
            steps.say(f"{unit}: systemd runs a version other than its files (NeedDaemonReload=yes, invocation "
                      f"{original.get('InvocationID')}): reloading and restarting it so what runs is what the "
                      "files say")
        if restarted:
            why = "systemd loaded before its files changed" if stale else "restarted on its own"
            steps.module(f"stop {unit}, which {why}", "engine_stop", unit=unit, deadline_s=args["stop_timeout_s"])
            steps.module(f"reset {unit}'s failure state", "ansible.builtin.command",
                         argv=["systemctl", "reset-failed", unit])
            done["changed"] = True
        # The engine's SIGTERM is not trusted: a vLLM API server with an open client stream never exits on it.
        if present:
            stop = steps.module(f"stop the candidate {candidate_unit}", "engine_stop", unit=candidate_unit,
                                deadline_s=args["stop_timeout_s"])
            done["candidate_stop"] = {k: stop.get(k) for k in ("stopped", "escalated", "how")}
            if stop.get("escalated"):
                steps.say(str(stop.get("how")))
        container = args.get("container") or ""
        if args.get("runtime") in CONTAINER_RUNTIMES and container:
            # A candidate's container that outlived its unit; none is the usual case, so a failure is not one.
            argv = [args["runtime"], "rm", "-f", f"{container}-candidate"]
            removed = self._execute_module(module_name="ansible.builtin.command", task_vars=steps.task_vars,
                                           module_args={"argv": argv})
            done["changed"] = done["changed"] or (removed.get("rc") == 0 and bool(removed.get("stdout", "").strip()))
        if original.get("ActiveState") != "active" or restarted:
            steps.free_gpus(args, [unit, candidate_unit])
        edited = self.check_files(args, steps, done)
        steps.module(f"start {unit}", "ansible.builtin.systemd_service", name=unit, state="started",
                     daemon_reload=bool(edited) or stale)
        steps.module(f"wait for {unit}'s health endpoint", "engine_ready", base_url=args["base_url"],
                     timeout_s=args["ready_timeout_s"], unit=unit, engine=args["engine"],
                     stall_s=args["boot_stall_s"], env_files=args.get("env_files") or [])
        steps.module("remove the candidate unit, its drop-ins and copies", "candidate_remove",
                     candidate_unit=candidate_unit, unit=unit, state_dir=args["state_dir"])
        return edited

    def check_files(self, args, steps, done):
        """The original's files against the snapshot: None when they match, else what changed (an operator's edit
        during the run, never overwritten: the original is started as it is, so a unit that serves is back)."""
        unit = args["unit"]
        check = self._execute_module(module_name="serving_snapshot", task_vars=steps.task_vars, module_args={
            "unit": unit, "files": args["snapshot_files"], "dest": f"{args['state_dir']}/{unit}"})
        if not check.get("failed"):
            done["manifest"] = check.get("manifest")
            return None
        if "both_versions" not in check:  # not an edit: the check itself failed
            raise AnsibleActionFail(f"check the original's files against the snapshot: {check.get('msg', check)}")
        done["manifest"], done["both_versions"] = check.get("snapshot"), check["both_versions"]
        edited = "; ".join(check.get("changed_files") or ["files differ"])
        steps.say(f"{unit} was edited during the run ({edited}); starting it as it is, never overwritten")
        return f"{unit} was edited during the run ({edited})"
