"""The decode-size probe: all_reduce_perf output, model sizes and the predicted effect, and the
committed 2x H200 run (probe beside nccl-tests) read through them."""

import json

import pytest
from conftest import FIXTURES

from serving_rollout.module_utils import decode_model, nccl_tests, p2p_orchestrator

RUN = FIXTURES / "h200x2-decode-probe"

# Lines as all_reduce_perf 2.19.6 prints them (util.cu's printf formats): checked (-c 1) and unchecked.
PERF_CHECKED = """# nccl-tests version 2.19.6 nccl-headers=22803 nccl-library=22809
# Collective test starting: all_reduce_perf
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
       43008         21504  bfloat16     sum      -1     7.52    5.72    5.72      0     7.49    5.74    5.74      0
    33554432      16777216  bfloat16     sum      -1   128.20  261.74  261.74      0   127.9  262.35  262.35      3
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 133.887
"""
PERF_UNCHECKED = ("       43008         21504  bfloat16     sum      -1    10.99    3.91    3.91    N/A"
                  "    10.87    3.96    3.96    N/A\n")


def test_all_reduce_perf_rows_and_wrong_counts():
    parsed = nccl_tests.parse_output(PERF_CHECKED)
    assert parsed["version"] == "2.19.6" and parsed["nccl_library"] == 22809
    assert [r["bytes"] for r in parsed["rows"]] == [43008, 33554432]
    assert parsed["rows"][0]["out_of_place"] == {"time_us": 7.52, "algbw_gbps": 5.72, "busbw_gbps": 5.72, "wrong": 0}
    assert parsed["rows"][1]["in_place"]["wrong"] == 3
    assert nccl_tests.wrong_total(parsed) == 3
    assert parsed["avg_busbw_gbps"] == 133.887 and parsed["out_of_bounds"] == 0


def test_unchecked_run_has_no_wrong_count():
    parsed = nccl_tests.parse_output(PERF_UNCHECKED)
    assert parsed["rows"][0]["out_of_place"]["wrong"] is None and parsed["rows"][0]["out_of_place"]["time_us"] == 10.99
    assert nccl_tests.wrong_total(parsed) is None
    assert nccl_tests.parse_output("NCCL error: invalid usage\n")["rows"] == []


def test_command_is_one_size_bf16_and_graph_mode_on_request():
    assert nccl_tests.command("/x/all_reduce_perf", 43008, 2) == [
        "/x/all_reduce_perf", "-b", "43008", "-e", "43008", "-d", "bfloat16", "-o", "sum", "-t", "1", "-g", "2",
        "-n", "1000", "-w", "100", "-c", "1"]
    assert nccl_tests.command("p", 8, 1, iters=100, graph_launches=10)[-4:] == ["-c", "1", "-G", "10"]


# The 8-GPU handoff: 61 layers, hidden 7168, bf16, a speculative verify of 2 drafts (3 tokens).
HANDOFF_CONFIG = {"num_hidden_layers": 61, "hidden_size": 7168, "torch_dtype": "bfloat16",
                  "quantization_config": {"quant_method": "fp8"}}


def test_handoff_sizes_and_all_reduce_time_per_pass():
    shape = decode_model.shape_from_config(HANDOFF_CONFIG)
    tokens = decode_model.tokens_per_step(speculative_num_draft_tokens=2)
    call = decode_model.decode_allreduce(shape, tokens)
    assert call == {"bytes": 43008, "per_step": 122, "tokens_per_step": 3}
    # ~200 us per call on NCCL Ring LL over PCIe: about 24 ms of the 30 ms pass waits on NCCL.
    prediction = decode_model.predict(shape, {43008: 200.0}, {43008: 40.0}, tokens=3, accepted_per_step=2.5)
    assert prediction["allreduce_ms_per_step_baseline"] == pytest.approx(24.4)
    assert prediction["saved_per_step_ms"] == pytest.approx(122 * 160 / 1000)
    assert prediction["saved_per_token_ms"] == pytest.approx(19.52 / 2.5)


def test_config_shapes_text_config_fp8_and_bad_configs():
    vlm = {"text_config": {"num_hidden_layers": 48, "hidden_size": 5120}, "torch_dtype": "float8_e4m3fn"}
    assert decode_model.shape_from_config(vlm) == {"layers": 48, "hidden_size": 5120, "dtype": "bfloat16",
                                                   "dtype_bytes": 2, "source": "config.json"}
    with pytest.raises(decode_model.ModelShapeError, match="/m/config.json: no layer count"):
        decode_model.shape_from_config({"vocab_size": 3}, "/m/config.json")
    with pytest.raises(decode_model.ModelShapeError, match="not a JSON object"):
        decode_model.shape_from_config([1])
    with pytest.raises(decode_model.ModelShapeError, match="draft tokens must be >= 0"):
        decode_model.tokens_per_step(-1)


def test_latency_is_interpolated_never_extrapolated():
    points = {43008: 14.0, 33554432: 1180.0}
    assert decode_model.latency_at(points, 43008) == 14.0
    mid = decode_model.latency_at(points, 1 << 20)
    assert 14.0 < mid < 1180.0
    with pytest.raises(decode_model.ModelShapeError, match="14336 B is outside the measured sizes"):
        decode_model.latency_at(points, 14336)


def test_min_effect_flag_before_gpu_time():
    shape = decode_model.shape_from_config({"num_hidden_layers": 32, "hidden_size": 4096})
    prediction = decode_model.predict(shape, {8192: 14.0}, {8192: 7.5})
    assert prediction["saved_per_token_ms"] == pytest.approx(64 * 6.5 / 1000)
    slow = decode_model.below_min_effect(prediction, 30.0, 0.02)  # 0.416 of 30 ms: 1.4 %
    assert slow["flag"] is True
    assert slow["reason"] == "predicted decode gain 1.4% is below the A/B's minimum effect 2.0%"
    assert decode_model.below_min_effect(prediction, 10.0, 0.02)["flag"] is False  # 4.2 %
    with pytest.raises(decode_model.ModelShapeError, match="must be > 0 ms"):
        decode_model.relative_effect(prediction, 0)


def summary(size):
    return next(r for r in json.loads((RUN / "decode-probe.json").read_text())["summary"] if r["bytes"] == size)


def test_real_run_probe_matches_nccl_tests_graph_mode_at_decode_size():
    row = summary(43008)
    for arm in ("no_p2p", "p2p"):
        assert row["graph_vs_nccl_tests_graph"][arm] == pytest.approx(1.0, abs=0.10)
    # The eager torch loop is bound by launch cost: 2.5x or more of the real latency, P2P gain hidden.
    assert row["eager"]["p2p"]["median_us"] > 4 * row["graph"]["p2p"]["median_us"]
    assert row["graph"]["p2p_over_no_p2p"]["interval"][1] < 0.6  # P2P over 40 % faster, every round
    assert row["eager"]["p2p_over_no_p2p"]["interval"][1] > 0.95


def test_real_run_probe_matches_nccl_tests_at_32_mib():
    row = summary(33554432)
    for arm in ("no_p2p", "p2p"):
        assert row["graph_vs_nccl_tests_eager"][arm] == pytest.approx(1.0, abs=0.05)
    assert row["graph"]["p2p_over_no_p2p"]["interval"][1] < 0.12
    checks = json.loads((RUN / "decode-probe.json").read_text())["checks"]
    assert checks["all_correct"] and checks["nccl_tests_wrong"] == 0
    assert checks["transport"] == {"no_p2p": ["0<->1: SHM both directions"],
                                   "p2p": ["0<->1: P2P/CUMEM both directions, no SHM"]}


def test_real_peer_path_prediction_for_a_qwen_sized_model_and_8_gpu_budget():
    observation = json.loads((RUN / "peer-path-observation.json").read_text())["peer_path"]
    assert observation["allreduce"]["method"] == "graph" and observation["verdict"] == "ok"
    measured = {arm: {c["bytes"]: c[arm]["median_us"] for c in observation["allreduce"]["comparison"]}
                for arm in ("no_p2p", "p2p")}
    # A 94-layer, hidden-4096 model with 3-token verify steps: 24,576 B, interpolated between the sizes.
    shape = decode_model.shape_from_config({"num_hidden_layers": 94, "hidden_size": 4096})
    with pytest.raises(decode_model.ModelShapeError):
        decode_model.predict(shape, measured["no_p2p"], measured["p2p"], tokens=3)  # below 43,008 B: measure it
    prediction = decode_model.predict(shape, measured["no_p2p"], measured["p2p"], tokens=6)  # 49,152 B
    assert 0.5 < prediction["saved_per_step_ms"] < 1.5
    # The whole check on 8 GPUs from the per-pair costs measured here, IPC on the ring (auto).
    timing, pairs = observation["peer_timing"], observation["pairs"]
    steady_ipc = pairs[-1]["ipc"]["seconds"]
    runs_s = sum(r["seconds"] for r in observation["allreduce"]["runs"])
    # Fixed: everything but the copies and the collective runs (start-up, preflight, CUDA init).
    fixed = observation["elapsed_s"] - runs_s - timing["in_process_s"] - timing["ipc_s"]
    estimate = p2p_orchestrator.estimate_seconds(
        8, fixed_s=fixed,
        in_process_pair_s=pairs[-1]["in_process"]["seconds"], ipc_pair_s=steady_ipc,
        ipc_fixed_s=timing["ipc_s"] - len(pairs) * steady_ipc,
        allreduce_run_s=max(r["seconds"] for r in observation["allreduce"]["runs"]))
    assert estimate["ipc_pairs"] == 16 and estimate["ordered_pairs"] == 56
    assert estimate["seconds"] < 60, estimate
    everything = p2p_orchestrator.estimate_seconds(8, 6, pairs[-1]["in_process"]["seconds"], steady_ipc, 3, 7,
                                                   policy="all")
    assert everything["seconds"] > 60  # why the ring policy above 4 GPUs


def test_ipc_pair_policies():
    assert p2p_orchestrator.ipc_pairs([0, 1, 2, 3]) == p2p_orchestrator.ordered_pairs([0, 1, 2, 3])
    ring = p2p_orchestrator.ipc_pairs(list(range(8)))
    assert len(ring) == 16 and (7, 0) in ring and (0, 7) in ring and (0, 2) not in ring
    with pytest.raises(ValueError, match="ipc_pairs must be all, ring or auto"):
        p2p_orchestrator.ipc_pairs([0, 1], "some")
