"""engine_client.wait_healthy: one wait with a deadline, an early stop when the unit dies."""

from ansible.module_utils import engine_client


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_ready_after_a_few_503s(monkeypatch):
    answers = iter([503, 503, 200])
    monkeypatch.setattr(engine_client, "get_json", lambda *a, **k: {"ok": False, "status": next(answers)})
    clock = FakeClock()
    result = engine_client.wait_healthy("http://h:1", "/health_generate", 10, clock=clock, sleep=clock.sleep)
    assert result == {"ok": True, "status": 200, "elapsed_s": 1.0, "polls": 3}


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
    assert result["polls"] == 1 and result["error"] == \
        "sglang-candidate.service is failed/failed while waiting for /health_generate"
