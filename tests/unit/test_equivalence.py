"""The numerical-equivalence probe: parsing real engines' logprobs, the comparison's rules, and the
probe against the engine double (a TEST DOUBLE of SGLang) with its corruption and numerics faults."""

import json
from pathlib import Path

import pytest

from serving_rollout.module_utils import controls
from serving_rollout.module_utils.equivalence import (
    TOLERANCES,
    EquivalenceError,
    compare,
    parse_answer,
    probe,
    prompts,
    tolerance,
)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "engine-logs"


def answer(tokens, logprobs=None, margins=None):
    return {"tokens": list(tokens), "logprobs": logprobs or [-0.01] * len(tokens),
            "margins": margins or [3.0] * len(tokens)}


def test_the_prompts_are_fixed_so_both_arms_ask_the_same():
    assert prompts(6) == prompts(6)
    assert len(set(prompts(6))) == 6  # no two share an answer by construction
    with pytest.raises(EquivalenceError, match="1..256, got 0"):
        prompts(0)


def test_identical_answers_pass_exact():
    ref = [answer("abc"), answer("de")]
    result = compare(ref, [answer("abc"), answer("de")], "exact")
    assert result["verdict"] == "pass" and result["identical"] == 2 and result["agreement"] == 1.0
    assert result["first_divergence"] is None and result["max_logprob_drift"] == 0.0


def test_a_confident_choice_replaced_is_corruption_whatever_the_tolerance():
    ref = [answer("abcd", margins=[3.0, 2.5, 4.0, 3.0])]
    got = [answer("abXd")]
    for name in TOLERANCES:
        result = compare(ref, got, name)
        assert result["verdict"] == "fail", (name, result)
        assert "prompt 0 diverged at position 2 ('c' -> 'X') where the original's choice led by 4" in result["reason"]
    assert result["agreement"] == 0.5 and result["first_divergence"] == 2


def test_a_near_tie_flipped_is_numerics_noise_only_where_the_control_allows_it():
    ref = [answer("abcd", margins=[3.0, 0.04, 3.0, 3.0])]
    got = [answer("aXcd")]
    assert compare(ref, got, "exact")["verdict"] == "fail"
    loose = compare(ref, got, "reduction-order")
    assert loose["verdict"] == "pass" and loose["divergences"][0]["explained"] is True
    assert loose["agreement"] == 0.25  # the agreement is shown even where it passes


def test_logprob_drift_is_judged_before_the_first_divergence_only():
    ref = [answer("abcd", logprobs=[-0.1, -0.1, -0.1, -0.1], margins=[3, 3, 0.01, 3])]
    got = [answer("abXY", logprobs=[-0.12, -0.1, -5.0, -9.0])]
    result = compare(ref, got, "reduction-order")
    assert result["max_logprob_drift"] == pytest.approx(0.02)  # -5 and -9 come after the divergence
    assert result["verdict"] == "pass"
    exact = compare(ref, got, "exact")
    assert exact["verdict"] == "fail" and "logprob drift 0.02 > 0 (prompt 0)" in exact["reason"]


def test_a_shorter_answer_is_a_divergence_never_explained():
    result = compare([answer("abcd")], [answer("ab")], "kernels")
    assert result["verdict"] == "fail" and "prompt 0 answered 2 tokens against 4" in result["reason"]


def test_a_control_without_a_tolerance_is_recorded_not_judged():
    result = compare([answer("abcd")], [answer("abXd")], None)
    assert result["verdict"] == "recorded" and result["first_divergence"] == 2


@pytest.mark.parametrize("bad, named", [
    ("tight", "unknown numerics tolerance 'tight'; known: exact, reduction-order, kernels"),
    ({"max_logprob_drift": -1, "tie_margin": 0}, "max_logprob_drift must be a number >= 0, got -1"),
    ({"max_logprob_drift": 0.1}, "tie_margin must be a number >= 0, got None"),
    (3, "a name or a mapping, got 3"),
])
def test_a_bad_tolerance_is_named(bad, named):
    with pytest.raises(EquivalenceError, match=named.replace("(", r"\(").replace(")", r"\)")):
        tolerance(bad)


def test_every_catalog_control_names_a_known_tolerance_or_none():
    for item in controls.CATALOG:
        assert "numerics" in item, item["id"]
        assert item["numerics"] is None or item["numerics"] in TOLERANCES, item["id"]
    # the communication and memory path is judged (the list), the scheduler only recorded
    judged = {item["id"] for item in controls.CATALOG if item["numerics"]}
    assert {"p2p", "cumem", "custom-all-reduce", "nccl-algo", "engine-image"} <= judged
    assert controls.numerics("chunked-prefill") is None


@pytest.mark.parametrize("fixture", ["vllm-0.32-cpu-chat-logprobs.json"])
def test_a_real_engines_chat_logprobs_parse(fixture):
    """A real vLLM answer (the lab's CPU build, tiny random model; tests/fixtures/engine-logs/README)."""
    doc = json.loads((FIXTURES / fixture).read_text())
    parsed = parse_answer(doc["choices"][0]["logprobs"])
    content = doc["choices"][0]["logprobs"]["content"]
    assert parsed["tokens"] == [c["token"] for c in content]
    assert len(parsed["margins"]) == len(content) and all(m is None or m >= 0 for m in parsed["margins"])
    assert compare([parsed], [parsed], "exact")["verdict"] == "pass"


def test_an_answer_without_logprobs_is_named():
    with pytest.raises(EquivalenceError, match="no token logprobs"):
        parse_answer(None)


# ---- against the engine double (TEST DOUBLE) ---------------------------------------------------

def test_two_runs_of_the_same_engine_agree_exactly(engine_double):
    first = probe(engine_double().url, 4, 16)
    again = probe(engine_double().url, 4, 16)
    assert first["errors"] == [] and len(first["answers"]) == 4
    assert compare(first["answers"], again["answers"], "exact")["verdict"] == "pass"


def test_the_corruption_fault_is_caught(engine_double):
    reference = probe(engine_double().url, 4, 16)["answers"]
    corrupted = probe(engine_double({"DOUBLE_FAULT": "corrupt_tokens:0.5"}).url, 4, 16)["answers"]
    result = compare(reference, corrupted, "kernels")
    assert result["verdict"] == "fail" and "garbled" in result["reason"], result


def test_the_numerics_fault_fails_exact_and_passes_a_looser_tolerance(engine_double):
    reference = probe(engine_double().url, 4, 16)["answers"]
    moved = probe(engine_double({"DOUBLE_FAULT": "numerics:0.02"}).url, 4, 16)["answers"]
    assert compare(reference, moved, "exact")["verdict"] == "fail"
    assert compare(reference, moved, "reduction-order")["verdict"] == "pass"


def test_an_engine_that_fails_requests_is_an_error_per_prompt(engine_double):
    result = probe(engine_double({"DOUBLE_FAULT": "fail_requests"}).url, 2, 4)
    assert len(result["errors"]) == 2 and "HTTP 500" in result["errors"][0]
