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


from serving_rollout.play.actions import StepsAction
from serving_rollout.play.host_steps import CONTAINER_RUNTIMES


class ActionModule(StepsAction):
    @staticmethod
    def container(args):
        return args.get("container") if args.get("runtime") in CONTAINER_RUNTIMES else ""

    def required(self, args):
        return ((("key",) if self.container(args) else ()) + (("state_dir", "run_id") if args.get("next_phase") else ())
                + (("base_url",) if args["read_version"] else ()))

    def initial(self):
        return {"changed": False, "container": None, "version": None, "stop_attempted": False, "stop": None,
                "gpu": None}

    def steps(self, args, steps, done):
        unit, container = args["unit"], self.container(args)
        if container:
            done["container"] = steps.module(f"read the container {container}", "container_reading",
                                             runtime=args["runtime"], name=container, key=args["key"])["reading"]
        if args["read_version"]:
            done["version"] = steps.version_report(args, "original", "baseline")
        done["stop_attempted"] = True  # from here a restore expects a new invocation of the original
        stop = steps.module(f"stop {unit} within the tool's deadline", "engine_stop", unit=unit,
                            deadline_s=args["stop_timeout_s"])
        done["stop"] = {k: stop.get(k) for k in ("stopped", "escalated", "how")}
        steps.free_gpus(args, [unit, args["candidate_unit"]])
        if args.get("next_phase"):
            steps.phase(args, args["next_phase"])
