"""NVML as the capture reads it against `nvidia-smi -q -x` on the same real GPU (tests/fixtures/h200x1-real: one
H200, driver 580.159.04, idle and with a CUDA process holding 1 GiB): every kept field agrees, and memory is the
versioned call's - the first call counts the driver's reserve as used."""

import importlib.util
import json

import pytest
from conftest import FIXTURES, REPO

from serving_rollout.module_utils import nvml_facts

_spec = importlib.util.spec_from_file_location("nvml_vs_smi", REPO / "bench" / "nvml_vs_smi.py")
nvml_vs_smi = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nvml_vs_smi)
REAL = FIXTURES / "h200x1-real"


@pytest.mark.parametrize("state", ["idle", "busy"])
def test_every_kept_nvml_field_agrees_with_nvidia_smi_on_a_real_gpu(state):
    raw = json.loads((REAL / f"nvml-raw-{state}.json").read_text())
    rows = nvml_vs_smi.compare(raw, (REAL / f"nvidia-smi-q-{state}.xml").read_text())
    assert [row for row in rows if not row["agree"]] == []
    fields = {row["field"] for row in rows}
    assert {"gpu0.memory_used_mib", "gpu0.memory_reserved_mib", "gpu0.power_limit_w", "gpu0.power_draw_w",
            "gpu0.temperature_c", "gpu0.clock_event_reasons", "gpu0.compute_pids", "driver_version"} <= fields


def test_the_first_memory_call_counts_the_drivers_reserve_as_used_the_versioned_call_does_not():
    idle = json.loads((REAL / "nvml-raw-idle.json").read_text())
    calls = idle["memory_calls"][0]
    assert calls["v1"]["used"] == calls["v2"]["used"] + calls["v2"]["reserved"]
    gpu = nvml_facts.summarize(idle["readings"])["gpus"][0]
    assert (gpu["memory_used_mib"], gpu["memory_reserved_mib"], gpu["memory_call"]) == (0, 615, "v2")
    assert calls["v1"]["used"] // 2**20 == 615  # what the capture read before: an idle GPU "using" 615 MiB
    busy = nvml_facts.summarize(json.loads((REAL / "nvml-raw-busy.json").read_text())["readings"])["gpus"][0]
    assert busy["memory_used_mib"] >= 1024 and [p["used_memory"] >= 2**30 for p in busy["compute_processes"]] == [True]


def test_the_real_one_gpu_capture_says_no_peer_pair_and_peer_path_is_refused_by_name():
    verdict = json.loads((REAL / "p2p-support-observation.json").read_text())["verdict"]
    assert verdict["applies"] is False and verdict["notes"][-1] == "one GPU: no peer pair; P2P controls do not apply"
    assert len(verdict["notes"]) == len(set(verdict["notes"]))
    missing = json.loads((REAL / "peer-path-gpus01-observation.json").read_text())["peer_path"]
    assert missing["verdict"] == "error" and "GPU 1 named in gpus [0, 1] is not on this host" in missing["reason"]
