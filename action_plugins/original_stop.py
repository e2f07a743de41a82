"""Action plugin: stop the original for the swap, keeping what only the running original can tell. Each step
runs on the host as its own module, in order; the first that fails ends it with its step and message, and
what was read until then is returned all the same (the evidence names ended processes).

1. a container's reading as its runtime runs it (container_reading: its --env-file contents, the image's ENV,
   the runtime's defaults), read before the container goes, compared after the candidate's starts;
2. for an engine upgrade, the engine's own version report (engine_gate version, phase baseline);
3. the stop within the tool's deadline (engine_stop: SIGKILL of its processes if it ignores SIGTERM);
4. the wait until no worker holds the GPUs (gpu_free), ending only the stopped engine's own stragglers;
5. with C(next_phase), that phase recorded (rollout_phase) and returned as the task's progress fact.
Documentation: library/original_stop.py."""

from ansible.module_utils.parsing.convert_bool import boolean

from serving_rollout.host_steps import CONTAINER_RUNTIMES, StepsAction


class ActionModule(StepsAction):
    REQUIRED = ("unit", "candidate_unit", "stop_timeout_s", "gpu_free_timeout_s", "engine", "straggler_grace_s")
    OPTIONAL = ("connection", "runtime", "container", "key", "read_version", "base_url", "api_key_var", "env_files",
                "gate_timeout_s", "gpu_process_pattern", "engine_process_pattern", "next_phase", "state_dir", "run_id")
    _VALID_ARGS = frozenset(REQUIRED + OPTIONAL)

    @staticmethod
    def container(args):
        return args.get("container") if args.get("runtime") in CONTAINER_RUNTIMES else ""

    def required(self, args):
        return (self.REQUIRED + (("key",) if self.container(args) else ())
                + (("state_dir", "run_id") if args.get("next_phase") else ())
                + (("base_url",) if boolean(args.get("read_version", False), strict=False) else ()))

    def initial(self):
        return {"changed": False, "container": None, "version": None, "stop_attempted": False, "stop": None,
                "gpu": None}

    def steps(self, args, steps, done):
        unit, container = args["unit"], self.container(args)
        if container:
            done["container"] = steps.module(f"read the container {container}", "container_reading",
                                             runtime=args["runtime"], name=container, key=args["key"])["reading"]
        if boolean(args.get("read_version", False), strict=False):
            done["version"] = steps.version_report(args, "original", "baseline")
        done["stop_attempted"] = True  # from here a restore expects a new invocation of the original
        stop = steps.module(f"stop {unit} within the tool's deadline", "engine_stop", unit=unit,
                            deadline_s=args["stop_timeout_s"])
        done["stop"] = {k: stop.get(k) for k in ("stopped", "escalated", "how")}
        steps.free_gpus(args, [unit, args["candidate_unit"]])
        if args.get("next_phase"):
            steps.phase(args, args["next_phase"])
