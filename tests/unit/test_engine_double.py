"""The engine double (a TEST DOUBLE of SGLang): start-up lines, endpoints, latency model, faults."""

import json
import os
import signal
import subprocess
import time

import pytest

from serving_rollout.module_utils.engine_client import chat, get_json

PROMPT_2K = " ".join(f"p{i}" for i in range(2000))


def transports(output):
    return [line.split(" via ")[1] for line in output.splitlines() if " via " in line]


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"NCCL_P2P_DISABLE": "1"}, "SHM/direct/direct"),
        ({"NCCL_P2P_DISABLE": "1", "DOUBLE_NCCL_VERSION": "2.30.7"}, "SHM/direct"),
        ({"NCCL_P2P_DISABLE": "0", "NCCL_CUMEM_ENABLE": "0"}, "P2P/IPC"),
        ({"NCCL_CUMEM_ENABLE": "1"}, "P2P/CUMEM"),
        ({"DOUBLE_FAULT": "ignore_p2p"}, "SHM/direct/direct"),
    ],
)
def test_startup_lines_follow_environment(engine_double, env, expected):
    double = engine_double(env)
    output = double.stop()
    seen = transports(output)
    assert seen and set(seen) == {expected}, output
    assert "0[0] -> 1[1]" in output and "1[1] -> 0[0]" in output, output
    version = env.get("DOUBLE_NCCL_VERSION", "2.28.9")
    assert f"NCCL INFO NCCL version {version}+cuda" in output
    lines = output.splitlines()
    ready = next(i for i, line in enumerate(lines) if line.endswith("The server is fired up and ready to roll!"))
    assert all(i < ready for i, line in enumerate(lines) if " via " in line)


@pytest.mark.parametrize("tp, topology, in_effect", [
    (4, None, True), (8, None, True), (8, "two-roots", False), (4, "two-roots", False)])
def test_multi_rank_startup_logs_are_rings_and_trees_judged_by_the_proof(engine_double, tp, topology, in_effect):
    from serving_rollout.module_utils import nccl_facts
    env = {"NCCL_P2P_DISABLE": "0", **({"DOUBLE_NCCL_TOPOLOGY": topology} if topology else {})}
    parsed = nccl_facts.parse_log(engine_double(env, args=["--tp-size", str(tp)]).stop())
    pairs = {(p["src"], p["dst"]) for p in parsed["pairs"]}
    assert (tp - 1, 0) in pairs and (0, tp - 1) not in pairs  # the ring closes one way only
    assert parsed["nranks"] == tp and parsed["proof"]["ranks"] == list(range(tp))
    assert parsed["proof"]["in_effect"] is in_effect, parsed["proof"]
    if topology:
        half = tp // 2
        assert parsed["proof"]["reasons"][0] == f"rank {half - 1} -> rank {half} on channel 00 via SHM/direct/direct"
    # With P2P disabled, every connection is SHM whatever the topology.
    disabled = nccl_facts.parse_log(engine_double({**env, "NCCL_P2P_DISABLE": "1"}, args=["--tp-size", str(tp)]).stop())
    assert {t for p in disabled["pairs"] for t in p["transports"]} == {"SHM"}


def test_health_is_503_while_starting_then_200(engine_double):
    double = engine_double({"DOUBLE_STARTUP_S": "30"}, ready=False)
    deadline = time.monotonic() + 20  # until it listens (the interpreter starting), never past its 30 s start-up
    while (answer := get_json(double.url, "/health_generate"))["status"] is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert answer["status"] == 503, answer
    double.stop()
    double = engine_double({"DOUBLE_STARTUP_S": "0.5"}, ready=False)
    assert double.wait_ready()
    assert get_json(double.url, "/health_generate")["status"] == 200


def test_info_endpoints_report_parsed_args(engine_double):
    double = engine_double(args=["--disable-custom-all-reduce"])
    for path in ("/server_info", "/get_server_info"):
        info = get_json(double.url, path)["body"]
        assert info["tp_size"] == 2 and info["context_length"] == 8192
        assert info["revision"] == "a" * 40 and info["disable_custom_all_reduce"] is True
        assert info["version"] == "0.5.5"
    models = get_json(double.url, "/v1/models")["body"]["data"]
    assert models[0]["id"] == "test/model" and models[0]["max_model_len"] == 8192
    assert get_json(double.url, "/model_info")["body"]["model_path"] == "test/model"


def test_streaming_and_plain_completions_honor_max_tokens_and_usage(engine_double):
    double = engine_double()
    body = {"messages": [{"role": "user", "content": "one two three"}], "max_tokens": 7}
    plain = chat(double.url, body)
    streamed = chat(double.url, {**body, "stream": True})
    for result in (plain, streamed):
        assert result["ok"], result
        assert len(result["content"].split()) == 7
        assert result["usage"] == {"prompt_tokens": 3, "completion_tokens": 7, "total_tokens": 10}
    assert streamed["chunks"] == 8  # 7 tokens and the closing chunk with usage


def test_json_response_format_and_tool_call(engine_double):
    double = engine_double()
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}
    result = chat(double.url, {"messages": [{"role": "user", "content": "city: Oslo"}],
                               "response_format": {"type": "json_schema",
                                                   "json_schema": {"name": "t", "schema": schema}}})
    assert json.loads(result["content"]) == {"city": "Oslo", "days": 1}
    tool = {"type": "function", "function": {"name": "lookup_order", "parameters": {
        "type": "object", "properties": {"order_id": {"type": "string"}}}}}
    result = chat(double.url, {"messages": [{"role": "user", "content": "order_id: ORD-77"}],
                               "tools": [tool], "stream": True})
    call = result["tool_calls"][0]["function"]
    assert call["name"] == "lookup_order" and json.loads(call["arguments"]) == {"order_id": "ORD-77"}


def test_exact_word_task_and_needle(engine_double):
    double = engine_double()
    exact = chat(double.url, {"messages": [{"role": "user", "content": "Reply with exactly 32 code words."}],
                              "max_tokens": 64})
    assert len(exact["content"].split()) == 32
    haystack = "filler The secret code is K7Q9. more filler What is the secret code?"
    needle = chat(double.url, {"messages": [{"role": "user", "content": haystack}]})
    assert needle["content"] == "K7Q9"


def measure(url, n=15, tokens=8):
    ttfts, decodes = [], []
    for i in range(n):
        prompt = f"u{i} " + PROMPT_2K[: len(PROMPT_2K) - len(f"u{i} ")]
        result = chat(url, {"messages": [{"role": "user", "content": prompt}], "max_tokens": tokens,
                            "stream": True})
        assert result["ok"], result
        ttfts.append(result["ttft_s"])
        decodes.append(result["e2e_s"])
    # The fastest of n: a busy machine only ever adds delay (scheduling, the GIL), never removes
    # it, so the minimum is the double's own timing and holds while other jobs load the machine.
    # (E2E, not E2E - TTFT: tokens are due on the schedule set at the start, so a late first
    # token shortens the gap after it.)
    return min(ttfts), min(decodes), result["usage"]["prompt_tokens"]


def test_latency_follows_configured_model(engine_double):
    """Never faster than its model (a sleep is never short), and a model ten times slower per
    token is slower by about that much. How close it comes to the model on an idle machine is a
    figure (bench/bench_ab_accuracy.py), not a test: a busy machine only adds delay."""
    env = {"DOUBLE_BASE_TTFT_MS": "2", "DOUBLE_PREFILL_MS_PER_1K": "20", "DOUBLE_DECODE_MS_PER_TOKEN": "5"}
    ttft, e2e, prompt_tokens = measure(engine_double(env).url)
    expected_ttft = 0.002 + 0.020 * prompt_tokens / 1000
    assert ttft >= expected_ttft - 0.001 and e2e >= expected_ttft + 7 * 0.005 - 0.001, (ttft, e2e, expected_ttft)
    _, slow_e2e, _ = measure(engine_double({**env, "DOUBLE_DECODE_MS_PER_TOKEN": "50"}).url, n=5)
    assert slow_e2e >= expected_ttft + 7 * 0.050 - 0.001
    assert slow_e2e - e2e > 7 * 0.045 - 0.050, (e2e, slow_e2e)  # 315 ms apart by the model; a margin of 50 ms


def test_control_effect_makes_prefill_faster_by_the_configured_fraction(engine_double):
    env = {"DOUBLE_BASE_TTFT_MS": "0", "DOUBLE_PREFILL_MS_PER_1K": "100",
           "DOUBLE_EFFECT_P2P": "prefill=0.25"}
    on, _, tokens = measure(engine_double({**env, "NCCL_P2P_DISABLE": "0"}).url, n=9)
    off, _, _ = measure(engine_double({**env, "NCCL_P2P_DISABLE": "1"}).url, n=9)
    model = 0.100 * tokens / 1000
    # never faster than the model; the effect's 25 % (about 50 ms) shows with half of it to spare
    assert off >= model - 0.001 and on >= 0.75 * model - 0.001, (on, off, model)
    assert off - on > 0.125 * model, (on, off, model)


def test_fault_fail_at_start_exits_with_traceback(engine_double):
    double = engine_double({"DOUBLE_FAULT": "fail_at_start"}, ready=False)
    assert double.proc.wait(5) == 1
    assert "Traceback" in double.stop()


def test_fault_hang_before_ready_never_becomes_ready(engine_double):
    double = engine_double({"DOUBLE_FAULT": "hang_before_ready", "DOUBLE_STARTUP_S": "0.1"}, ready=False)
    assert not double.wait_ready(timeout=1.0)
    assert double.proc.poll() is None
    assert "ready to roll" not in double.stop()


def test_fault_crash_after_n_requests(engine_double):
    double = engine_double({"DOUBLE_FAULT": "crash_after:2"})
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    assert chat(double.url, body)["ok"]
    chat(double.url, body)  # the second completes, then the process dies
    assert double.proc.wait(5) == 1
    assert not chat(double.url, body, timeout=2)["ok"]


def test_fault_extra_word_breaks_exact_length(engine_double):
    double = engine_double({"DOUBLE_FAULT": "extra_word"})
    result = chat(double.url, {"messages": [{"role": "user", "content": "exactly 32 code words"}],
                               "max_tokens": 64})
    assert len(result["content"].split()) == 33


def test_fault_drift_slows_down_over_time(engine_double):
    env = {"DOUBLE_BASE_TTFT_MS": "10", "DOUBLE_PREFILL_MS_PER_1K": "0", "DOUBLE_FAULT": "drift:600"}
    double = engine_double(env)
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1}
    started = time.monotonic()
    chat(double.url, body)
    time.sleep(1.0)
    later = chat(double.url, body)["ttft_s"]
    # 600x per minute: +1000 % a second; at least one second on, the base 10 ms is at least 110 ms
    assert time.monotonic() - started >= 1.0 and later >= 0.100, later


def test_fault_straggler_outlives_stop(engine_double):
    double = engine_double({"DOUBLE_FAULT": "straggler:30"})
    double.stop()
    found = subprocess.run(["pgrep", "-f", "time.sleep\\(30.0\\)"], capture_output=True, text=True)
    pids = [int(p) for p in found.stdout.split()]
    try:
        assert pids, "no straggler process found after stop"
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGKILL)


def test_fault_file_for_p2p_applies_only_when_p2p_is_allowed(tmp_path):
    import engine_double as double

    (tmp_path / "sglang.service").write_text("startup:2\n")
    (tmp_path / "sglang.service+p2p").write_text("fail_at_start\n")
    env = {"DOUBLE_FAULT_DIR": str(tmp_path)}
    disabled = double.faults_for({**env, "NCCL_P2P_DISABLE": "1"}, unit="sglang.service")
    allowed = double.faults_for({**env, "NCCL_P2P_DISABLE": "0"}, unit="sglang.service")
    other = double.faults_for({**env, "NCCL_P2P_DISABLE": "0"}, unit="sglang-candidate.service")
    assert disabled == {"startup": "2"}
    assert allowed == {"startup": "2", "fail_at_start": ""}
    assert other == {}


def test_fault_file_for_custom_all_reduce_applies_only_with_it_on(tmp_path):
    import engine_double as double

    (tmp_path / "sglang-candidate.service+custom_ar").write_text("slowdown:0.5\n")
    env = {"DOUBLE_FAULT_DIR": str(tmp_path), "NCCL_P2P_DISABLE": "1"}
    assert double.faults_for(env, unit="sglang-candidate.service", custom_ar=True) == {"slowdown": "0.5"}
    assert double.faults_for(env, unit="sglang-candidate.service") == {}


def test_fault_burst_cells_hits_cell_requests_only_and_lasts_a_count_of_them(engine_double):
    """A neighbour tied to what it tests: the first cell request brings it, N cell requests later it
    is gone; a gate's request (no cell id) never meets it, however long anything took."""
    env = {"DOUBLE_BASE_TTFT_MS": "500", "DOUBLE_PREFILL_MS_PER_1K": "0", "DOUBLE_FAULT": "burst_cells:2:1.0"}
    double = engine_double(env)
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1, "stream": True}

    def ttft(request_id=None):
        return chat(double.url, body, request_id=request_id)["ttft_s"]

    assert ttft() < 0.8  # a gate: 500 ms, never doubled
    busy = subprocess.run(["pgrep", "-fc", "end = time.time"], capture_output=True, text=True).stdout.strip()
    assert busy in ("", "0")
    assert ttft("serving-rollout-cell-1k-candidate-0") >= 1.0  # doubled
    assert subprocess.run(["pgrep", "-fc", "end = time.time"], capture_output=True, text=True).stdout.strip() == "2"
    assert ttft("serving-rollout-cell-1k-candidate-1") >= 1.0
    assert ttft("serving-rollout-cell-1k-candidate-2") < 0.8  # the burst is over after 2 cell requests
    assert ttft() < 0.8
    double.stop()


@pytest.mark.parametrize("shape, env, args, custom_ar", [
    ("sglang", {"NCCL_P2P_DISABLE": "0"}, (), "enabled"),
    ("sglang", {"NCCL_P2P_DISABLE": "0"}, ("--disable-custom-all-reduce",), "disabled"),
    ("vllm", {"NCCL_P2P_DISABLE": "0", "DOUBLE_KV_TOKENS": "425424"}, (), "enabled"),
    ("vllm", {"NCCL_P2P_DISABLE": "1"}, (), "disabled"),  # no P2P: the engine turns it off itself
])
def test_the_doubles_start_reads_as_its_engine_through_the_same_adapter(engine_double, shape, env, args, custom_ar):
    """The double prints each engine's shapes from the engine adapter: read back by the same adapter that
    reads the corpus of real logs, its start is that engine's, reaching its ready phase, no crash."""
    from serving_rollout.module_utils import engine_adapters

    double = engine_double({**env, "DOUBLE_SHAPE": shape}, args=args)
    read = engine_adapters.read_log(shape, double.stop())
    assert read["phase"] == "ready" and read["ready_logged"], read
    assert not read["crashed"] and read["errors"] == [], read
    assert read["custom_all_reduce"]["state"] == custom_ar
    assert read["nccl_versions"] == ["2.28.9"]
    assert read["kv_cache_tokens"] == int(env.get("DOUBLE_KV_TOKENS", "500000"))
    tokens = read["kv_cache_tokens"]  # the concurrency it states, in its engine's own terms
    assert read["max_concurrency"] == (min(4096, tokens // 128) if shape == "sglang" else round(tokens / 8192, 2))


@pytest.mark.parametrize("shape", ["sglang", "vllm"])
def test_the_kv_loss_fault_shrinks_the_kv_cache_its_start_reports(engine_double, shape):
    from serving_rollout.module_utils import engine_adapters

    double = engine_double({"DOUBLE_SHAPE": shape, "DOUBLE_FAULT": "kv_loss:0.2", "NCCL_P2P_DISABLE": "0"})
    read = engine_adapters.read_log(shape, double.stop())
    assert read["kv_cache_tokens"] == 400000 and read["phase"] == "ready" and not read["crashed"], read
    assert read["max_concurrency"] == (3125 if shape == "sglang" else 48.83)


@pytest.mark.parametrize("fault, crash, cause", [
    ("fail_at_start", "python-traceback", "RuntimeError: injected fault: fail_at_start"),
    ("worker_died_at_start", "worker-died", "Worker proc VllmWorker-1 died unexpectedly")])
def test_the_doubles_start_faults_read_as_crashes_with_their_cause(engine_double, fault, crash, cause):
    from serving_rollout.module_utils import engine_adapters

    double = engine_double({"DOUBLE_FAULT": fault, "DOUBLE_SHAPE": "vllm"}, ready=False)
    lines = []
    while not any(cause.split(":")[0] in line for line in lines):  # printed at once at start; no time limit needed
        line = double.proc.stdout.readline()
        assert line, f"the double ended without its fault's line: {lines}"
        lines.append(line.rstrip("\n"))
    read = engine_adapters.read_log("vllm", "\n".join(lines) + "\n" + double.stop())
    assert read["crashed"] and read["crash"] == crash, read
    assert cause in read["cause"], read["cause"]
