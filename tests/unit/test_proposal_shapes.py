"""The proposal on host shapes of the field unlike the shared example (issue 67): where a setting lives (a Python
start-up hook, /etc/nccl.conf, an image's ENV, the engine's log, the engine itself), interconnects (NVLink under
translated domains, PCIe with ACS unread), engines and TP sizes (SGLang and vLLM at TP 2, 4, 8), missing or
unreadable facts (no driver, no root, no capture), P2P already on, and an original that never became ready.

Each host is built with the project's own readers from real shapes: units parsed by unit_recipe (the shapes of
tests/fixtures/units, from public units), the effective NCCL configuration by nccl_config's precedence (its sources
as serving_recipe reads them), the IOMMU tree by iommu_facts over tests/fixtures/make_sysfs_tree.py's 8-GPU PCIe
host, NVML in the shape nvml_facts writes, and engine-log facts as journal_scan returns them."""

import json
import sys
from pathlib import Path

import jsonschema
import pytest
from conftest import FIXTURES, REPO

from serving_rollout import plan as executor
from serving_rollout import proposal
from serving_rollout.module_utils import controls, iommu_facts, nccl_config, unit_recipe

SCHEMA = json.loads((REPO / "schemas" / "candidate-plan.schema.json").read_text())
MODEL = "--model-path Qwen/Qwen3-32B --revision 2c9ba0a5"


def unit(engine="sglang", tp=2, env="", args=""):
    program = ("/opt/sglang/bin/python -m sglang.launch_server " + MODEL + f" --tp-size {tp}" if engine == "sglang"
               else f"/opt/vllm/bin/vllm serve Qwen/Qwen3-32B --revision 2c9ba0a5 --tensor-parallel-size {tp}")
    text = f"[Service]\n{env}ExecStart={program} {args}\n".replace(" \n", "\n")
    return unit_recipe.parse_recipe(unit_recipe.parse_unit_text(text), {})


def with_sources(recipe, *extra):
    """The recipe with its effective NCCL configuration: the unit's environment plus other sources."""
    sources = [*extra, {"source": "process-env", "path": "the unit", "values": nccl_config.nccl_only(recipe["env"])}]
    return {**recipe, "nccl_config": nccl_config.summary(sources)}


def nvml(count, topology="PIX", available=True):
    if not available:
        return {"available": False, "reason": "nvmlInit failed: Driver Not Loaded"}
    return {"available": True, "gpu_count": count,
            "pairs": [{"i": i, "j": j, "p2p_ok": True, "topology": topology} for i in range(count)
                      for j in range(count) if i != j],
            "gpus": [{"index": n, "power_w": {"enforced": 700.0}} for n in range(count)]}


CLEAN_IOMMU = {"gpus": [{"bdf": "0000:17:00.0", "acs_unknown": []}], "translated_gpu_groups": [],
               "acs_redirecting_bridges": []}


def host(recipe, capture=None, scan=None, peer="ok", state=None):
    return {"recipe": recipe, "unit_state": state or {"ActiveState": "active", "SubState": "running"},
            "scan": scan if scan is not None else {"collectives": {"backend": "nccl"}, "ready": True, "lines": 40,
                                                  "nccl": {"p2p_in_effect": False}},
            "capture": capture or {"iommu": CLEAN_IOMMU, "nvml": nvml(2), "evidence": "h/capture-1/p2p.json"},
            "peer_path": {"verdict": peer, "evidence": "h/peer-path-1"} if peer else None, "prediction": None}


def by_id(result):
    return {c["id"]: c for c in result["candidates"]}, {s["id"]: s["why"] for s in result["not_proposed"]}


def unmet(candidate):
    return [(p["kind"], p["what"], p["to_do"]) for p in candidate["prerequisites"] if not p["met"]]


def test_a_python_start_up_hook_that_sets_the_variable_is_proposed_with_a_host_change_naming_the_file():
    hook = {"source": "python-hook", "path": "/opt/sglang/lib/python3.11/site-packages/sitecustomize.py",
            "values": {"NCCL_P2P_DISABLE": "1"}}
    result = proposal.propose(host(with_sources(unit(), hook)))
    candidates, _ = by_id(result)
    p2p = candidates["p2p"]
    assert p2p["why"].startswith("NCCL_P2P_DISABLE=1 from python-hook (/opt/sglang/lib/python3.11/site-packages/"
                                 "sitecustomize.py)")
    assert ("host-change", "python-hook (/opt/sglang/lib/python3.11/site-packages/sitecustomize.py) sets it over the "
            "unit's environment", "a human removes it from that start-up hook (the candidate cannot override it), "
            "then propose again") in unmet(p2p)


@pytest.mark.parametrize("source, path", [("nccl-conf-system", "/etc/nccl.conf"),
                                          ("image-env", "image lmsysorg/sglang@sha256:ab12"),
                                          ("nccl-conf-user", "/home/serve/.nccl.conf")])
def test_a_setting_the_unit_environment_overrides_is_proposed_naming_where_it_comes_from(source, path):
    elsewhere = {"source": source, "path": path, "values": {"NCCL_P2P_DISABLE": "1"}}
    candidates, _ = by_id(proposal.propose(host(with_sources(unit(), elsewhere))))
    p2p = candidates["p2p"]
    assert p2p["why"].startswith(f"NCCL_P2P_DISABLE=1 from {source} ({path})"), p2p["why"]
    assert p2p["change"] == {"kind": "env", "name": "NCCL_P2P_DISABLE", "value": "0"}
    assert [kind for kind, _, _ in unmet(p2p)] == []  # the unit's =0 wins: nothing a human must change


def test_an_environment_file_setting_reads_as_the_process_environment():
    recipe = unit_recipe.parse_recipe(unit_recipe.parse_unit_text(
        "[Service]\nEnvironmentFile=/etc/sglang/nccl.env\nExecStart=/opt/sglang/bin/python -m sglang.launch_server "
        f"{MODEL} --tp-size 2\n"), {"/etc/sglang/nccl.env": "NCCL_P2P_DISABLE=1\n"})
    candidates, _ = by_id(proposal.propose(host(with_sources(recipe))))
    assert candidates["p2p"]["why"].startswith("NCCL_P2P_DISABLE=1 from process-env (the unit)")


def test_the_engines_own_log_is_read_when_no_source_was():
    scan = {"collectives": {"backend": "nccl"}, "ready": True, "lines": 40,
            "nccl": {"settings": {"NCCL_P2P_DISABLE": "1"}, "p2p_in_effect": False}}
    candidates, _ = by_id(proposal.propose(host(unit(), scan=scan)))
    assert candidates["p2p"]["why"].startswith("NCCL_P2P_DISABLE=1 from the engine's log (NCCL: set by environment)")


def test_p2p_already_on_is_nothing_to_try_and_the_empty_plan_is_an_answer():
    recipe = with_sources(unit(env="Environment=NCCL_P2P_DISABLE=0\n"))
    result = proposal.propose(host(recipe, scan={"collectives": {"backend": "nccl"}, "ready": True, "lines": 40,
                                                 "nccl": {"p2p_in_effect": True}}))
    candidates, skipped = by_id(result)
    assert not [c for c in candidates if controls.group(c) == "transport" and c != "cumem"]
    assert skipped["p2p"].startswith("already at its value (NCCL_P2P_DISABLE=0 from process-env")
    assert skipped["custom-all-reduce"] == "already at its value (--disable-custom-all-reduce unset)"
    recipe_no_env = with_sources(unit(env="Environment=NCCL_P2P_DISABLE=0 NCCL_CUMEM_ENABLE=1\n"))
    empty = proposal.propose(host(recipe_no_env, scan={"collectives": {"backend": "nccl"}, "ready": True,
                                                        "lines": 40, "nccl": {"p2p_in_effect": True}}))
    assert empty["candidates"] == []
    document = proposal.plan_document("h", empty)
    jsonschema.validate(document, SCHEMA)
    assert document["status"] == "nothing-to-try" and document["ordered_candidates"] == []
    assert executor.plan_problems(document) == []
    report = proposal.report("h", "sglang.service", {}, empty)
    assert "**Nothing to try here: no candidate fits this host" in report.splitlines()[2]


def test_no_driver_is_never_a_confident_plan():
    capture = {"iommu": CLEAN_IOMMU, "nvml": nvml(0, available=False), "evidence": "h/capture-1/p2p.json"}
    candidates, _ = by_id(proposal.propose(host(with_sources(unit(env="Environment=NCCL_P2P_DISABLE=1\n")),
                                                capture=capture)))
    p2p = candidates["p2p"]
    assert "an interconnect NVML did not read" not in p2p["why"] and "PCIe" not in p2p["why"] and "NVLink" not in \
        p2p["why"]
    assert ("evidence", "NVML readings (driver P2P status, topology): NVML did not load (nvmlInit failed: Driver Not "
            "Loaded)", "is the driver installed (nvidia-smi)? then capture.yml again") in unmet(p2p)


def test_a_capture_without_root_leaves_acs_unknown_never_clear():
    iommu = {"gpus": [{"bdf": "0000:17:00.0", "acs_unknown": ["0000:16:00.0", "0000:15:00.0"]}],
             "translated_gpu_groups": [], "acs_redirecting_bridges": []}
    capture = {"iommu": iommu, "nvml": nvml(2), "evidence": "h/capture-1/p2p.json"}
    candidates, _ = by_id(proposal.propose(host(with_sources(unit(env="Environment=NCCL_P2P_DISABLE=1\n")),
                                                capture=capture)))
    p2p = candidates["p2p"]
    assert "ACS does not redirect" not in p2p["why"]
    assert ("evidence", "ACS on bridge(s) 0000:15:00.0, 0000:16:00.0 above the GPUs: unreadable",
            "capture as root (become), which can read the bridges' ACS registers") in unmet(p2p)


def test_a_capture_missing_its_facts_adds_prerequisites_naming_what_to_run():
    candidates, _ = by_id(proposal.propose(host(with_sources(unit(env="Environment=NCCL_P2P_DISABLE=1\n")),
                                                capture={"evidence": None})))
    whats = [what for _, what, _ in unmet(candidates["p2p"])]
    assert "NVML readings (driver P2P status, topology): missing from the capture" in whats
    assert "IOMMU and ACS facts: missing from the capture" in whats


def test_nvlink_under_translated_domains_needs_no_iommu_or_acs_change():
    sys.path.insert(0, str(FIXTURES))
    from make_sysfs_tree import pcie_8gpu

    tree = Path(__import__("tempfile").mkdtemp())
    pcie_8gpu(tree)
    iommu = iommu_facts.collect(str(tree))
    assert iommu["translated_gpu_groups"] and iommu["acs_redirecting_bridges"]
    capture = {"iommu": iommu, "nvml": nvml(8, topology="NV18"), "evidence": "h/capture-1/p2p.json"}
    candidates, _ = by_id(proposal.propose(host(with_sources(unit(tp=8, env="Environment=NCCL_P2P_DISABLE=1\n")),
                                                capture=capture)))
    assert [kind for kind, _, _ in unmet(candidates["p2p"])] == []
    assert "peer traffic takes NVLink, not the PCIe fabric" in candidates["p2p"]["why"]


def test_pcie_with_acs_redirect_puts_the_host_change_on_every_peer_path_control_until_a_capture_shows_it_gone():
    sys.path.insert(0, str(FIXTURES))
    from make_sysfs_tree import pcie_8gpu

    tree = Path(__import__("tempfile").mkdtemp())
    pcie_8gpu(tree)
    capture = {"iommu": iommu_facts.collect(str(tree)), "nvml": nvml(2), "evidence": "h/capture-1/p2p.json"}
    recipe = with_sources(unit(env="Environment=NCCL_P2P_DISABLE=1\n", args="--disable-custom-all-reduce"))
    candidates, _ = by_id(proposal.propose(host(recipe, capture=capture, peer=None)))
    for cid in ("p2p", "custom-all-reduce", "cumem"):
        assert "host-change" in [kind for kind, _, _ in unmet(candidates[cid])], cid
    after = {"iommu": CLEAN_IOMMU, "nvml": nvml(2), "evidence": "h/capture-2/p2p.json"}
    fixed, _ = by_id(proposal.propose(host(recipe, capture=after, peer="ok")))
    assert "host-change" not in [kind for kind, _, _ in unmet(fixed["p2p"])]


def test_an_original_that_never_became_ready_gets_nothing_proposed_and_the_fix_first():
    scan = {"collectives": {"backend": "nccl"}, "ready": False, "lines": 80, "phase": "cuda-graph-capture",
            "crashed": False, "nccl": {}}
    result = proposal.propose(host(with_sources(unit(env="Environment=NCCL_P2P_DISABLE=1\n")), scan=scan))
    assert result["candidates"] == [] and result["blocked"].startswith("the original's last start never logged "
                                                                       "ready (phase cuda-graph-capture)")
    assert {s["id"] for s in result["not_proposed"]} == set(controls.ids())
    assert proposal.report("h", "sglang.service", {}, result).splitlines()[2].startswith(
        "**Nothing is proposed: the original's last start never logged ready")
    crashed = proposal.propose(host(unit(), state={"ActiveState": "failed", "SubState": "failed"}))
    assert crashed["blocked"].startswith("the original is not serving (ActiveState=failed")


@pytest.mark.parametrize("engine, tp, link, proposed", [
    ("sglang", 2, "PIX", True), ("vllm", 2, "PIX", True), ("sglang", 4, "PIX", False), ("vllm", 8, "PXB", False),
    ("sglang", 8, "NV18", True), ("vllm", 4, "NV12", True)])
def test_custom_all_reduce_at_tp_2_4_8_follows_what_the_engine_does_itself(engine, tp, link, proposed):
    recipe = with_sources(unit(engine, tp, args="--disable-custom-all-reduce"))
    capture = {"iommu": CLEAN_IOMMU, "nvml": nvml(tp, topology=link), "evidence": "h/capture-1/p2p.json"}
    candidates, skipped = by_id(proposal.propose(host(recipe, capture=capture)))
    assert ("custom-all-reduce" in candidates) == proposed, skipped.get("custom-all-reduce")
    if not proposed:
        assert skipped["custom-all-reduce"] == (f"the engine switches it off itself on more than 2 GPUs over PCIe "
                                                f"(TP {tp} here): the candidate would change nothing")


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_cumem_is_an_explicit_1_because_the_engine_sets_0_itself_and_comes_after_p2p(engine):
    recipe = with_sources(unit(engine, env="Environment=NCCL_P2P_DISABLE=1\n"))
    candidates, _ = by_id(proposal.propose(host(recipe)))
    cumem = candidates["cumem"]
    assert cumem["change"] == {"kind": "env", "name": "NCCL_CUMEM_ENABLE", "value": "1"}
    assert cumem["why"].startswith(f"NCCL_CUMEM_ENABLE=0 from the engine itself ({engine} sets it when unset)")
    assert ("order", "NCCL_P2P_DISABLE=1 in the original: cumem's proof cannot appear before p2p is in effect",
            "after p2p is decided acceptable and promoted") in unmet(cumem)
    # removing the unit's 0 is the no-op the catalog used to propose: the engine sets 0 again
    sources = [{"source": "process-env", "path": "unit", "values": {"NCCL_CUMEM_ENABLE": "0"}}]
    from serving_rollout.module_utils.engine_adapters import engine_env_sources

    assert nccl_config.change_problem(sources + engine_env_sources(engine), "NCCL_CUMEM_ENABLE", None)
    assert nccl_config.change_problem(sources + engine_env_sources(engine), "NCCL_CUMEM_ENABLE", "1") is None


def test_transport_stable_comes_from_the_engines_own_lines_and_plan_yml_takes_a_scheduler_only_plan():
    recipe = with_sources(unit(env="Environment=NCCL_P2P_DISABLE=0 NCCL_CUMEM_ENABLE=1\n",
                               args="--chunked-prefill-size 8192"))
    off = proposal.propose(host(recipe))  # the log shows P2P off: no stable transport
    composite = by_id(off)[0]["scheduler-and-speculation"]
    stable = next(p for p in composite["prerequisites"] if p.get("need") == "transport_stable")
    assert not stable["met"] and stable["to_do"].startswith("the original engine's log shows P2P off")
    on = proposal.propose(host(recipe, scan={"collectives": {"backend": "nccl"}, "ready": True, "lines": 40,
                                             "nccl": {"p2p_in_effect": True}}))
    document = proposal.plan_document("h", on)
    assert [c["id"] for c in document["ordered_candidates"]] == ["scheduler-and-speculation"]
    document["ordered_candidates"][0]["control"] = {"chunked_prefill_size": 4096}  # the operator sets its value
    assert executor.plan_problems(document) == []
    entry = document["ordered_candidates"][0]
    assert executor.plan_evidence({"candidates": {}}, entry["id"], entry) == {
        "transport_stable": "the original engine's NCCL lines: P2P in effect between its ranks"}


def test_every_catalog_control_is_proposed_or_listed_with_its_reason():
    result = proposal.propose(host(with_sources(unit(env="Environment=NCCL_P2P_DISABLE=1\n"))))
    listed = [c["id"] for c in result["candidates"]] + [s["id"] for s in result["not_proposed"]]
    assert sorted(listed) == sorted(controls.ids())
    assert all(s["why"] for s in result["not_proposed"])


def test_proposal_py_names_no_control_group_or_flag_of_the_catalog():
    """The catalog decides; proposal.py only applies it."""
    source = (REPO / "serving_rollout" / "proposal.py").read_text()
    names = set(controls.ids()) | {e["group"] for e in controls.CATALOG}
    names |= {s["name"] for e in controls.CATALOG for s in (e.get("set") or {}).values() if s.get("name")}
    found = sorted(name for name in names if f'"{name}"' in source or f"'{name}'" in source)
    assert found == [], found
