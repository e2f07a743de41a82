"""The runtime's reading of a container and the one-control proof, on real `podman inspect` output
(tests/fixtures/containers/)."""

import json

from conftest import FIXTURES

from serving_rollout.module_utils import container_truth

KEY = b"run-key"


def inspect(name):
    return json.loads((FIXTURES / "containers" / f"podman-inspect-{name}.json").read_text())[0]


def test_the_candidates_container_differs_in_the_one_control_only():
    original = container_truth.view(inspect("original"), KEY)
    candidate = container_truth.view(inspect("candidate"), KEY)
    result = container_truth.proof(original, candidate, {"kind": "env", "name": "NCCL_P2P_DISABLE", "value": "0"})
    assert result == {"ok": True, "control": "env NCCL_P2P_DISABLE", "seen": True, "unexplained": []}
    # identity (id, name, times, storage paths, the create command) is not part of the reading
    assert container_truth.differences(original, candidate) == [
        {"what": "env NCCL_P2P_DISABLE", "before": "1", "after": "0"}]


def test_what_only_the_runtime_sees_is_named_and_refused():
    original, planted = container_truth.view(inspect("original"), KEY), container_truth.view(inspect("planted"), KEY)
    result = container_truth.proof(original, planted, {"kind": "env", "name": "NCCL_P2P_DISABLE", "value": "0"})
    assert not result["ok"] and result["seen"]
    named = {d["what"]: (d["before"], d["after"]) for d in result["unexplained"]}
    assert named["host ShmSize"] == (1073741824, 2147483648)
    assert "env PLANTED" in named


def test_no_change_at_all_is_refused():
    original = container_truth.view(inspect("original"), KEY)
    result = container_truth.proof(original, original, {"kind": "env", "name": "NCCL_P2P_DISABLE", "value": "0"})
    assert not result["ok"] and not result["seen"]


def test_secret_values_are_digests_that_still_compare():
    original = container_truth.view(inspect("original"), KEY)
    candidate = container_truth.view(inspect("candidate"), KEY)
    text = json.dumps([original, candidate])
    assert "lab-secret-x" not in text and "hf_fixture_secret" not in text
    token = original["env"]["HF_TOKEN"]
    assert token.startswith("hmac:") and token == candidate["env"]["HF_TOKEN"]
    assert container_truth.view(inspect("original"), b"other")["env"]["HF_TOKEN"] != token


def test_an_arg_control_is_seen_in_the_command_words():
    original = container_truth.view(inspect("original"), KEY)
    changed = inspect("original")
    changed["Config"]["Cmd"] = changed["Config"]["Cmd"] + ["--max-num-batched-tokens", "128"]
    result = container_truth.proof(original, container_truth.view(changed, KEY),
                                   {"kind": "arg", "name": "--max-num-batched-tokens", "value": "128"})
    assert result["ok"], result
    changed["Config"]["Cmd"] = changed["Config"]["Cmd"] + ["--auth-blob", "other-secret"]  # an unlisted flag
    result = container_truth.proof(original, container_truth.view(changed, KEY),
                                   {"kind": "arg", "name": "--max-num-batched-tokens", "value": "128"})
    assert not result["ok"] and "other-secret" not in json.dumps(result)


def test_a_failed_proof_says_every_other_difference():
    from serving_rollout.module_utils.unit_oracle import proof_reason
    original, planted = container_truth.view(inspect("original"), KEY), container_truth.view(inspect("planted"), KEY)
    result = container_truth.proof(original, planted, {"kind": "env", "name": "NCCL_P2P_DISABLE", "value": "0"})
    reason = proof_reason(result, "the runtime")
    assert reason.startswith(f"it also differs in {len(result['unexplained'])} other thing(s): ")
    assert "host ShmSize: 1073741824 -> 2147483648" in reason
    nothing = container_truth.proof(original, original, {"kind": "env", "name": "NCCL_P2P_DISABLE", "value": "0"})
    assert proof_reason(nothing, "the runtime") == "the runtime sees no change of env NCCL_P2P_DISABLE at all"
