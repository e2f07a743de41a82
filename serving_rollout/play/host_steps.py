"""Modules an action plugin runs on a host one after another (candidate_start, original_stop, original_restore):
each step is named, the first failure ends the sequence with its step and message, and what was done until then
stays in the action's result (`done`), so the evidence keeps it."""

from ansible.errors import AnsibleActionFail
from ansible.utils.display import Display

display = Display()

CONTAINER_RUNTIMES = ("docker", "podman")


class HostSteps:
    def __init__(self, action, task_vars, done):
        self.action, self.task_vars, self.done = action, task_vars, done

    def say(self, text):
        display.display(f"{self.task_vars.get('inventory_hostname')}: {text}")

    def module(self, step, module_name, /, **module_args):
        """Run one module on the host; a failure ends the sequence naming the step (its result's detail, e.g.
        a changed original's both versions, comes with it)."""
        result = self.action._execute_module(module_name=module_name, module_args=module_args,
                                             task_vars=self.task_vars)
        if result.get("failed"):
            detail = {k: v for k, v in result.items() if k not in ("failed", "msg", "changed", "invocation")}
            raise AnsibleActionFail(f"{step}: {result.get('msg', result)}", result=detail)
        self.done["changed"] = self.done["changed"] or bool(result.get("changed"))
        return result

    def phase(self, args, phase):
        """Record the rollout's phase on the host and return it as the task's progress fact (the CLI and the
        interrupted callback read it when the task ends, as they read rollout_phase's)."""
        recorded = self.module(f"record the phase ({phase})", "rollout_phase", state_dir=args["state_dir"],
                               unit=args["unit"], candidate_unit=args["candidate_unit"], phase=phase,
                               run_id=args["run_id"])
        self.done["ansible_facts"] = recorded.get("ansible_facts") or {}

    def version_report(self, args, who, phase):
        """The engine's own version report (engine_gate version; an engine upgrade's proof, both sides)."""
        return self.module(f"read the {who} engine's version report", "engine_gate", base_url=args["base_url"],
                           gate="version", env_files=args.get("env_files") or [],
                           timeout_s=args.get("gate_timeout_s") or 60, phase=phase,
                           **({"api_key_var": args["api_key_var"]} if args.get("api_key_var") else {}))["record"]

    def free_gpus(self, args, units):
        """Wait until no worker holds the GPUs, ending what of the stopped engines (`units`) stays: orphaned
        workers (reparented out of their unit) hold the GPUs until killed; a foreign process is never touched.
        The processes ended are kept in done['gpu'] even when the wait fails."""
        gpu = self.action._execute_module(module_name="gpu_free", task_vars=self.task_vars, module_args={
            "pattern": args.get("gpu_process_pattern") or "", "timeout_s": args["gpu_free_timeout_s"],
            "terminate": True, "engine_pattern": args.get("engine_process_pattern") or "", "engine": args["engine"],
            "engine_units": list(units), "grace_s": args["straggler_grace_s"], "require_free": True})
        self.done["gpu"] = {"summary": gpu.get("summary", ""), "terminated": gpu.get("terminated") or []}
        if gpu.get("summary"):
            self.say(gpu["summary"])
        if gpu.get("failed"):
            raise AnsibleActionFail(f"wait until no worker holds the GPUs: {gpu.get('msg', gpu)}")
        self.done["changed"] = self.done["changed"] or bool(gpu.get("changed"))
