"""Action plugin: render the one-control candidate and prove it in systemd's own reading, one module after
another on the host; the first that fails ends it with its step and message.

1. (adopted unit, or any engine build) the candidate rendered in memory, so a refused change writes nothing
   (serving_recipe); an engine build's two builds asked for their versions and the new one's parser for the
   original's arguments (read_build);
2. a verified snapshot of the original, the restore recipe (serving_snapshot);
3. (adopted unit) the candidate written, parsed back, its diff against the original shown redacted
   (serving_recipe with dest); a managed unit's candidate was written from its recipe before this action;
4. not in check mode: the written candidate checked to differ in exactly the one control (serving_recipe
   compare_path), `systemd-analyze verify`, a daemon-reload, then systemd's readings of both units compared
   (unit_oracle). A candidate systemd reads differently is removed (and systemd reloaded) before it fails.
Documentation: library/candidate_render.py."""

import difflib

from ansible.errors import AnsibleActionFail

from serving_rollout.play.actions import StepsAction

UNIT_DIR = "/etc/systemd/system"


class ActionModule(StepsAction):
    def initial(self):
        return {"changed": False, "snapshot": None, "candidate": None, "comparison": None, "systemd_proof": None,
                "build": None}

    def steps(self, args, steps, done):
        unit, path = args["unit"], f"{UNIT_DIR}/{args['candidate_unit']}"
        recipe_args = {"unit": unit, "change": args["change"], "require_digest": args["require_digest"]}
        managed = args["managed"]
        render_args = {**recipe_args, "accept_systemd_reading": args["accept_systemd_reading"],
                       "copy_dir": args.get("copy_dir") or None}
        engine_build = (args["change"] or {}).get("kind") == "program"
        if not managed or engine_build:
            # An engine build is asked here, before anything is written: both builds' versions, and the new
            # build's own parser reading the original's arguments (module_utils/engine_build.py).
            read = steps.module("render the candidate in memory" + (
                " and ask both engine builds (versions, the new parser on the original's arguments)"
                if engine_build else ""), "serving_recipe", read_build=engine_build, **render_args)
            done["build"] = read.get("build")
            if done["build"]:
                steps.say(f"engine build: {done['build']['delta']}")
        done["snapshot"] = steps.module("keep a verified snapshot of the original", "serving_snapshot", unit=unit,
                                        files=args["snapshot_files"], state=args["snapshot_state"],
                                        dest=args["snapshot_dest"])
        if not managed:
            written = steps.module(f"write {path}", "serving_recipe", dest=path, header=args.get("header") or [],
                                   **render_args)
            done["candidate"] = written["candidate"]
            steps.say("\n".join(difflib.unified_diff(
                written["text_redacted"].splitlines(), written["candidate"]["text_redacted"].splitlines(),
                unit, args["candidate_unit"], lineterm="")))
            if written.get("diff"):
                done["diff"] = written["diff"]
        if self._task.check_mode:
            return
        done["comparison"] = steps.module(f"check {path} differs in exactly one control", "serving_recipe",
                                          compare_path=path, **recipe_args)["comparison"]
        if managed:
            done["candidate"] = {"difference": done["comparison"]["difference"]}
        changed = done["changed"]  # a check and a reload change no file: a second render converges (changed=0)
        steps.module(f"verify {path} with systemd-analyze", "ansible.builtin.command",
                     argv=["systemd-analyze", "verify", path])
        steps.module("reload systemd so the candidate is known", "ansible.builtin.systemd_service", daemon_reload=True)
        done["changed"] = changed
        self.systemd_proof(args, steps, done, path)

    @staticmethod
    def systemd_proof(args, steps, done, path):
        proof = steps.action._execute_module(module_name="unit_oracle", task_vars=steps.task_vars, module_args={
            "original": args["unit"], "candidate": args["candidate_unit"], "change": args["change"],
            "container": args.get("container") or ""})
        if not proof.get("failed"):
            done["systemd_proof"] = proof
            return
        steps.module(f"remove the refused {path}", "ansible.builtin.file", path=path, state="absent")
        steps.module("reload systemd so the refused candidate is gone", "ansible.builtin.systemd_service",
                     daemon_reload=True)
        detail = {k: v for k, v in proof.items() if k not in ("failed", "msg", "changed", "invocation")}
        raise AnsibleActionFail(f"candidate refused before any change: {proof.get('msg', proof)}", result=detail)
