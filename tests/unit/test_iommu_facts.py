"""iommu_facts against fixture trees: the real H200 VM guest and a synthetic 8-GPU PCIe host."""

import os

import pytest
from make_sysfs_tree import config_space, h200_vm_guest, pcie_8gpu

from serving_rollout.module_utils import iommu_facts


@pytest.fixture
def pcie_tree(tmp_path):
    pcie_8gpu(tmp_path)
    return tmp_path


def test_h200_vm_guest_has_no_groups_and_reports_it_cleanly(tmp_path):
    h200_vm_guest(tmp_path)
    result = iommu_facts.collect(str(tmp_path))
    assert result["enabled"] is False
    assert "no IOMMU groups" in result["reasons"][0]
    assert [g["bdf"] for g in result["gpus"]] == ["0000:00:06.0", "0000:00:07.0"]
    assert all(g["iommu_group"] is None and not g["translated"] for g in result["gpus"])
    assert result["cmdline_flags"] == {} and result["passthrough"] is None


def test_pcie_8gpu_groups_types_and_acs(pcie_tree):
    result = iommu_facts.collect(str(pcie_tree))
    assert result["enabled"] and result["gpu_count"] == 8
    assert result["cmdline_flags"] == {"intel_iommu": "on", "iommu.strict": "0"}
    assert result["strict"] is False and result["passthrough"] is None
    assert result["translated_gpu_groups"] == ["3", "5", "7", "9", "13", "15", "17", "19"]
    gpu = result["gpus"][0]
    assert gpu["bdf"] == "0000:03:00.0" and gpu["group_type"] == "DMA-FQ" and gpu["group_peers"] == []
    bridges = {b["bdf"]: b for b in gpu["upstream_bridges"]}
    assert list(bridges) == ["0000:02:00.0", "0000:01:00.0", "0000:00:01.0"]
    assert bridges["0000:02:00.0"]["flags"] == ["SV", "RR", "CR", "UF"]
    assert bridges["0000:02:00.0"]["redirects_p2p"] is True
    assert bridges["0000:01:00.0"]["acs"] == "absent"
    assert bridges["0000:00:01.0"]["flags"] == ["SV"] and not bridges["0000:00:01.0"]["redirects_p2p"]
    assert len(result["acs_redirecting_bridges"]) == 8


@pytest.mark.parametrize(
    "cmdline, passthrough, strict",
    [
        ("iommu=pt", True, None),
        ("iommu.passthrough=1 iommu.strict=1", True, True),
        ("amd_iommu=off iommu.passthrough=0", False, None),
        ("quiet", None, None),
    ],
)
def test_cmdline_flags(cmdline, passthrough, strict):
    parsed = iommu_facts.parse_cmdline(cmdline)
    assert parsed["passthrough"] is passthrough and parsed["strict"] is strict


def test_cmdline_secrets_are_redacted():
    text = "root=/dev/sda1 luks.key=abc123 api_token=xyz intel_iommu=on"
    assert iommu_facts.redact_cmdline(text) == \
        "root=/dev/sda1 luks.key=<redacted> api_token=<redacted> intel_iommu=on"


def test_non_root_config_read_is_unknown_with_reason(pcie_tree):
    config = pcie_tree / "sys/bus/pci/devices/0000:02:00.0/config"
    config.write_bytes(config_space(0x1D)[:64])  # what a non-root read of sysfs config returns
    acs = iommu_facts.read_acs(str(pcie_tree), "0000:02:00.0")
    assert acs["acs"] == "unknown" and "needs root" in acs["reason"]
    gpu = iommu_facts.collect(str(pcie_tree))["gpus"][0]
    assert gpu["acs_unknown"] == ["0000:02:00.0"]


def test_unreadable_config_is_unknown(pcie_tree):
    os.remove(pcie_tree / "sys/bus/pci/devices/0000:02:00.0/config")
    acs = iommu_facts.read_acs(str(pcie_tree), "0000:02:00.0")
    assert acs["acs"] == "unknown" and "cannot read" in acs["reason"]


def test_capability_chain_loop_and_garbage_terminate():
    looping = bytearray(4096)
    looping[0x100:0x104] = (0x0001 | (0x100 << 20)).to_bytes(4, "little")  # points at itself
    assert iommu_facts.find_ext_capability(bytes(looping), 0x000D) is None
    assert iommu_facts.find_ext_capability(b"\xff" * 4096, 0x000D) is None


def test_malformed_group_type_and_missing_cmdline(pcie_tree):
    (pcie_tree / "sys/kernel/iommu_groups/3/type").unlink()
    (pcie_tree / "proc/cmdline").unlink()
    result = iommu_facts.collect(str(pcie_tree))
    group = next(g for g in result["groups"] if g["id"] == "3")
    assert group["type"] == "unknown" and "cannot read" in group["type_reason"]
    assert any("proc/cmdline" in r for r in result["reasons"])


def test_missing_sys_is_a_reason_not_a_traceback(tmp_path):
    result = iommu_facts.collect(str(tmp_path))
    assert result["enabled"] is False and result["gpus"] == []
    assert any("cannot list" in r for r in result["reasons"])
