"""The card and the reports read as prose (tests/prose.py): the real H200 pair's run, every proposal shape's report,
a plan's report. The lab's cards are checked from real lab runs in tests/integration/test_evidence_promotion.py."""

import pytest
from prose import prose_problems
from test_gpu_ab_fixture import RUN
from test_proposal_shapes import CLEAN_IOMMU, host, nvml, unit, with_sources

from serving_rollout import evidence, proposal


def test_the_checker_finds_each_kind_of_non_prose():
    found = prose_problems("GPUs None | failures {'a': 0} | ['SHM'] | allowed: True | " + "word " * 70 + ".")
    assert [p.split(":")[0] for p in found] == ["a bare None", "a Python bool", "a quoted list", "a dict",
                                                "a sentence of 351 characters"]
    assert prose_problems("TTFT -3.6% [-5.6%, -2.4%] better; `{'quoted': None}` is code.") == []


def test_the_real_h200_runs_card_is_prose():
    assert prose_problems(evidence.render_card(RUN)) == []


P2P_OFF = "Environment=NCCL_P2P_DISABLE=1\n"
SHAPES = {
    "sglang TP 2 over PCIe, P2P off in the unit": lambda: host(with_sources(unit(env=P2P_OFF))),
    "vLLM TP 8 over PCIe": lambda: host(with_sources(unit("vllm", 8, env=P2P_OFF)),
                                        capture={"iommu": CLEAN_IOMMU, "nvml": nvml(8)}),
    "NVLink": lambda: host(with_sources(unit(env=P2P_OFF)), capture={"iommu": CLEAN_IOMMU, "nvml": nvml(2, "NV18")}),
    "no driver": lambda: host(with_sources(unit(env=P2P_OFF)),
                              capture={"iommu": CLEAN_IOMMU, "nvml": nvml(2, available=False)}),
    "P2P already on": lambda: host(with_sources(unit())),
    "an original that crashed": lambda: host(unit(), state={"ActiveState": "failed", "SubState": "failed"}),
    "no peer-path evidence": lambda: host(with_sources(unit(env=P2P_OFF)), peer=None),
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_every_proposal_shapes_report_is_prose(name):
    facts = SHAPES[name]()
    plan = proposal.propose(facts)
    report = proposal.report("h", "serving.service", proposal.pins(facts["recipe"], facts["scan"], facts["capture"]),
                             plan)
    assert prose_problems(report) == [], report
