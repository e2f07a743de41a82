"""Engine truth, second round: how a line is read before any rule (module_utils/log_lines.py), a warning the
engine names as one, the new crash kinds with their cause, frame and phase, Ray's repeat suffix on a control's
proof, accept length from the log. The lines are the corpus's real ones (tests/fixtures/engine-logs/corpus.yml),
put together where a case needs two; the carriage returns and colours are what a terminal program writes."""

import json

import pytest
from test_engine_corpus import BY_ID

from serving_rollout.module_utils import engine_adapters, log_lines, nccl_facts


def excerpt(entry_id):
    return BY_ID[entry_id]["excerpt"]


def test_one_reader_splits_progress_bars_and_drops_colours_ray_suffixes_and_kubectl_prefixes():
    bars = ["Capturing batches (bs=4):  50%|#####     | 2/4", "Capturing batches (bs=1): 100%|##########| 4/4"]
    text = ("\x1b[32m" + "\r".join(bars) + "\x1b[0m\n"
            "[pod/vllm-0/vllm] INFO 08-19 18:00:14 [kv_cache_utils.py:2177] GPU KV cache size: 396,448 tokens\n"
            + excerpt("vllm-0.8-ray-dedup-suffix-harmless").splitlines()[0] + "\n\n")
    lines = log_lines.lines(text)
    assert lines[:2] == bars
    assert lines[2] == "INFO 08-19 18:00:14 [kv_cache_utils.py:2177] GPU KV cache size: 396,448 tokens"
    assert lines[3].endswith("Automatically detected platform cuda."), lines[3]
    assert len(lines) == 4, lines


def test_the_journal_is_read_as_stored_and_a_non_json_line_is_named():
    stored = "Loading safetensors checkpoint shards:  50% Completed | 1/2\rLoading safetensors checkpoint shards: 100%"
    out = json.dumps({"__CURSOR": "s=1;i=9", "__REALTIME_TIMESTAMP": "1733071212500000",
                      "MESSAGE": list(stored.encode())}) + "\n"
    (entry,) = log_lines.journal_entries(out)
    assert entry == {"time": 1733071212.5, "cursor": "s=1;i=9", "lines": stored.split("\r")}
    with pytest.raises(ValueError, match=r"not JSON: '\[98B blob data\]'"):
        log_lines.journal_entries("[98B blob data]\n")


def test_a_crash_signature_in_a_line_the_engine_calls_a_warning_is_a_warning_never_a_crash():
    read = engine_adapters.read_log("sglang", excerpt("sglang-0.4-custom-allreduce-cudart-warning-pcie-pair"))
    assert not read["crashed"] and len(read["warnings"]) == 2, read
    assert read["custom_all_reduce"]["state"] == "disabled", read["custom_all_reduce"]
    # the advice in such a warning ("specify disable_custom_all_reduce=True") is not the operator's request
    advice = engine_adapters.read_log("sglang", excerpt("sglang-0.5-custom-allreduce-v2-disabled-pcie-only"))
    assert advice["custom_all_reduce"]["requested_off"] is False
    # the same error in a line the engine does not call a warning is a crash
    fatal = "[2025-05-03 23:03:33 TP1] RuntimeError: CUDART error: peer access is not supported between two devices"
    assert engine_adapters.read_log("sglang", fatal)["crash"] == "cuda-error"


def test_the_preflight_never_refuses_an_original_that_went_on_to_serve():
    """A crash signature before the last ready line was survived: a warning, judged against the baseline."""
    serving = excerpt("sglang-0.4-custom-allreduce-cudart-warning-pcie-pair").replace(
        " To silence this warning, specify --disable-custom-all-reduce explicitly.", "") + "\n" + \
        excerpt("sglang-ready-line")
    read = engine_adapters.read_log("sglang", serving)
    assert read["ready_logged"] and not read["crashed"] and len(read["warnings"]) == 2, read
    candidate = engine_adapters.read_log("sglang", serving, known=read["signatures"])
    assert not candidate["errors"] and len(candidate["noise"]) == 2, candidate
    # after the ready line the same line is a crash of a serving engine
    after = excerpt("sglang-ready-line") + "\n[2025-05-03 23:09:00 TP0] RuntimeError: CUDA error: out of memory"
    assert engine_adapters.read_log("sglang", after)["crash"] == "cuda-oom"


def test_new_crash_kinds_are_named_with_their_cause_and_the_frame_that_raised_it():
    died = engine_adapters.read_log("vllm", excerpt("vllm-v1-engine-core-died-unexpectedly"))
    assert died["crash"] == "engine-core-died", died
    timeout = engine_adapters.read_log("vllm", excerpt("vllm-0.10-rpc-call-timed-out"))
    assert (timeout["crash"], timeout["cause"]) == ("rpc-timeout", "TimeoutError: RPC call to execute_model timed out.")
    assert timeout["cause_frame"].endswith("line 243, in collective_rpc"), timeout["cause_frame"]
    bare = engine_adapters.read_log("vllm", excerpt("vllm-v1-bare-timeout-error-chained"))
    assert bare["cause"] == "TimeoutError" and bare["cause_frame"].endswith("line 469, in acquire_read"), bare
    kv = engine_adapters.read_log("vllm", excerpt("vllm-v1-kv-cache-too-small-pipeline-parallel"))
    assert kv["crash"] == "kv-cache-too-small" and kv["cause"].startswith("ValueError: To serve"), kv
    illegal = engine_adapters.read_log("vllm", excerpt("vllm-0.25-worker-illegal-memory-access"))
    assert illegal["crash"] == "cuda-illegal-memory-access", illegal  # not "worker-died", its echo
    ray = engine_adapters.read_log("vllm", excerpt("vllm-ray-compiled-dag-actor-died"))
    assert ray["crash"] == "ray-worker-failed" and "ActorDiedError" in ray["cause"], ray


def test_an_oom_is_named_with_the_phase_it_struck_in():
    log = excerpt("vllm-0.8-cudagraph-oom-advice-is-not-an-oom") + "\n" + \
        excerpt("vllm-v1-graph-capture-oom-cuda-runtime-error")
    read = engine_adapters.read_log("vllm", log)
    assert (read["crash"], read["crash_phase"]) == ("cuda-oom", "cuda-graph-capture"), read
    assert read["cause"] == "RuntimeError: CUDA error: out of memory"


def test_a_setting_nccl_read_keeps_its_value_under_rays_repeat_suffix():
    line = ("(RayWorkerWrapper pid=581, ip=10.225.128.18) k8s17:581:581 [0] NCCL INFO NCCL_P2P_LEVEL set by "
            "environment to NVL [repeated 15x across cluster]")
    assert nccl_facts.parse_log(line)["settings"] == {"NCCL_P2P_LEVEL": "NVL"}


def test_accept_length_comes_from_the_log_with_its_source():
    vllm = engine_adapters.read_log("vllm", excerpt("vllm-ascend-spec-decoding-nothing-accepted"))["accept_length"]
    assert vllm["value"] == 1.0 and vllm["source"] == "engine log" and vllm["reports"] == 2, vllm
    sglang = engine_adapters.accept_length("sglang", excerpt("sglang-0.5-decode-batch-accept-len"))
    assert sglang["value"] == 3.13 and "accept len: 3.13" in sglang["line"], sglang
    assert engine_adapters.accept_length("unknown", excerpt("sglang-0.5-decode-batch-accept-len")) is None
