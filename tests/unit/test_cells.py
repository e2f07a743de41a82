"""Latency cells against the engine double: per-request records, contract, failures, telemetry."""

from ansible.module_utils.cells import Telemetry, progress_line, run_cell


def test_cell_records_every_request_with_actual_prompt_tokens(engine_double):
    double = engine_double({"DOUBLE_PREFILL_MS_PER_1K": "10", "DOUBLE_DECODE_MS_PER_TOKEN": "1"})
    lines = []
    cell = run_cell({"base_url": double.url, "requests": 4, "prompt_tokens": 1500}, progress=lines.append)
    assert len(cell["requests"]) == 4 and cell["failures"] == 0 and cell["contract_violations"] == []
    for record in cell["requests"]:
        assert abs(record["prompt_tokens"] - 1500) <= 2 and record["completion_tokens"] == 32
        assert 0 < record["ttft_s"] < record["e2e_s"] and record["decode_tps"] > 0
    assert [(line["request"], line["of"]) for line in lines] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert lines[-1]["elapsed_s"] >= lines[0]["elapsed_s"] > 0 and lines[-1]["running_median_e2e_s"] > 0


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
    from ansible.module_utils.env_files import read_env_value

    first, second = tmp_path / "a.env", tmp_path / "b.env"
    first.write_text("OTHER=1\n")
    second.write_text('SGLANG_API_KEY="sk-1"\n')
    assert read_env_value([str(first), str(second)], "SGLANG_API_KEY") == "sk-1"
    with pytest.raises(ValueError, match=r"MISSING is not set in \["):
        read_env_value([str(first)], "MISSING")
    with pytest.raises(ValueError, match="cannot read EnvironmentFile /nonexistent.env for X"):
        read_env_value(["/nonexistent.env"], "X")


def test_progress_lines_name_the_cell_request_elapsed_and_running_median():
    update = {"request": 3, "of": 12, "elapsed_s": 7.25, "running_median_e2e_s": 0.81234}
    assert progress_line("4k", "candidate", update) == (
        "4k candidate request 3 of 12, elapsed 7.2 s, running median E2E 812.3 ms")
    assert progress_line("4k", "candidate", {**update, "running_median_e2e_s": None}).endswith("E2E n/a")
    assert progress_line("120k", "baseline-2") == "120k baseline-2 end"
