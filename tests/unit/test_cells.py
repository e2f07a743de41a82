"""Latency cells against the engine double: per-request records, contract, failures, telemetry."""

import json

import pytest
from module_harness import run_module

from serving_rollout.module_utils.cells import Telemetry, run_cell
from serving_rollout.module_utils.host_lock import lock_lost
from serving_rollout.module_utils.unit_stop import engine_changed
from serving_rollout.play import arm
from serving_rollout.play.arm import (
    cell_size,
    look_at,
    merge_chunks,
    progress,
    summary,
)


def test_cell_records_every_request_with_actual_prompt_tokens(engine_double):
    double = engine_double({"DOUBLE_PREFILL_MS_PER_1K": "10", "DOUBLE_DECODE_MS_PER_TOKEN": "1"})
    cell = run_cell({"base_url": double.url, "requests": 4, "prompt_tokens": 1500})
    assert len(cell["requests"]) == 4 and cell["failures"] == 0 and cell["contract_violations"] == []
    for record in cell["requests"]:
        assert abs(record["prompt_tokens"] - 1500) <= 2 and record["completion_tokens"] == 32
        assert 0 < record["ttft_s"] < record["e2e_s"] and record["decode_tps"] > 0


def test_contract_violations_are_kept_with_the_response(engine_double):
    double = engine_double({"DOUBLE_FAULT": "extra_word", "DOUBLE_DECODE_MS_PER_TOKEN": "0"})
    cell = run_cell({"base_url": double.url, "requests": 2, "prompt_tokens": 200})
    assert [v["index"] for v in cell["contract_violations"]] == [0, 1]
    assert len(cell["contract_violations"][0]["response"].split()) == 33


def test_failed_requests_are_counted(engine_double):
    double = engine_double({"DOUBLE_FAULT": "fail_requests"})
    cell = run_cell({"base_url": double.url, "requests": 3, "prompt_tokens": 100})
    assert cell["failures"] == 3 and all(r["error"].startswith("HTTP 500") for r in cell["requests"])


def test_telemetry_without_nvml_says_why():
    with Telemetry(0.1) as telemetry:
        pass
    summary = telemetry.summary()
    assert summary["available"] is False and summary["reason"].startswith("NVML not available")


def test_api_key_is_read_from_the_environment_files(tmp_path):
    import pytest

    from serving_rollout.module_utils.env_files import read_env_value

    first, second = tmp_path / "a.env", tmp_path / "b.env"
    first.write_text("OTHER=1\n")
    second.write_text('SGLANG_API_KEY="sk-1"\n')
    assert read_env_value([str(first), str(second)], "SGLANG_API_KEY") == "sk-1"
    with pytest.raises(ValueError, match=r"MISSING is not set in \["):
        read_env_value([str(first)], "MISSING")
    with pytest.raises(ValueError, match="cannot read EnvironmentFile /nonexistent.env for X"):
        read_env_value(["/nonexistent.env"], "X")


def test_cell_in_chunks_merges_to_one_cell_with_progress(engine_double):
    double = engine_double({"DOUBLE_FAULT": "extra_word", "DOUBLE_DECODE_MS_PER_TOKEN": "1"})
    chunks = [dict(run_cell({"base_url": double.url, "requests": size, "first_index": first, "prompt_tokens": 300}),
                   name="4k", arm="candidate")
              for first, size in ((0, 2), (2, 2), (4, 1))]
    cell = merge_chunks(chunks[:2])
    assert progress(cell, 5).startswith("request 4 of 5, elapsed ")
    assert progress(cell, 5).endswith(" ms") and "running median E2E" in progress(cell, 5)
    cell = merge_chunks(chunks)
    assert [r["index"] for r in cell["requests"]] == [0, 1, 2, 3, 4]
    assert [v["index"] for v in cell["contract_violations"]] == [0, 1, 2, 3, 4] and cell["failures"] == 0
    assert [t["requests"] for t in cell["telemetry"]] == [[0, 1], [2, 3], [4, 4]]
    assert cell["elapsed_s"] == pytest.approx(sum(c["elapsed_s"] for c in chunks))


def test_merge_and_progress_refuse_bad_input():
    with pytest.raises(ValueError, match="non-empty list"):
        merge_chunks([])
    with pytest.raises(ValueError, match="several cells"):
        merge_chunks([{"name": "4k", "arm": "candidate", "requests": []},
                           {"name": "1k", "arm": "candidate", "requests": []}])
    with pytest.raises(ValueError, match="merged cell"):
        progress(None, 4)
    assert progress({"requests": [{"error": "HTTP 500", "e2e_s": 0.1}]}, 4) == (
        "request 1 of 4, elapsed 0.0 s, running median E2E n/a")


def test_cpu_conditions_from_proc_stat():
    from serving_rollout.module_utils.conditions import cpu_conditions, cpu_times

    before = cpu_times("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3\n")
    after = cpu_times("cpu  300 0 200 800 100 0 0 100 0 0\n")
    assert before == (200, 1000, 0) and after == (600, 1500, 100)
    assert cpu_conditions(before, after) == {"cpu_busy": 0.8, "cpu_steal": 0.2}


def test_a_disturbed_chunk_is_measured_again_at_most_remeasure_max_times(monkeypatch):
    from serving_rollout.module_utils import cells

    busy = iter([0.95, 0.97, 0.5])
    monkeypatch.setattr(cells, "run_cell", lambda options: {
        "requests": [{"e2e_s": 1.0}], "conditions": {"cpu_busy": next(busy), "cpu_steal": 0.0}})
    result = cells.run_measured({"reference_conditions": {"cpu_busy": 0.5, "cpu_steal": 0.0}, "remeasure_max": 2})
    assert result["disturbed"] is None and [r["conditions"]["cpu_busy"] for r in result["remeasured"]] == [0.95, 0.97]
    busy = iter([0.95, 0.97, 0.99])
    result = cells.run_measured({"reference_conditions": {"cpu_busy": 0.5, "cpu_steal": 0.0}, "remeasure_max": 2})
    assert "host CPU busy 50% (baseline) vs 99% (candidate)" in result["disturbed"]
    assert len(result["remeasured"]) == 2  # the kept attempt is not in the discarded list


def test_a_chunk_measured_again_is_not_warmed_again_and_keeps_its_warm_up(monkeypatch):
    from serving_rollout.module_utils import cells

    busy, warmups = iter([0.95, 0.5]), []

    def chunk(options):
        warmups.append(options.get("warmup"))
        return {"requests": [{"e2e_s": 1.0}], "conditions": {"cpu_busy": next(busy), "cpu_steal": 0.0},
                **({"warmup": {"requests": 4, "failures": 0}} if options.get("warmup") else {})}

    monkeypatch.setattr(cells, "run_cell", chunk)
    result = cells.run_measured({"reference_conditions": {"cpu_busy": 0.5, "cpu_steal": 0.0}, "remeasure_max": 2,
                                 "warmup": 4})
    assert warmups == [4, 0] and result["warmup"] == {"requests": 4, "failures": 0}, (warmups, result)


def test_runnable_processes_from_proc_stat_and_a_neighbours_burst_is_named():
    from serving_rollout.module_utils.conditions import conditions_problem, procs_running

    assert procs_running("cpu  1 2 3 4\nprocs_running 5\nprocs_blocked 0\n") == 5
    assert procs_running("cpu  1 2 3 4\n") is None
    limits = {"cpu_busy": 0.35, "cpu_steal": 0.05, "cpu_runnable": 1.5, "temp_c": 10, "power_frac": 0.15}
    assert conditions_problem({"cpu_runnable": 2}, {"cpu_runnable": 4}, limits) == "runnable processes 2 vs 4"
    assert conditions_problem({"cpu_runnable": 2}, {"cpu_runnable": 3}, limits) is None


def test_ab_look_uses_the_look_it_is_given_whatever_the_brackets_size():
    # A first bracket of 8 and a candidate's first chunk of 4 (of 12, looks of 4): look 1 of 3, and a
    # candidate twice as fast with no overlap is clear there. (The look was once inferred from the
    # bracket's size, which made this look 2 and the second chunk the last look, never stopping.)
    def cell(e2e):
        return {"requests": [{"ttft_s": v / 10, "e2e_s": v, "error": None} for v in e2e]}

    baseline = cell([0.147, 0.148, 0.146, 0.150, 0.147, 0.149, 0.148, 0.146])
    candidate = cell([0.072, 0.073, 0.071, 0.074])
    look = look_at(candidate, baseline, 1, 12, 4, 8, 0.05, 1)
    assert look["look"] == 1 and look["stop"] is True and look["metrics"]["e2e_s"] == "better"
    assert look["design"] == [[4, 8], [8, 8], [12, 12]]
    assert look_at(candidate, baseline, 3, 12, 4, 8, 0.05, 1)["stop"] is False  # the last look decides, never stops
    with pytest.raises(ValueError, match="look must be within 1..3, got 4"):
        look_at(candidate, baseline, 4, 12, 4, 8)
    with pytest.raises(ValueError, match="got 12, 0, 8"):
        look_at(candidate, baseline, 1, 12, 0, 8)


def test_the_token_contract_asks_for_exactly_n_tokens_and_checks_the_engines_count():
    # A stand-in for engine_client.chat (same signature) that returns what an engine reports.
    sent = []

    def engine(base_url, body, api_key=None, timeout=60.0, request_id=None):
        sent.append(body)
        count = 48 if len(sent) == 1 else 47
        return {"ok": True, "status": 200, "content": "random words", "tool_calls": None, "error": None,
                "usage": {"prompt_tokens": 900, "completion_tokens": count}, "ttft_s": 0.1, "e2e_s": 0.5}

    cell = run_cell({"base_url": "http://x", "requests": 2, "prompt_tokens": 100, "contract": "tokens",
                     "contract_tokens": 48, "chat": engine, "telemetry_interval_s": 60})
    assert all(b["max_tokens"] == b["min_tokens"] == 48 and b["ignore_eos"] is True for b in sent), sent
    assert [r["contract_ok"] for r in cell["requests"]] == [True, False]
    assert cell["contract_violations"] == [{"index": 1, "response": "47 completion tokens, not 48"}]


def test_an_arms_cell_size_summary_and_go_on_reasons():
    assert [cell_size(arm, 12, 4, 8, True) for arm in ("baseline-1", "candidate", "baseline-2")] == [8, 12, 4]
    assert [cell_size(arm, 12, 4, 8, False) for arm in ("baseline-1", "candidate", "baseline-2")] == [12, 12, 12]
    with pytest.raises(ValueError, match="chunk must be an integer of at least 1, got 0"):
        cell_size("candidate", 12, 0, 8, True)
    with pytest.raises(ValueError, match="arm must be .* got 'candidat'"):
        cell_size("candidat", 12, 4, 8, True)
    cell = {"requests": [{"ttft_s": 0.1, "e2e_s": 1.0, "prompt_tokens": 1003, "error": None},
                         {"ttft_s": 0.3, "e2e_s": 3.0, "prompt_tokens": 1001, "error": None},
                         {"ttft_s": None, "e2e_s": None, "prompt_tokens": None, "error": "HTTP 500"}],
            "failures": 1, "contract_violations": [], "remeasured": [{}], "disturbed": ["host CPU busy 5% vs 90%"],
            "sequential": {"stop": True, "look": 1, "looks": 3}}
    assert summary(cell) == ("n=3, median TTFT 200.0 ms, median E2E 2000.0 ms, prompt tokens 1002, 1 failed, "
                             "0 contract violations, stopped at look 1 of 3 (verdict clear), 1 chunk(s) re-measured, "
                             "still disturbed: host CPU busy 5% vs 90%")
    # A request that answered without a first token (nothing streamed) has no TTFT: the others' median.
    cell["requests"].append({"ttft_s": None, "e2e_s": 2.0, "prompt_tokens": 1002, "error": None})
    assert summary(cell).startswith("n=4, median TTFT 200.0 ms, median E2E 2000.0 ms, prompt tokens 1002, 1 failed")
    assert lock_lost({"held": True}) is None
    assert lock_lost({"held": False, "lock": {"holder": "root@c pid 9", "run_id": "r2"}}) == (
        "the lock was taken over by root@c pid 9 (run r2); this run stops measuring")
    ready = {"MainPID": 41, "InvocationID": "abcdef0123456789", "NRestarts": 0}
    assert engine_changed(ready, {"ActiveState": "active", "MainPID": "41", "InvocationID": "abcdef0123456789",
                                  "NRestarts": "0"}) is None  # systemd's numbers may come as text
    assert engine_changed(ready, {"ActiveState": "activating", "MainPID": 0, "InvocationID": "ffff",
                                  "NRestarts": 1}) == (
        "the candidate engine exited during the cells: ActiveState activating, MainPID 41 -> 0, "
        "NRestarts 0 -> 1, InvocationID abcdef012345 -> ffff")
    assert engine_changed(ready, {"ActiveState": "active", "MainPID": 77, "InvocationID": "99",
                                  "NRestarts": 1}).startswith("the candidate engine restarted during the cells")


def test_may_go_on_reads_the_lock_and_the_candidates_identity_on_the_host(tmp_path):
    from serving_rollout.module_utils.cells import may_go_on

    lock = tmp_path / "sglang.service.lock"
    lock.write_text(json.dumps({"token": "mine", "holder": "root@ctl pid 9", "run_id": "r1"}))
    shown = {"ActiveState": "active", "MainPID": "41", "InvocationID": "abc", "NRestarts": "0"}
    calls = []

    def run(argv):  # systemd's reading, as systemctl show prints it
        calls.append(argv)
        return 0, "".join(f"{key}={value}\n" for key, value in shown.items()), ""

    guard = {"lock_path": str(lock), "lock_token": "mine", "lease_s": 30, "candidate_unit": "c.service",
             "candidate_identity": {"MainPID": 41, "InvocationID": "abc", "NRestarts": 0}}
    assert may_go_on(guard, run) is None
    assert calls == [["systemctl", "show", "-p", "ActiveState,MainPID,InvocationID,NRestarts", "--", "c.service"]]
    assert (tmp_path / "sglang.service.lock.lease").exists()  # the candidate arm's lease renewed before the chunk
    shown.update(MainPID="77", NRestarts="1")
    assert may_go_on(guard, run, "last cell").startswith("the candidate engine restarted during the last cell")
    # a baseline arm asks the lock only; a lock taken over is the reason, before systemd is asked
    assert may_go_on({"lock_path": str(lock), "lock_token": "mine"}, run) is None and len(calls) == 2
    assert may_go_on(dict(guard, lock_token="stale"), run) == (
        "the lock was taken over by root@ctl pid 9 (run r1); this run stops measuring")
    lock.unlink()
    assert may_go_on(guard, run).startswith("the lock was taken over by nobody (it was removed)")
    assert len(calls) == 2


def test_the_go_on_checks_give_the_actions_reasons():
    assert lock_lost({"held": True}) is None
    assert lock_lost({"held": False}) == "the lock was taken over by nobody (it was removed) (run none); " \
        "this run stops measuring"
    ready = {"MainPID": 41, "InvocationID": "abc", "NRestarts": 0}
    assert engine_changed(ready, dict(ready, ActiveState="active")) is None
    exited = engine_changed(ready, dict(ready, ActiveState="failed", MainPID=0), "last cell")
    assert exited.startswith("the candidate engine exited during the last cell: ActiveState failed, MainPID 41 -> 0")


# ---- the endurance cell's verdict (serving_rollout/play/arm.py endurance_judgement) -----------------------

def endurance_cell(chunk_e2e, errors=()):
    requests = [{"index": i, "e2e_s": 0.1, "error": None} for i in range(sum(len(c) for c in chunk_e2e))]
    for index, error in errors:
        requests[index]["error"] = error
    return {"requests": requests, "elapsed_s": 30.0, "chunk_e2e": chunk_e2e}


def test_an_endurance_cell_that_held_steady_passes():
    verdict = arm.endurance_judgement(endurance_cell([[0.1, 0.11]] * 9), 30, 0.1, 120)
    assert verdict["ok"] and verdict["drift"] == pytest.approx(0.0, abs=1e-9), verdict
    assert verdict["reason"] == "endurance: 18 requests over 30 s, none failed, E2E drift +0.0% (limit 10%)"


def test_latency_that_grows_under_load_fails_the_endurance_cell():
    chunks = [[0.1, 0.1]] * 3 + [[0.12, 0.12]] * 3 + [[0.15, 0.15]] * 3
    verdict = arm.endurance_judgement(endurance_cell(chunks), 30, 0.1, 120)
    assert not verdict["ok"] and verdict["drift"] == pytest.approx(0.5)
    assert "E2E drifted +50.0% from the first third of its 9 chunks to the last (limit 10%)" in verdict["reason"]


def test_a_request_without_an_answer_is_named_a_hang():
    cell = endurance_cell([[0.1] * 4] * 2, errors=[(6, "TimeoutError: timed out")])
    verdict = arm.endurance_judgement(cell, 600, 0.1, 120)
    assert not verdict["ok"] and verdict["failures"] == 1
    assert verdict["reason"].startswith(
        "endurance: a hang: request 6 got no answer within 120 s (TimeoutError: timed out)")


def test_too_short_an_endurance_cell_has_no_drift_to_judge():
    verdict = arm.endurance_judgement(endurance_cell([[0.1], [0.3]]), 4, 0.1, 10)
    assert verdict["ok"] and verdict["drift"] is None and "drift n/a (under three chunks)" in verdict["reason"]


def test_a_bad_endurance_cell_is_named():
    with pytest.raises(ValueError, match="needs a merged cell, got None"):
        arm.endurance_judgement(None, 4, 0.1, 10)


# ---- the endurance cell's failure: its verdict first, then the journal read after it ----------------

def test_the_endurance_verdict_comes_before_the_journal():
    hang = arm.endurance_judgement(endurance_cell([[0.1] * 4] * 2, errors=[(6, "timed out")]), 600, 0.1, 120)
    crash = {"crashed": True, "cause": "CUDA error: an illegal memory access was encountered", "errors": ["x"]}
    assert arm.endurance_failure(hang, crash) == hang["reason"]


def test_a_crash_or_a_new_error_line_under_load_fails_a_steady_endurance_cell():
    steady = arm.endurance_judgement(endurance_cell([[0.1, 0.11]] * 9), 30, 0.1, 120)
    assert arm.endurance_failure(steady, {"crashed": False, "errors": []}) is None
    crash = {"crashed": True, "cause": "CUDA error: an illegal memory access was encountered", "errors": []}
    assert arm.endurance_failure(steady, crash) == "endurance: CUDA error: an illegal memory access was encountered"
    errors = {"crashed": False, "errors": ["NCCL WARN Cuda failure 'out of memory'", "RuntimeError: NCCL error"]}
    assert arm.endurance_failure(steady, errors) == (
        "endurance: error lines new against the original: NCCL WARN Cuda failure 'out of memory' | "
        "RuntimeError: NCCL error")


def test_a_chunk_whose_every_request_timed_out_is_named_a_hang():
    timed_out = {"index": 0, "error": "TimeoutError: timed out", "e2e_s": None}
    assert arm.stalled({"requests": [timed_out, dict(timed_out, index=1)]}, 30) == (
        "the engine stalled (a hang): all 2 requests of the last chunk timed out after 30 s each")
    one_answered = [timed_out, {"index": 1, "error": None, "e2e_s": 0.2}]
    assert arm.stalled({"requests": one_answered}, 30) is None  # slow, not stalled
    assert arm.stalled({"requests": [dict(timed_out, error="HTTP 500: b''")]}, 30) is None  # an error, not a hang
    assert arm.stalled({"requests": []}, 30) is None


def test_a_cells_warm_up_is_untimed_of_the_cells_shape_at_its_concurrency():
    sent = []

    def engine(base_url, body, api_key=None, timeout=60.0, request_id=None):
        sent.append((request_id, len(body["messages"][0]["content"])))
        return {"ok": True, "status": 200, "content": "random words", "tool_calls": None, "error": None,
                "usage": {"prompt_tokens": 900, "completion_tokens": 48}, "ttft_s": 0.1, "e2e_s": 0.5}

    cell = run_cell({"base_url": "http://x", "requests": 2, "prompt_tokens": 300, "concurrency": 4, "warmup": 4,
                     "contract": "tokens", "contract_tokens": 48, "chat": engine, "telemetry_interval_s": 60,
                     "name": "c4", "arm": "candidate"})
    warm = [rid for rid, _ in sent if rid.startswith("serving-rollout-warmup-c4-candidate-")]
    timed = [rid for rid, _ in sent if rid.startswith("serving-rollout-cell-c4-candidate-")]
    assert len(warm) == 4 and len(timed) == 2 and sent.index(next(s for s in sent if s[0] in timed)) >= 4, sent
    assert cell["warmup"] == {"requests": 4, "failures": 0} and len(cell["requests"]) == 2, cell
    lengths = [length for _, length in sent]
    assert max(lengths) - min(lengths) < 10, lengths  # the same prompt shape (unique prefixes differ by a few)
    assert "warmup" not in run_cell({"base_url": "http://x", "requests": 1, "prompt_tokens": 300, "chat": engine,
                                     "telemetry_interval_s": 60})


def test_an_endurance_slice_runs_chunk_after_chunk_on_the_host_until_a_stop_a_failure_or_its_time():
    from serving_rollout.module_utils.cells import run_for

    sent = []

    def engine(base_url, body, api_key=None, timeout=60.0, request_id=None):
        sent.append(request_id)
        failed = request_id.endswith("-5")
        return {"ok": not failed, "status": 500 if failed else 200, "content": "random words", "tool_calls": None,
                "error": "HTTP 500: b''" if failed else None, "usage": {"prompt_tokens": 300, "completion_tokens": 48},
                "ttft_s": 0.1, "e2e_s": 0.5}

    options = {"base_url": "http://x", "requests": 2, "prompt_tokens": 300, "chat": engine, "telemetry_interval_s": 60,
               "name": "endurance", "arm": "candidate", "remeasure_max": 0, "contract": "tokens",
               "contract_tokens": 48, "for_s": 3600}
    asked = []

    def taken_over_at_the_second_ask():
        asked.append(len(sent))
        return "the lock was taken over by root@c pid 9 (run r2); this run stops measuring" if len(asked) == 2 else None

    # asked before each further chunk: the second ask stops it, the chunks before it returned with the reason
    chunks, stopped = run_for(options, taken_over_at_the_second_ask)
    assert stopped.startswith("the lock was taken over") and asked == [2, 4], (asked, stopped)
    assert [[r["index"] for r in c["requests"]] for c in chunks] == [[0, 1], [2, 3]]
    # a chunk with a failed request ends the slice (request 5: a hang or an error is the cell's verdict already)
    sent.clear()
    chunks, stopped = run_for(options, lambda: None)
    assert stopped is None and [c["failures"] for c in chunks] == [0, 0, 1] and len(sent) == 6, chunks
    # its time up: one chunk for a slice shorter than a chunk; without for_s one chunk and no ask
    for for_s in (1e-9, 0):
        asked.clear()
        chunks, stopped = run_for(dict(options, for_s=for_s), taken_over_at_the_second_ask)
        assert len(chunks) == 1 and stopped is None and asked == [], (for_s, chunks)


# ---- library/latency_cell.py in-process: a chunk the host refuses sends no request --------------------------

def latency_cell_main(args, monkeypatch, capsys):
    """library/latency_cell.py's main with `args`, as AnsiballZ runs it: its exit_json or fail_json document."""
    return run_module("latency_cell", args, monkeypatch, capsys)


def test_latency_cell_stops_before_its_chunk_when_the_lock_is_another_runs_and_names_an_unwritable_lease(
        tmp_path, monkeypatch, capsys):
    lock = tmp_path / "sglang.service.lock"
    lock.write_text(json.dumps({"token": "theirs", "holder": "root@ctl-2 pid 7", "run_id": "r2"}))
    # no engine listens here: a request sent would come back as a failed record, not as `stopped`
    args = {"base_url": "http://127.0.0.1:9", "name": "1k", "arm": "candidate", "prompt_tokens": 10,
            "requests": 2, "lock_path": str(lock), "lock_token": "mine", "lease_s": 30}
    out = latency_cell_main(args, monkeypatch, capsys)
    assert out["stopped"] == "the lock was taken over by root@ctl-2 pid 7 (run r2); this run stops measuring", out
    assert out["cell"] is None and not out.get("failed")
    assert not (tmp_path / "sglang.service.lock.lease").exists()  # another run's lock: its lease is not ours
    # this run's lock, but its lease cannot be written (a directory stands where the file goes): failed, named
    lock.write_text(json.dumps({"token": "mine", "holder": "root@ctl pid 9", "run_id": "r1"}))
    (tmp_path / "sglang.service.lock.lease").mkdir()
    out = latency_cell_main(args, monkeypatch, capsys)
    assert out["failed"] and out["msg"].startswith(
        f"could not read the lock {lock}: cannot renew the lease {lock}.lease: "), out


def test_latency_cell_with_for_s_returns_its_chunks_in_one_run_and_a_takeover_stops_it_before_any(
        tmp_path, monkeypatch, capsys, engine_double):
    double = engine_double({"DOUBLE_PREFILL_MS_PER_1K": "1", "DOUBLE_DECODE_MS_PER_TOKEN": "0"})
    lock = tmp_path / "sglang.service.lock"
    lock.write_text(json.dumps({"token": "mine", "holder": "root@ctl pid 9", "run_id": "r1"}))
    args = {"base_url": double.url, "name": "endurance", "arm": "candidate", "prompt_tokens": 10, "requests": 2,
            "concurrency": 2, "lock_path": str(lock), "lock_token": "mine", "for_s": 0.5, "remeasure_max": 0,
            "telemetry_interval_s": 60}
    out = latency_cell_main(args, monkeypatch, capsys)
    assert out["cell"] is None and out["stopped"] is None and out["chunks"], out
    indexes = [[r["index"] for r in chunk["requests"]] for chunk in out["chunks"]]
    assert indexes == [[2 * i, 2 * i + 1] for i in range(len(indexes))], indexes  # one chunk after another
    assert all(c["name"] == "endurance" and c["arm"] == "candidate" and c["failures"] == 0 for c in out["chunks"])
    lock.write_text(json.dumps({"token": "theirs", "holder": "root@ctl-2 pid 7", "run_id": "r2"}))
    out = latency_cell_main(args, monkeypatch, capsys)
    assert out["stopped"].startswith("the lock was taken over by root@ctl-2 pid 7") and out["chunks"] is None, out
    assert out["cell"] is None


def test_latency_cell_refuses_a_negative_slice_by_value_before_any_request(tmp_path, monkeypatch, capsys):
    # no engine listens here: a request sent would come back as a failed record, not as this refusal
    args = {"base_url": "http://127.0.0.1:9", "name": "endurance", "arm": "candidate", "prompt_tokens": 10,
            "requests": 2, "for_s": -1.5}
    out = latency_cell_main(args, monkeypatch, capsys)
    assert out["failed"] and out["msg"] == "remeasure_max and for_s must be at least 0, got 2 and -1.5", out


def test_latency_cell_without_a_lock_runs_its_chunk_unchecked(monkeypatch, capsys, engine_double):
    """The module's own example: no lock_path, nothing to check; check_after's default never asks for one."""
    double = engine_double({"DOUBLE_PREFILL_MS_PER_1K": "1", "DOUBLE_DECODE_MS_PER_TOKEN": "0"})
    out = latency_cell_main({"base_url": double.url, "name": "4k", "arm": "candidate", "prompt_tokens": 10,
                             "requests": 2, "remeasure_max": 0, "telemetry_interval_s": 60}, monkeypatch, capsys)
    assert not out.get("failed") and out["stopped"] is None and out["stopped_after"] is None, out
    assert [r["index"] for r in out["cell"]["requests"]] == [0, 1] and out["cell"]["failures"] == 0, out["cell"]
