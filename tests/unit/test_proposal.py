"""The proposal (issue 51): from what the tool captured on a host to the operator's pins and an ordered candidate
plan. The first test is the shared example plan: a host shaped like the one it was written for must get the same
candidates in the same order with the same prerequisites unmet. The others: the real H200x2 NVLink observation,
the synthetic 8-GPU PCIe tree the capture tests use, and the lab's real vLLM on CPU (gloo)."""

import json
import sys

import jsonschema
from conftest import FIXTURES, REPO

from serving_rollout import proposal
from serving_rollout.module_utils import controls, iommu_facts, unit_recipe

# ../shared/reference/candidate-plan-example.json, kept in the repo as plans/candidate-plan-example.json
EXAMPLE = json.loads((REPO / "plans" / "candidate-plan-example.json").read_text())
SCHEMA = json.loads((REPO / "schemas" / "candidate-plan.schema.json").read_text())
H200 = {name: json.loads((FIXTURES / "h200x2-real" / f"{name}-observation.json").read_text())
        for name in ("iommu", "p2p-support", "peer-path")}


def docker_recipe(extra_args=""):
    """The example plan's host as a unit: SGLang in docker, TP 2, P2P disabled, cuMem 0, custom all-reduce
    disabled (tests/fixtures/units/sglang-docker.service), plus speculation when asked."""
    text = (FIXTURES / "units" / "sglang-docker.service").read_text()
    text = text.replace("--disable-custom-all-reduce", f"--disable-custom-all-reduce {extra_args}".rstrip())
    return unit_recipe.parse_recipe(unit_recipe.parse_unit_text(text), {})


def pcie_pairs(count, topology="PIX"):
    return [{"i": i, "j": j, "p2p_ok": True, "topology": topology} for i in range(count) for j in range(count)
            if i != j]


def example_host():
    """Two PCIe GPUs whose IOMMU domains are translated (DMA-FQ), NVML saying P2P OK, no peer-path proof yet."""
    gpus = [{"bdf": f"0000:0{n}:00.0", "iommu_group": str(10 + n), "group_type": "DMA-FQ", "translated": True,
             "acs_redirects_p2p": False} for n in (3, 4)]
    nvml = {"available": True, "gpu_count": 2, "pairs": pcie_pairs(2),
            "gpus": [{"index": n, "name": "NVIDIA RTX PRO 6000", "power_w": {"enforced": 300.0}} for n in (0, 1)]}
    return {"recipe": docker_recipe("--speculative-algorithm EAGLE --speculative-num-steps 3"),
            "scan": {"collectives": {"backend": "nccl"}, "nccl": {"versions": ["2.27.3"]}},
            "capture": {"iommu": {"gpus": gpus, "translated_gpu_groups": ["13", "14"], "acs_redirecting_bridges": []},
                        "nvml": nvml, "evidence": "lab-gpu-1/capture-1/p2p-support-observation.json"},
            "peer_path": None, "prediction": None}


def test_the_example_plans_host_gets_the_example_plans_candidates_order_and_unmet_prerequisites():
    facts = example_host()
    plan = proposal.propose(facts)
    assert [c["id"] for c in plan["candidates"]] == [c["id"] for c in EXAMPLE["ordered_candidates"]]
    p2p, cumem, car, sched = plan["candidates"]
    unmet = {c["id"]: [p["what"] for p in c["prerequisites"] if not p["met"]] for c in plan["candidates"]}
    # the example's first prerequisite: the translated DMA-FQ domains are a host change made elsewhere
    assert any("IOMMU domains are translated (DMA-FQ" in what for what in unmet["p2p"]), unmet
    assert any("peer path proven" in what for what in unmet["p2p"]) and any("peer path" in w for w in unmet[car["id"]])
    # the capture is there: cuMem needs no more evidence, but its P2P/CUMEM connections take the same PCIe path
    cumem_unmet = [p for p in cumem["prerequisites"] if not p["met"]]
    assert [p["kind"] for p in cumem_unmet] == ["host-change", "order"] and "translated (DMA-FQ" in \
        cumem_unmet[0]["what"]
    # its P2P/CUMEM proof cannot appear while the original keeps P2P off: after p2p
    assert cumem_unmet[1]["to_do"] == "after p2p is decided acceptable and promoted"
    assert any("transport stable" in what for what in unmet[sched["id"]])
    assert p2p["why"].startswith("NCCL_P2P_DISABLE=1 from the unit (systemd's reading)") and "TP 2 PCIe host" in \
        p2p["why"]
    assert "NVML reports P2P OK for every GPU pair (PIX)" in p2p["why"]
    assert cumem["change"] == {"kind": "env", "name": "NCCL_CUMEM_ENABLE", "value": "1"}  # explicit: the engine sets 0
    assert car["why"].startswith("--disable-custom-all-reduce from the unit")
    assert "--speculative-algorithm" in sched["why"]
    assert p2p["predicted"] == {"known": False,
                                "reason": "no decode prediction: run peer-path.yml with its decode probe"}
    skipped = {s["id"]: s["why"] for s in plan["not_proposed"]}
    assert skipped["disable-custom-all-reduce"].startswith("already at its value (--disable-custom-all-reduce from")
    assert skipped["nccl-algo"] == "it takes a value no fact on this host suggests"
    assert skipped["engine-image"].startswith("an engine upgrade is the operator's choice")
    document = proposal.plan_document("example", plan, "capture-1")
    jsonschema.validate(document, SCHEMA)
    last = document["ordered_candidates"][0]["prerequisites"][-1]
    assert (last["kind"], last["fact"], last["met"]) == ("host-change", "iommu_translated", False)
    assert last["what"].startswith("the GPUs' IOMMU domains are translated")


def test_the_pins_are_what_the_host_shows_each_with_where_it_was_read():
    facts = example_host()
    found = proposal.pins(facts["recipe"], facts["scan"], facts["capture"]["nvml"] and facts["capture"])
    assert {k: v["value"] for k, v in found.items()} == {
        "model": "/models/Qwen3-235B-A22B-FP8", "model_revision": "2c9ba0a5b9c2d5c7b2a4e1f0a7d3c6e9b8f1a2d4",
        "tp_size": "2", "context_length": "393216", "gpus": "device=0,1", "gpu_count": 2, "power_limit_w": 300.0,
        "nccl_version": "2.27.3"}
    text = proposal.pins_yaml("example", found)
    assert "  context_length: '393216'  # the unit's ExecStart, as systemd reads it\n" in text
    assert "  power_limit_w: 300.0  # NVML's enforced power limit (every GPU)\n" in text


def test_the_real_h200_nvlink_host_with_its_peer_path_proven():
    """The real 2x H200 observation: NVLink NV18 on every pair, no IOMMU translation, the peer path proven."""
    facts = {"recipe": docker_recipe(), "scan": {"collectives": {"backend": "nccl"}},
             "capture": {**{k: H200["iommu"][k] for k in ("iommu",)}, "nvml": H200["p2p-support"]["nvml"],
                         "evidence": "h200/capture"},
             "peer_path": {"verdict": H200["peer-path"]["peer_path"]["verdict"], "evidence": "h200/peer-path"},
             "prediction": None}
    assert facts["peer_path"]["verdict"] == "ok"
    plan = proposal.propose(facts)
    assert [c["id"] for c in plan["candidates"]] == ["p2p", "cumem", "custom-all-reduce"]
    for candidate in plan["candidates"]:
        unmet = [p for p in candidate["prerequisites"] if not p["met"]]
        # NVLink: no IOMMU/ACS change; only cuMem waits for p2p (its proof shows on P2P connections alone)
        assert unmet == ([] if candidate["id"] != "cumem" else unmet[:1]) and all(
            p["kind"] == "order" for p in unmet), candidate["prerequisites"]
    assert "TP 2 NVLink host; NVML reports P2P OK for every GPU pair (NV18)" in plan["candidates"][0]["why"]
    skipped = {s["id"]: s["why"] for s in plan["not_proposed"]}
    assert skipped["scheduler-and-speculation"] == "the unit sets none of its members' settings"


def test_the_8_gpu_pcie_tree_names_its_acs_redirects_and_translated_domains_as_host_changes(tmp_path):
    sys.path.insert(0, str(FIXTURES))
    from make_sysfs_tree import pcie_8gpu

    pcie_8gpu(tmp_path)
    facts = {"recipe": docker_recipe(), "scan": {}, "prediction": None, "peer_path": {"verdict": "fail"},
             "capture": {"iommu": iommu_facts.collect(str(tmp_path)), "nvml": {}, "evidence": None}}
    p2p = proposal.propose(facts)["candidates"][0]
    unmet = [p for p in p2p["prerequisites"] if not p["met"]]
    assert [(p["kind"], p.get("need") or p.get("fact")) for p in unmet] == [
        ("evidence", "capture"), ("evidence", "peer_path"), ("host-change", "iommu_translated"),
        ("host-change", "acs_redirect"), ("evidence", None)]
    assert unmet[4]["what"] == "NVML readings (driver P2P status, topology): missing from the capture"
    assert [p["to_do"] for p in unmet[:2]] == ["run capture.yml", "run peer-path.yml (last verdict: fail)"]
    assert all(p["to_do"].startswith("a human changes the host first") for p in unmet[2:4])
    assert "translated (DMA-FQ, groups" in unmet[2]["what"] and "ACS redirects peer traffic at" in unmet[3]["what"]


def test_a_gloo_engine_gets_no_nccl_control_only_what_it_can_take():
    """The lab's real vLLM on CPU runs its collectives on gloo: no NCCL control is proposed, each named why."""
    unit = ("[Service]\nEnvironment=NCCL_P2P_DISABLE=1\nExecStart=/opt/vllm/bin/vllm serve /srv/m "
            "--tensor-parallel-size 2 --max-num-batched-tokens 2048 --disable-custom-all-reduce\n")
    recipe = unit_recipe.parse_recipe(unit_recipe.parse_unit_text(unit), {})
    facts = {"recipe": recipe, "scan": {"collectives": {"backend": "gloo"}}, "capture": {}, "peer_path": None,
             "prediction": None}
    plan = proposal.propose(facts)
    assert [c["id"] for c in plan["candidates"]] == ["custom-all-reduce", "scheduler-and-speculation"]
    skipped = {s["id"]: s["why"] for s in plan["not_proposed"]}
    assert skipped["p2p"] == "the engine's collectives run on gloo, not NCCL: an NCCL control changes nothing"
    report = proposal.report("lab-vllm", "vllm.service", proposal.pins(recipe, facts["scan"], {}), plan)
    assert "## Not proposed" in report and "- p2p: the engine's collectives run on gloo" in report


def test_a_decode_prediction_from_the_peer_path_evidence_is_the_p2p_candidates_predicted_effect():
    """The real H200 peer-path all-reduce A/B through the decode model (module_utils/decode_model.py), as the
    peer-path playbook records it: the proposal shows its saved time per token and names its evidence."""
    from serving_rollout.module_utils import decode_model

    comparison = H200["peer-path"]["peer_path"]["allreduce"]["comparison"]
    measured = {arm: {c["bytes"]: c[arm]["median_us"] for c in comparison} for arm in ("no_p2p", "p2p")}
    # 61 layers x 2 all-reduces of 43008 B a token: the handoff's 122 all-reduces of 43 KB (domain-notes.md)
    shape = decode_model.shape_from_config({"num_hidden_layers": 61, "hidden_size": 21504, "torch_dtype": "bfloat16"})
    prediction = decode_model.predict(shape, measured["no_p2p"], measured["p2p"])
    facts = {**example_host(), "prediction": {"evidence": "gpu-1/peer-path-1/peer-path-observation.json",
                                              "prediction": prediction}}
    p2p = proposal.propose(facts)["candidates"][0]
    assert p2p["predicted"]["known"] and p2p["predicted"]["evidence"].endswith("peer-path-observation.json")
    assert p2p["predicted"]["saved_per_token_ms"] == prediction["saved_per_token_ms"]
    assert p2p["predicted"]["text"].endswith("ms saved per decoded token (the decode model: all-reduce count x the "
                                             "peer-path probe's latencies)")


def test_a_one_gpu_host_gets_no_peer_or_collective_control_each_named_why():
    """NVML counts one GPU (as the one-GPU H100/H200 machines): no peer pair, so no control whose traffic takes the
    peer path, and no NCCL control, is proposed; each is listed with the reason."""
    facts = example_host()
    facts["capture"]["nvml"] = {"available": True, "gpu_count": 1, "pairs": [],
                                "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "power_w": {"enforced": 700.0}}]}
    facts["capture"]["iommu"] = {"gpus": [], "translated_gpu_groups": [], "acs_redirecting_bridges": []}
    plan = proposal.propose(facts)
    skipped = {s["id"]: s["why"] for s in plan["not_proposed"]}
    for cid in ("p2p", "cumem", "custom-all-reduce", "nccl-p2p-level", "nccl-algo"):
        assert skipped[cid] == "one GPU: no peer pair; P2P controls do not apply", (cid, skipped)
    assert not [c for c in plan["candidates"] if controls.uses_peer_path(c["id"])]
