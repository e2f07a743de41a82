"""The ten preflight checks as a pure function, with real NVML readings from the H200 host."""

import copy
import json

import pytest
from ansible.errors import AnsibleFilterError
from conftest import FIXTURES
from preflight import preflight_checks

NVML = json.loads((FIXTURES / "h200x2-real" / "p2p-support-observation.json").read_text())["nvml"]
EXPECTED = {"model": "org/model", "model_revision": "a" * 40, "tp_size": 2, "context_length": 8192,
            "gpus": "0,1", "gpu_count": 2, "power_limit_w": 700, "nccl_version": "2.28.9"}


def facts(**changes):
    base = {
        "unit": {"ActiveState": "active", "UnitFileState": "enabled", "Id": "sglang.service"},
        "health_status": 200,
        "server_info": {"model_path": "org/model", "revision": "a" * 40, "tp_size": 2, "context_length": 8192},
        "recipe": {"model": "org/model", "gpus": "0,1", "container_name": None},
        "nvml": copy.deepcopy(NVML),
        "journal": {"nccl": {"versions": ["2.28.9"]}, "errors": []},
        "gpu_processes": [{"pid": 10, "unit": "sglang.service"}],
    }
    base.update(changes)
    return base


def verdicts(checks):
    return {c["check"]: c["verdict"] for c in checks}


def test_a_healthy_pinned_host_passes_all_ten():
    checks = preflight_checks(facts(), EXPECTED)
    assert len(checks) == 10 and set(verdicts(checks).values()) == {"pass"}


@pytest.mark.parametrize("change, check", [
    ({"unit": {"ActiveState": "failed", "UnitFileState": "enabled", "Id": "sglang.service"}},
     "unit active and enabled"),
    ({"health_status": 503}, "health OK"),
    ({"server_info": {"model_path": "org/other", "revision": "a" * 40, "tp_size": 2, "context_length": 8192}},
     "model and revision as pinned"),
    ({"server_info": {"model_path": "org/model", "revision": "a" * 40, "tp_size": 4, "context_length": 8192}},
     "TP size"),
    ({"server_info": {"model_path": "org/model", "revision": "a" * 40, "tp_size": 2, "context_length": 4096}},
     "context length"),
    ({"recipe": {"model": "org/model", "gpus": "2,3"}}, "GPU set and count"),
    ({"journal": {"nccl": {"versions": ["2.27.3"]}, "errors": []}}, "NCCL version as pinned (from the engine's log)"),
    ({"gpu_processes": [{"pid": 10, "unit": "sglang.service"}, {"pid": 99, "unit": "jupyter.service"}]},
     "no foreign compute processes on the GPUs"),
    ({"journal": {"nccl": {"versions": ["2.28.9"]}, "errors": ["RuntimeError: NCCL error: invalid usage"],
                  "crashed": True, "cause": "RuntimeError: NCCL error: invalid usage"}},
     "no crash in the current invocation's journal"),
])
def test_each_check_fails_alone_with_observed_and_expected(change, check):
    checks = preflight_checks(facts(**change), EXPECTED)
    failed = [c for c in checks if c["verdict"] == "fail"]
    assert [c["check"] for c in failed] == [check]
    assert failed[0]["observed"] is not None or check == "health OK"


def test_a_containers_processes_in_the_runtimes_scope_are_the_units_own():
    scope = "libpod-5eb8c49127379f3fb485dce46b1d1b3a4ffb4ccc89655099dcc18fe64e45b0d4.scope"
    processes = [{"pid": 10, "unit": "sglang-ctr.service"}, {"pid": 11, "unit": scope}]
    recipe = {"model": "org/model", "gpus": "0,1", "container_name": "sglang-ctr"}
    own = facts(gpu_processes=processes, recipe=recipe, container_id=scope[7:-6])
    assert verdicts(preflight_checks(own, EXPECTED))["no foreign compute processes on the GPUs"] == "pass"
    other = facts(gpu_processes=processes, recipe=recipe, container_id="0" * 64)
    check = next(c for c in preflight_checks(other, EXPECTED) if c["check"].startswith("no foreign"))
    assert check["verdict"] == "fail" and check["observed"] == [processes[1]]


def test_power_limit_and_thermal_events():
    nvml = copy.deepcopy(NVML)
    nvml["gpus"][1]["power_or_thermal_events"] = ["SwPowerCap"]
    checks = preflight_checks(facts(nvml=nvml), {**EXPECTED, "power_limit_w": 300})
    power = next(c for c in checks if c["check"].startswith("power limits"))
    assert power["verdict"] == "fail" and power["observed"][0]["enforced_w"] == 700.0


def test_without_nvml_gpu_and_power_are_skipped_only_when_allowed():
    no_nvml = {"available": False, "reason": "nvidia-ml-py is not installed"}
    lab = verdicts(preflight_checks(facts(nvml=no_nvml), EXPECTED, require_nvml=False))
    assert lab["GPU set and count"] == "skipped"
    assert lab["power limits as pinned, no power or thermal clock events"] == "skipped"
    strict = verdicts(preflight_checks(facts(nvml=no_nvml), EXPECTED, require_nvml=True))
    assert strict["GPU set and count"] == "fail"


def test_missing_facts_are_named():
    with pytest.raises(AnsibleFilterError, match=r"missing \['nvml', 'journal', 'gpu_processes'\]"):
        preflight_checks({"unit": {}, "health_status": 200, "server_info": {}, "recipe": {}}, {})


def test_the_originals_own_warnings_are_its_baseline_not_a_failure():
    warn = "host:1:1 [0] misc/cudawrap.cc:179 NCCL WARN Failed to find CUDA library libcuda.so"
    journal = {"nccl": {"versions": ["2.28.9"]}, "errors": [warn], "warnings": [warn], "crashed": False}
    check = next(c for c in preflight_checks(facts(journal=journal), EXPECTED) if c["check"].startswith("no crash"))
    assert check["verdict"] == "pass" and check["observed"]["warnings (baseline noise)"] == [warn]


def test_no_nccl_pin_and_no_version_logged_is_not_a_failure():
    journal = {"nccl": {"versions": []}, "errors": [], "crashed": False}
    unpinned = {k: v for k, v in EXPECTED.items() if k != "nccl_version"}
    check = next(c for c in preflight_checks(facts(journal=journal), unpinned) if c["check"].startswith("NCCL"))
    assert check["verdict"] == "skipped" and "no NCCL version pinned" in check["reason"]
    pinned = next(c for c in preflight_checks(facts(journal=journal), EXPECTED) if c["check"].startswith("NCCL"))
    assert pinned["verdict"] == "fail" and pinned["observed"] == []
