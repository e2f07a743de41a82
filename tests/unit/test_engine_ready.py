"""engine_client.wait_healthy: one wait with a deadline, an early stop when the unit dies."""

from module_harness import Clock as FakeClock

from serving_rollout.module_utils import engine_client


def test_ready_after_a_few_503s(monkeypatch):
    answers = iter([503, 503, 200])
    monkeypatch.setattr(engine_client, "get_json", lambda *a, **k: {"ok": False, "status": next(answers)})
    clock = FakeClock()
    result = engine_client.wait_healthy("http://h:1", "/health_generate", 10, clock=clock, sleep=clock.sleep)
    assert result == {"ok": True, "status": 200, "elapsed_s": 1.0, "polls": 3, "stage": "ready"}


def test_deadline_names_the_url_and_the_last_answer(monkeypatch):
    monkeypatch.setattr(engine_client, "get_json",
                        lambda *a, **k: {"ok": False, "status": None, "error": "GET /health: ConnectionRefusedError"})
    clock = FakeClock()
    result = engine_client.wait_healthy("http://h:1", "/health", 2, clock=clock, sleep=clock.sleep)
    assert not result["ok"] and result["polls"] == 5
    assert result["error"] == ("no HTTP 200 from http://h:1/health within 2 s "
                               "(last: GET /health: ConnectionRefusedError)")


def test_a_unit_that_died_stops_the_wait_early(monkeypatch):
    monkeypatch.setattr(engine_client, "get_json", lambda *a, **k: {"ok": False, "status": 503})
    clock = FakeClock()
    result = engine_client.wait_healthy("http://h:1", "/health_generate", 600, clock=clock, sleep=clock.sleep,
                                        unit_failed=lambda: "sglang-candidate.service is failed/failed")
    assert result["polls"] == 1 and result["stage"] == "crash" and result["error"] == \
        "crash: sglang-candidate.service is failed/failed while waiting for /health_generate"


def log(lines):
    """A start-up log that grows by one line per poll for `lines` polls, then stops (progress())."""
    state = {"n": 0}

    def progress():
        state["n"] = min(state["n"] + 1, lines)
        return state["n"], f"Loading safetensors checkpoint shards: {state['n']}"
    return progress


def test_a_slow_start_that_keeps_logging_is_not_a_hang_and_is_named_slow(monkeypatch):
    monkeypatch.setattr(engine_client, "get_json", lambda *a, **k: {"ok": False, "status": 503})
    clock = FakeClock()
    result = engine_client.wait_healthy("http://h:1", "/health", 30, clock=clock, sleep=clock.sleep,
                                        progress=log(10_000), stall_s=5)
    assert result["stage"] == "slow" and result["elapsed_s"] >= 30
    assert result["error"].startswith("slow start: no HTTP 200 from http://h:1/health within 30 s (last: 503); the "
                                      "engine last logged 0 s ago: 'Loading safetensors checkpoint shards: ")
    assert result["error"].endswith("it is still starting, not hung: raise the ready time-out if this engine loads "
                                    "longer")


def test_a_start_that_stops_logging_is_a_hang_named_with_its_last_line(monkeypatch):
    monkeypatch.setattr(engine_client, "get_json", lambda *a, **k: {"ok": False, "status": 503})
    clock = FakeClock()
    result = engine_client.wait_healthy("http://h:1", "/health", 600, clock=clock, sleep=clock.sleep,
                                        progress=log(4), stall_s=5)
    assert result["stage"] == "hang" and result["elapsed_s"] < 10
    assert "hang: the engine logged nothing for 5 s (stall limit 5 s)" in result["error"]
    assert result["error"].endswith("last log line: 'Loading safetensors checkpoint shards: 4'")
