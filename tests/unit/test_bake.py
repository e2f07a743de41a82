"""The bake's watch (module_utils/bake.py): systemd's readings, the smoke and the journal judged into a verdict. The
host's commands are a TEST DOUBLE here (a scripted systemctl and journalctl) and so is the clock; the real systemd
and engine double bake in tests/integration/test_fleet_promotion.py."""

import json

import pytest
from module_harness import Clock

from serving_rollout.module_utils import bake
from serving_rollout.module_utils.host_commands import ModuleFailure

P = {"unit": "sglang.service", "engine": "sglang", "window_s": 30.0, "interval_s": 10.0, "env_files": []}
CRASH = ["Traceback (most recent call last):", '  File "/opt/sglang/srt/managers/scheduler.py", line 1, in run',
         "RuntimeError: CUDA error: an illegal memory access was encountered"]


def show(active="active", restarts="0", invocation="inv-1"):
    return f"ActiveState={active}\nSubState=running\nNRestarts={restarts}\nInvocationID={invocation}\n"


class Host:  # TEST DOUBLE of the host's systemctl and journalctl
    def __init__(self, readings, journal=()):
        self.readings, self.journal, self.calls = list(readings), list(journal), []

    def __call__(self, argv):
        self.calls.append(argv)
        if argv[0] == "systemctl":
            return 0, self.readings.pop(0) if len(self.readings) > 1 else self.readings[0], ""
        lines = "\n".join(json.dumps({"MESSAGE": line, "__REALTIME_TIMESTAMP": "1765100000000000"})
                          for line in self.journal)
        return 0, lines, ""


def smokes(*verdicts):
    answers = list(verdicts)
    return lambda: {"verdict": answers.pop(0) if len(answers) > 1 else answers[0], "reason": "HTTP 500"}


def watch(host, smoke, clock=None):
    clock = clock or Clock()
    return bake.watch(host, smoke, P, clock=clock, sleep=clock.sleep)


def test_a_quiet_unit_passes_after_a_sample_each_interval_over_the_window():
    result = watch(Host([show()]), smokes("pass"))
    assert result["verdict"] == "pass" and result["reasons"] == []
    assert [s["at_s"] for s in result["samples"]] == [0.0, 10.0, 20.0, 30.0]
    assert result["journal"]["crashed"] is False


def test_a_restart_fails_the_bake_at_once_naming_both_counts():
    host = Host([show(), show(), show(restarts="1", invocation="inv-2")])
    result = watch(host, smokes("pass"))
    assert result["verdict"] == "fail" and len(result["samples"]) == 2
    assert result["reasons"] == ["the unit restarted: NRestarts 0 -> 1"]
    # the journal read is the watched invocation's, not the new one's
    assert host.calls[-1][-1] == "_SYSTEMD_INVOCATION_ID=inv-1"


def test_one_lost_smoke_is_noise_and_two_in_a_row_fail():
    assert watch(Host([show()]), smokes("fail", "pass", "pass", "pass"))["verdict"] == "pass"
    result = watch(Host([show()]), smokes("pass", "fail", "fail"))
    assert result["reasons"] == ["the smoke completion failed 2 times in a row: HTTP 500"]


def test_a_crash_in_the_journal_fails_a_unit_that_looks_healthy():
    result = watch(Host([show()], journal=CRASH), smokes("pass"))
    assert result["verdict"] == "fail" and result["reasons"][0].startswith("the engine's journal shows a crash")
    assert "illegal memory access" in result["reasons"][0]


@pytest.mark.parametrize("reading, reason", [
    (show(active="failed"), "the unit is not active at the bake's start: failed"),
])
def test_a_unit_not_active_at_the_start_fails_without_a_sample(reading, reason):
    result = watch(Host([reading]), smokes("pass"))
    assert result["verdict"] == "fail" and result["reasons"] == [reason] and result["samples"] == []


def test_systemd_that_cannot_be_asked_is_a_failure_never_a_pass():
    with pytest.raises(ModuleFailure, match="systemctl show sglang.service failed \\(exit 1\\): Failed to connect"):
        bake.watch(lambda argv: (1, "", "Failed to connect to bus"), smokes("pass"), P)


def test_the_window_keeps_its_two_moments_and_the_engines_readings_there_when_asked():
    clock, reads = Clock(), []

    def metrics():
        reads.append(clock())
        return {"at": 1000.0 + clock(), "ok": True, "series": {"requests": float(len(reads))}}

    result = bake.watch(Host([show()]), smokes("pass"), P, clock=clock, sleep=clock.sleep, metrics=metrics)
    assert reads == [0.0, 30.0]  # at the window's start and at its end, before the journal is read
    assert result["window"] == {"start": 1000.0, "end": 1030.0}
    assert result["metrics"]["end"]["series"] == {"requests": 2.0}
    other = Clock()
    plain = bake.watch(Host([show()]), smokes("pass"), P, clock=other, sleep=other.sleep, wall=lambda: 5.0)
    assert plain["window"] == {"start": 5.0, "end": 5.0} and plain["metrics"] is None
