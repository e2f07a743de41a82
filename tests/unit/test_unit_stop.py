"""The tool's own stop deadline: a unit that ignores SIGTERM is SIGKILLed at the deadline, one that
survives even that is named. systemd here is a TEST DOUBLE (a state machine answering systemctl);
the lab's real systemd runs the same stop in tests/integration/test_rollout_faults.py."""

from serving_rollout.module_utils.unit_stop import stop, stop_if_running


class FakeSystemd:
    """TEST DOUBLE of systemctl for one unit: stops after `stops_after` s of its stop, or on SIGKILL
    unless `survives_kill`."""

    def __init__(self, state="active", stops_after=None, survives_kill=False):
        self.state, self.stops_after, self.survives_kill = state, stops_after, survives_kill
        self.now, self.stop_at, self.calls = 0.0, None, []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds
        if self.stop_at is not None and self.now >= self.stop_at:
            self.state = "inactive"

    def run(self, argv):
        self.calls.append(argv[1])
        if argv[1] == "show":
            return 0, self.state + "\n", ""
        if argv[1] == "stop":
            self.stop_at = None if self.stops_after is None else self.now + self.stops_after
            return 0, "", ""
        if argv[1] == "kill":
            if not self.survives_kill:
                self.stop_at = self.now + 0.5
            return 0, "", ""
        raise AssertionError(argv)


def run_stop(fake, deadline=30.0):
    return stop("vllm.service", deadline, fake.run, kill_wait_s=10, clock=fake.clock, sleep=fake.sleep)


def test_an_engine_that_stops_on_sigterm_is_not_killed():
    fake = FakeSystemd(stops_after=2)
    result = run_stop(fake)
    assert result["stopped"] and not result["escalated"] and result["changed"]
    assert "kill" not in fake.calls and result["elapsed_s"] < 3


def test_an_engine_that_ignores_sigterm_is_killed_at_the_deadline():
    fake = FakeSystemd(stops_after=None)
    result = run_stop(fake, deadline=30)
    assert result["stopped"] and result["escalated"]
    assert fake.calls.count("kill") == 1
    assert 30 <= result["elapsed_s"] <= 31.5, result
    assert "ignored its stop for 30 s" in result["how"]


def test_a_unit_that_survives_the_kill_is_a_failed_stop_within_the_deadline_and_kill_wait():
    fake = FakeSystemd(stops_after=None, survives_kill=True)
    result = run_stop(fake, deadline=30)
    assert not result["stopped"] and result["escalated"]
    assert 40 <= result["elapsed_s"] <= 41, result
    assert "still active" in result["how"]


def test_an_already_stopped_unit_is_left_alone():
    fake = FakeSystemd(state="failed")
    result = run_stop(fake)
    assert result["stopped"] and not result["changed"] and fake.calls == ["show"]


class EndedOnItsOwn:
    """TEST DOUBLE of systemctl, answering as real systemd does (checked in the lab: `systemd-run --collect
    /bin/true`, then `systemctl stop` of it) for a transient unit that ended between a read and the stop."""

    def __init__(self, state_after="inactive"):
        self.state_after, self.calls = state_after, []

    def run(self, argv):
        self.calls.append(argv)
        if argv[1] == "stop":
            return 5, "", f"Failed to stop {argv[-1]}: Unit {argv[-1]} not loaded.\n"
        return 0, self.state_after + "\n", ""


def test_a_unit_that_ended_before_its_stop_counts_as_stopped():
    fake = EndedOnItsOwn()
    assert stop_if_running(fake.run, "serving-rollout-watchdog-sglang.service") is None
    assert [argv[1] for argv in fake.calls] == ["stop", "show"]


def test_a_stop_that_fails_on_a_running_unit_is_named_with_its_state():
    fake = EndedOnItsOwn(state_after="active")
    problem = stop_if_running(fake.run, "serving-rollout-watchdog-sglang.service")
    assert problem == ("systemctl stop serving-rollout-watchdog-sglang.service failed (rc 5, now active): Failed to "
                       "stop serving-rollout-watchdog-sglang.service: Unit serving-rollout-watchdog-sglang.service "
                       "not loaded.")
