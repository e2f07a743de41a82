"""Action plugin: everything the preflight checks read on the host, one module after another (read-only): the
unit's state, the engine's health route and its own arguments, NVML, the current invocation's journal, the
processes on the GPUs and, for a container unit, its container's id. A read that fails ends it with its step
and message. The ten checks are judged from `facts` (filter_plugins/preflight.py: preflight_checks).
Documentation: library/preflight_read.py."""

from serving_rollout.play.actions import StepsAction
from serving_rollout.play.host_steps import CONTAINER_RUNTIMES

# Codes a health route answers with that the checks judge (anything else: the engine does not serve).
HEALTH_CODES = [-1, 200, 401, 403, 404, 500, 502, 503]


class ActionModule(StepsAction):
    def initial(self):
        return {"changed": False, "facts": {}}

    def steps(self, args, steps, done):
        unit, env_files, recipe = args["unit"], args.get("env_files") or [], args.get("recipe") or {}
        status = steps.module(f"read {unit}'s state", "ansible.builtin.systemd_service", name=unit)["status"]
        health = steps.module("read the engine's health", "ansible.builtin.uri", url=f"{args['base_url']}/health",
                              timeout=10, status_code=HEALTH_CODES)
        info = steps.module("ask the engine for its arguments", "engine_gate", base_url=args["base_url"],
                            gate="server_info", env_files=env_files, timeout_s=10,
                            phase=args.get("phase") or "preflight",
                            **({"api_key_var": args["api_key_var"]} if args.get("api_key_var") else {}))["record"]
        nvml = steps.module("read NVML", "nvml_info")["nvml"]
        journal = steps.module(f"scan {unit}'s current invocation", "journal_scan", unit=unit, engine=args["engine"],
                               extra_error_patterns=args.get("extra_error_patterns") or [], env_files=env_files)
        gpu = steps.module("list the processes on the GPUs", "gpu_free", pattern=args.get("gpu_process_pattern") or "")
        done["status"] = status
        done["facts"] = {"unit": {**status, "Id": unit}, "health_status": health.get("status"),
                         "server_info": info.get("observed") if info.get("verdict") == "pass" else {},
                         "recipe": recipe, "nvml": nvml, "journal": journal["scan"],
                         "gpu_processes": gpu["processes"], "container_id": self.container_id(steps, recipe)}

    @staticmethod
    def container_id(steps, recipe):
        """The id of the unit's container (its processes run in a scope named after it); '' when there is none."""
        if recipe.get("runtime") not in CONTAINER_RUNTIMES or not recipe.get("container_name"):
            return ""
        read = steps.action._execute_module(
            module_name="ansible.builtin.command", task_vars=steps.task_vars,
            module_args={"argv": [recipe["runtime"], "inspect", "--format", "{{.Id}}", recipe["container_name"]]})
        return (read.get("stdout") or "").strip() if not read.get("failed") and read.get("rc") == 0 else ""
