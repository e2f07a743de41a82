"""peer-path.yml with p2p_check's real orchestration and a TEST DOUBLE torch interpreter.

The real peer-path proof runs on GPUs (tests/fixtures/h200x2-real); here the worker's
interpreter is tests/doubles/fake_torch_python.py, so time-outs, kills and verdicts run.
"""

import json
import os
import subprocess
import time

import pytest
from conftest import REPO, only_run_dir, run_playbook

FAKE = str(REPO / "tests" / "doubles" / "fake_torch_python.py")


def peer_path(tmp_path, mode, **extra):
    os.environ["P2P_DOUBLE_MODE"] = mode
    try:
        result = run_playbook("peer-path.yml", {"peer_path_hosts": "localhost", "peer_path_python": FAKE,
                                                "observation_writer_dir": str(tmp_path / "ev"), **extra})
    finally:
        del os.environ["P2P_DOUBLE_MODE"]
    return result


def observation(tmp_path):
    run = only_run_dir(tmp_path / "ev", "localhost", "peer-path")
    return json.loads((run / "peer-path-observation.json").read_text())["peer_path"]


def test_healthy_pair_is_ok_with_transport_proof(tmp_path):
    result = peer_path(tmp_path, "ok")
    assert result.returncode == 0, result.stdout
    obs = observation(tmp_path)
    assert obs["verdict"] == "ok" and [p["verdict"] for p in obs["pairs"]] == ["ok", "ok"]
    assert obs["pairs"][0]["link"]["kind"] == "NV18"
    assert [r["label"] for r in obs["allreduce"]["runs"]] == ["no_p2p", "p2p", "no_p2p"]
    by_label = {r["label"]: r["transport"] for r in obs["allreduce"]["runs"]}
    assert by_label["p2p"]["p2p_in_effect"] and not by_label["no_p2p"]["p2p_in_effect"]
    small = obs["allreduce"]["comparison"][0]
    assert small["bytes"] == 43008 and small["faster"] == "p2p"


def test_corruption_is_a_result_and_fails_the_play(tmp_path):
    result = peer_path(tmp_path, "corrupt")
    assert result.returncode != 0 and "peer-path verdict corrupt" in result.stdout
    obs = observation(tmp_path)
    assert obs["verdict"] == "corrupt"
    assert {(p["src"], p["verdict"]) for p in obs["pairs"]} == {(0, "ok"), (1, "corrupt")}


@pytest.mark.parametrize("mode", ["hang_peer", "hang_allreduce"])
def test_hang_is_killed_at_the_time_out_with_its_process_group(tmp_path, mode):
    started = time.monotonic()
    result = peer_path(tmp_path, mode, peer_path_test_timeout_s=2, peer_path_budget_s=30)
    assert time.monotonic() - started < 45
    assert result.returncode != 0 and "peer-path verdict hung" in result.stdout
    assert observation(tmp_path)["verdict"] == "hung"
    left = subprocess.run(["pgrep", "-f", "p2p-double-grandchild"], capture_output=True, text=True)
    assert left.stdout.strip() == ""


def test_busy_gpus_are_refused_unless_forced(tmp_path):
    result = peer_path(tmp_path, "busy")
    assert result.returncode != 0 and "GPUs hold compute processes" in result.stdout and "4242" in result.stdout
    forced = peer_path(tmp_path / "forced", "busy", peer_path_force=True)
    assert forced.returncode == 0, forced.stdout


def test_collective_error_is_reported(tmp_path):
    result = peer_path(tmp_path, "error")
    assert result.returncode != 0
    runs = observation(tmp_path)["allreduce"]["runs"]
    assert {r["status"] for r in runs} == {"error"}
    assert "unhandled system error" in runs[0]["errors"][0]


def test_memory_cap_is_checked_before_anything_runs(tmp_path):
    result = peer_path(tmp_path, "ok", peer_path_copy_bytes=8 * 2**30)
    assert result.returncode != 0 and "over max_gpu_mem_mib=4096" in result.stdout


FAKE_PERF = str(REPO / "tests" / "doubles" / "fake_all_reduce_perf")


def test_graph_probe_with_the_nccl_tests_cross_check_per_arm(tmp_path):
    result = peer_path(tmp_path, "ok", peer_path_nccl_tests=FAKE_PERF)
    assert result.returncode == 0, result.stdout[-2000:]
    obs = observation(tmp_path)
    assert obs["allreduce"]["method"] == "graph"
    assert obs["allreduce"]["comparison"][0]["ratio"] == pytest.approx(7.5 / 14.0)  # the decode-size gain shows
    assert obs["nccl_tests"]["status"] == "ok" and [r["label"] for r in obs["nccl_tests"]["runs"]] == \
        ["no_p2p", "p2p", "no_p2p"]
    assert all(s["wrong"] == 0 and s["version"] == "2.19.6" for r in obs["nccl_tests"]["runs"] for s in r["sizes"])
    small = {row["label"]: row for row in obs["cross_check"] if row["bytes"] == 43008}
    # Graph probe against all_reduce_perf in graph mode (-G): like with like.
    assert small["p2p"]["nccl_tests_us"] == 7.6 and small["p2p"]["ratio"] == pytest.approx(7.5 / 7.6)
    assert small["no_p2p"]["ratio"] == pytest.approx(14.0 / 14.1)


def test_missing_nccl_tests_is_named_and_eager_method_still_available(tmp_path):
    result = peer_path(tmp_path, "ok", peer_path_allreduce_method="eager")
    assert result.returncode == 0, result.stdout[-2000:]
    obs = observation(tmp_path)
    assert obs["nccl_tests"] == {"status": "not found", "reason": "all_reduce_perf is not on PATH"}
    assert obs["allreduce"]["method"] == "eager" and obs["allreduce"]["comparison"][0]["ratio"] == \
        pytest.approx(40 / 45)


def test_eight_gpus_copy_every_pair_in_process_and_the_ring_over_ipc(tmp_path):
    result = peer_path(tmp_path, "ok", peer_path_gpus=list(range(8)))
    assert result.returncode == 0, result.stdout[-2000:]
    obs = observation(tmp_path)
    assert len(obs["pairs"]) == 56 and all(p["verdict"] == "ok" for p in obs["pairs"])
    with_ipc = [(p["src"], p["dst"]) for p in obs["pairs"] if "skipped" not in p["ipc"]]
    assert len(with_ipc) == 16 and (7, 0) in with_ipc and (0, 7) in with_ipc
    assert obs["pairs"][1]["ipc"] == {"skipped": "ipc_pairs=auto"}  # 0 -> 2 is not a ring neighbour
    assert obs["peer_timing"]["ipc_policy"] == "auto"


def test_decode_size_from_the_models_config_and_the_predicted_saving(tmp_path):
    model = tmp_path / "models" / "big-moe"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({"num_hidden_layers": 61, "hidden_size": 7168,
                                                   "torch_dtype": "bfloat16"}))
    result = peer_path(tmp_path, "ok", peer_path_model=str(model), peer_path_tokens_per_step=3,
                       peer_path_allreduce_sizes=[8192, 33554432])
    assert result.returncode == 0, result.stdout[-2000:]
    decode = observation(tmp_path)["decode"]
    assert decode["source"] == f"config.json {model}/config.json"
    assert decode["call"] == {"bytes": 43008, "per_step": 122, "tokens_per_step": 3}
    assert 43008 in [c["bytes"] for c in observation(tmp_path)["allreduce"]["comparison"]]  # measured, not guessed
    prediction = decode["prediction"]
    assert prediction["saved_per_call_us"] == pytest.approx(6.5)  # the graph double's 14.0 -> 7.5 us
    assert prediction["saved_per_step_ms"] == pytest.approx(122 * 6.5 / 1000)
    assert decode["arms"] == {"baseline": "no_p2p", "candidate": "p2p"}


def test_without_a_config_the_fallback_shape_is_used_and_named(tmp_path):
    result = peer_path(tmp_path, "ok", peer_path_model="Org/Absent-Model", peer_path_model_revision="abc123",
                       peer_path_hf_homes=[str(tmp_path)], peer_path_decode_shape={"layers": 32, "hidden_size": 4096})
    assert result.returncode == 0, result.stdout[-2000:]
    decode = observation(tmp_path)["decode"]
    assert decode["source"] == "decode_shape (plan or inventory)" and decode["call"]["bytes"] == 8192
    assert decode["tried"] == [f"{tmp_path}/hub/models--Org--Absent-Model/snapshots/abc123/config.json"]
    assert decode["prediction"]["per_step"] == 64
