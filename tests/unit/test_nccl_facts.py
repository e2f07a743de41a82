"""nccl_facts: version codes, the loaded library through ctypes, and NCCL_DEBUG=INFO logs."""

import shutil
import subprocess

import pytest
from ansible.module_utils import nccl_facts
from conftest import FIXTURES

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
