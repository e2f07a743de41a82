"""nccl_facts: version codes, the loaded library through ctypes, and NCCL_DEBUG=INFO logs."""

import shutil
import subprocess

import pytest
from conftest import FIXTURES

from serving_rollout.module_utils import nccl_facts

REAL = FIXTURES / "h200x2-nvlink"


@pytest.mark.parametrize("code, version", [(23007, "2.30.7"), (22803, "2.28.3"), (2804, "2.8.4"),
                                           (21903, "2.19.3")])
def test_decode_version_old_and_new_codes(code, version):
    assert nccl_facts.decode_version(code) == version


@pytest.mark.parametrize("bad", [0, -1, "23007", None])
def test_decode_version_rejects_bad_codes(bad):
    with pytest.raises(ValueError, match="not an NCCL version code"):
        nccl_facts.decode_version(bad)


def test_real_p2p_log_is_cumem_both_directions_no_shm():
    parsed = nccl_facts.parse_log((REAL / "nccl_p2p0.txt").read_text())
    assert parsed["versions"] == ["2.28.9"] and parsed["cuda"] == ["13.0"]
    assert parsed["summary"] == ["0<->1: P2P/CUMEM both directions, no SHM"]
    assert len(parsed["channels"]) == 48
    assert nccl_facts.p2p_in_effect(parsed)


def test_real_p2p_disabled_log_is_shm():
    parsed = nccl_facts.parse_log((REAL / "nccl_p2p1.txt").read_text())
    assert parsed["summary"] == ["0<->1: SHM both directions"]
    assert {c["raw"] for c in parsed["channels"]} == {"SHM/direct/direct"}
    assert not nccl_facts.p2p_in_effect(parsed)


def test_newer_shm_spelling_ipc_and_mixed_transports():
    log = "\n".join([
        "h:1:1 [0] NCCL INFO NCCL version 2.30.7+cuda13.3",
        "h:1:1 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct",
        "h:1:1 [1] NCCL INFO Channel 00 : 1[1] -> 0[0] via P2P/IPC",
        "h:1:1 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/IPC",
        "h:1:1 [1] NCCL INFO Channel 01/0 : 1[1] -> 0[0] via P2P/IPC",
        "h:1:1 [0] NCCL WARN Cuda failure 'peer access is not supported'",
    ])
    parsed = nccl_facts.parse_log(log)
    assert parsed["versions"] == ["2.30.7"]
    assert parsed["summary"] == ["0<->1: 0->1 P2P/IPC+SHM, 1->0 P2P/IPC"]
    assert parsed["warnings"] == ["NCCL WARN Cuda failure 'peer access is not supported'"]
    assert not nccl_facts.p2p_in_effect(parsed)


def test_one_direction_only_is_not_p2p_in_effect():
    parsed = nccl_facts.parse_log("x [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC")
    assert parsed["summary"] == ["0<->1: 0->1 P2P/IPC, 1->0 none, no SHM"]
    assert not nccl_facts.p2p_in_effect(parsed)
    assert not nccl_facts.p2p_in_effect(nccl_facts.parse_log(""))


def test_missing_library_is_a_named_reason():
    result = nccl_facts.loaded_version("libnccl-does-not-exist.so.2")
    assert result["found"] is False and "cannot load libnccl-does-not-exist.so.2" in result["reason"]


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc builds the stand-in libnccl")
def test_loaded_version_through_ctypes(tmp_path):
    # A stand-in libnccl exporting ncclGetVersion, so the real ctypes path runs here.
    source = tmp_path / "nccl.c"
    source.write_text("int ncclGetVersion(int *v) { *v = 23007; return 0; }\n")
    library = tmp_path / "libnccl.so.2"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    result = nccl_facts.loaded_version(str(library))
    assert result == {"found": True, "library": str(library), "path": str(library),
                      "code": 23007, "version": "2.30.7"}


def test_image_probe_is_read_only_and_offline():
    command = nccl_facts.image_probe_command("docker", "repo/sglang@sha256:" + "a" * 64)
    assert command[:5] == ["docker", "run", "--rm", "--network=none", "--entrypoint"]


# ---- the P2P proof at 2-8 ranks: rings run one direction per channel, trees are chains ----

LOGS = FIXTURES / "nccl-logs"


def proof_of(name):
    parsed = nccl_facts.parse_log((LOGS / name).read_text())
    return parsed, parsed["proof"]


@pytest.mark.parametrize("name, transports, edges", [
    ("8rank-nvswitch-p2p-cumem.txt", ["P2P/CUMEM"], 8 * 4 + 7 * 4),
    ("8rank-nvls.txt", ["P2P/CUMEM"], 8 * 4 + 7 * 4),
    ("8rank-busid-ipc-nccl2.12.txt", ["P2P/IPC"], 8 * 4 + 7 * 4),
    ("4rank-pcie-direct-pointer.txt", ["P2P/direct"], 4 * 2 + 3 * 2),
])
def test_multi_rank_p2p_logs_prove_p2p_although_pairs_are_one_direction(name, transports, edges):
    parsed, proof = proof_of(name)
    assert proof == {"in_effect": True, "reasons": [], "ranks": list(range(parsed["nranks"])),
                     "edges": edges, "p2p_edges": edges, "remote_edges": 0}
    assert sorted({t for p in parsed["pairs"] for t in p["transports"]}) == transports
    # The ring edge 3 -> 0 (or 7 -> 0) has no reverse connection, as in real logs.
    last = parsed["nranks"] - 1
    assert {(p["src"], p["dst"]) for p in parsed["pairs"]} >= {(last, 0)}
    assert (0, last) not in {(p["src"], p["dst"]) for p in parsed["pairs"]}
    assert nccl_facts.p2p_in_effect(parsed)


def test_nvls_is_recorded():
    assert proof_of("8rank-nvls.txt")[0]["nvls"] is True
    assert proof_of("8rank-nvswitch-p2p-cumem.txt")[0]["nvls"] is False


def test_all_shm_8_rank_log_fails_naming_ranks_and_channels():
    parsed, proof = proof_of("8rank-shm.txt")
    assert not proof["in_effect"] and proof["p2p_edges"] == 0
    assert proof["reasons"][0] == "rank 0 -> rank 1 on channel 00 via SHM/direct/direct"
    assert "... and 52 more connections without P2P" in proof["reasons"]


def test_two_root_complexes_fail_on_exactly_the_cross_root_edges():
    parsed, proof = proof_of("8rank-two-roots-mixed.txt")
    assert not proof["in_effect"]
    # Ring edges 3 -> 4 and 7 -> 0 and the tree edge 4 -> 3 cross the roots, on 4 channels.
    cross = [f"rank {s} -> rank {d} on channel {c:02d} via SHM/direct/direct"
             for c in range(4) for s, d in ((3, 4), (4, 3), (7, 0))]
    assert proof["reasons"] == cross[:8] + ["... and 4 more connections without P2P"]
    assert not any("never" in r for r in proof["reasons"])  # every rank still has P2P edges


def test_one_shm_edge_among_p2p_fails_and_is_named():
    _, proof = proof_of("4rank-one-shm-edge.txt")
    assert proof["reasons"] == ["rank 3 -> rank 0 on channel 00 via SHM/direct/direct",
                                "rank 3 -> rank 0 on channel 01 via SHM/direct/direct"]


def test_net_between_local_ranks_fails():
    parsed, proof = proof_of("4rank-net-socket.txt")
    assert not proof["in_effect"]
    assert proof["reasons"][0] == "rank 0 -> rank 1 on channel 00 via NET/Socket/0"
    assert proof["reasons"][-1] == "no connection between local ranks uses P2P"


def test_net_between_nodes_is_not_judged_p2p_within_each_node_is():
    parsed, proof = proof_of("2node-16rank-p2p-net.txt")
    assert parsed["ranks"]["0"]["host"] == "gpu-node-a" and parsed["ranks"]["15"]["host"] == "gpu-node-b"
    assert "NET" in {t for p in parsed["pairs"] for t in p["transports"]}
    assert proof["in_effect"] and proof["ranks"] == list(range(16))


def test_a_rank_that_only_sends_fails_and_a_missing_rank_is_named():
    lines = [
        "h:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 4 nNodes 1 localRanks 4 localRank 0 MNNVL 0",
        "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
        "h:1:1 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[2] via P2P/IPC",
        "h:1:1 [2] NCCL INFO Channel 00/0 : 2[2] -> 0[0] via P2P/IPC",
        "h:1:1 [2] NCCL INFO Channel 01/0 : 2[2] -> 1[1] via P2P/IPC",
    ]
    proof = nccl_facts.parse_log("\n".join(lines))["proof"]
    assert proof["reasons"] == ["ranks [3] of 4 have no connection in the log"]
    proof = nccl_facts.parse_log("\n".join(lines[:3]))["proof"]
    assert "rank 0 never receives over P2P" in proof["reasons"]
    assert "rank 2 never sends over P2P" in proof["reasons"]


def test_fixture_logs_are_what_the_generator_writes(tmp_path):
    import make_nccl_logs
    for name in make_nccl_logs.write_all(tmp_path):
        assert (tmp_path / name).read_text() == (LOGS / name).read_text(), name
