"""Gates against the engine double (a TEST DOUBLE of SGLang) and a misbehaving HTTP double."""

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import free_port

from serving_rollout.module_utils.gates import run_gate
from serving_rollout.module_utils.prompts import contract_violation, needle_prompt, with_target

COMPLETIONS = ["smoke", "json", "needle", "tool_call", "contract"]
ALL = [*COMPLETIONS, "server_info"]


def options(url, **extra):
    return {"base_url": url, "model": "test/model", "timeout_s": 10, "target_tokens": 2000, **extra}


@pytest.mark.parametrize("gate", ALL)
def test_every_gate_passes_against_a_healthy_engine(engine_double, gate):
    record = run_gate(gate, options(engine_double().url), phase="baseline")
    assert record["verdict"] == "pass", record
    assert record["phase"] == "baseline" and record["duration_s"] > 0
    if gate != "server_info":
        assert record["observed"]["prompt_tokens"] > 0  # the engine's own count is recorded


def test_long_prompts_report_actual_prompt_tokens(engine_double):
    record = run_gate("needle", options(engine_double().url, target_tokens=6000, depth=0.9))
    assert record["verdict"] == "pass"
    assert abs(record["observed"]["prompt_tokens"] - 6000) <= 2


def test_contract_violation_is_recorded_with_the_response(engine_double):
    record = run_gate("contract", options(engine_double({"DOUBLE_FAULT": "extra_word"}).url))
    assert record["verdict"] == "fail" and record["reason"] == "33 words"
    assert len(record["observed"]["content"].split()) == 33


def test_contract_rule_shared_by_the_gate_and_the_cells():
    assert contract_violation("A1 B2 C3", 3) is None
    assert contract_violation("A1 B2 C3 D4", 3) == "4 words"
    assert contract_violation("A1 b2 C3", 3) == "3 words, not matching: ['b2']"
    assert contract_violation(None, 2) == "0 words"
    assert contract_violation("x1 y2", 2, r"^[a-z][0-9]$") is None


@pytest.mark.parametrize("gate", COMPLETIONS)
def test_http_errors_fail_every_gate_with_the_reason(engine_double, gate):
    record = run_gate(gate, options(engine_double({"DOUBLE_FAULT": "fail_requests"}).url))
    assert record["verdict"] == "fail" and record["reason"].startswith("HTTP 500")


def test_unreachable_engine_is_a_failed_gate():
    record = run_gate("smoke", options(f"http://127.0.0.1:{free_port()}"))
    assert record["verdict"] == "fail" and "ConnectionRefusedError" in record["reason"]


class Misbehaving(BaseHTTPRequestHandler):
    """TEST DOUBLE: an engine that answers badly, per the path's mode."""

    mode = "non_json"

    def log_message(self, *args):
        pass

    def do_POST(self):
        try:
            self.answer()
        except BrokenPipeError:
            pass  # the client gave up first (the time-out case)

    def answer(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.mode == "slow":
            time.sleep(3)
        self.send_response(200)
        if self.mode == "truncated":
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(b'data: {"choices": [{"delta": {"content": "hel"}}]}\n\n')
            return
        if self.mode == "error_in_stream":
            # What the lab's real vLLM (0.32 CPU, TP 2) streamed when its engine core died mid-request:
            # the role chunk, then its error response as an event, then [DONE], all under HTTP 200.
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(b'data: {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}\n\n'
                             b'data: {"error": {"message": "EngineCore encountered an issue. See stack trace '
                             b'(above) for the root cause.", "type": "InternalServerError", "param": null, '
                             b'"code": 500}}\n\ndata: [DONE]\n\n')
            return
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"<html>gateway error</html>")


@pytest.fixture
def misbehaving():
    servers = []

    def start(mode):
        handler = type("Handler", (Misbehaving,), {"mode": mode})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()


def test_non_json_body_is_a_failed_gate(misbehaving):
    record = run_gate("json", options(misbehaving("non_json")))
    assert record["verdict"] == "fail" and "not a chat completion" in record["reason"]


def test_truncated_stream_is_a_failed_gate(misbehaving):
    from serving_rollout.module_utils.engine_client import chat

    def streaming_chat(url, body, **kwargs):
        return chat(url, {**body, "stream": True}, **kwargs)

    record = run_gate("smoke", options(misbehaving("truncated"), chat=streaming_chat))
    assert record["verdict"] == "fail" and "truncated" in record["reason"]


def test_an_error_inside_a_stream_is_a_failed_request_never_an_empty_answer(misbehaving):
    from serving_rollout.module_utils.engine_client import chat

    result = chat(misbehaving("error_in_stream"), {"messages": [], "stream": True})
    assert not result["ok"] and result["ttft_s"] is None, result
    assert result["error"] == ("error in the stream: InternalServerError 500: EngineCore encountered an issue. "
                               "See stack trace (above) for the root cause.")


def test_time_out_is_a_failed_gate(misbehaving):
    record = run_gate("smoke", options(misbehaving("slow"), timeout_s=0.5))
    assert record["verdict"] == "fail" and "timed out" in record["reason"]


def test_unknown_gate_lists_the_valid_ones():
    valid = "contract, json, needle, server_info, smoke, tool_call"
    with pytest.raises(ValueError, match=f"unknown gate 'vibes'; valid gates: {valid}"):
        run_gate("vibes", options("http://127.0.0.1:1"))


def test_prompts_hit_their_targets_and_are_unique():
    first, second = with_target("Do it.", 1000), with_target("Do it.", 1000)
    assert len(first.split()) == 1000 and first != second
    assert first.split()[:3] != second.split()[:3]  # no shared prefix for a cache to hit
    prompt = needle_prompt(1000, 0.25, "K1")
    words = prompt.split()
    assert len(words) == 1000 and 0.2 < words.index("K1.") / len(words) < 0.3
    with pytest.raises(ValueError, match="depth must be within 0..1, got 1.5"):
        needle_prompt(1000, 1.5, "K1")


def test_engine_gate_runs_several_gates_in_one_module_run_each_on_its_url_and_every_one_after_a_failure(
        engine_double, monkeypatch, capsys):
    """library/engine_gate.py in-process, as AnsiballZ runs it: runs of a candidate's gates and a routed one, the
    second engine URL answering nothing (its gate failed, named, and the next still run)."""
    from module_harness import run_module

    double = engine_double()
    dead = f"http://127.0.0.1:{free_port()}"
    args = {"base_url": double.url, "phase": "candidate", "timeout_s": 10, "runs": [
        {"gate": "smoke"}, {"gate": "json", "base_url": dead, "phase": "candidate-routed"}, {"gate": "json"}]}
    out = run_module("engine_gate", args, monkeypatch, capsys)
    assert out["record"] is None and not out.get("failed"), out
    assert [(r["gate"], r["phase"], r["engine"], r["verdict"]) for r in out["records"]] == [
        ("smoke", "candidate", double.url, "pass"), ("json", "candidate-routed", dead, "fail"),
        ("json", "candidate", double.url, "pass")], out["records"]
    assert "refused" in out["records"][1]["reason"].lower(), out["records"][1]
