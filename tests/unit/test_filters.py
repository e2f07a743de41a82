"""Filter plugins: secret and identifier redaction, the P2P support verdict."""

import pytest
from ansible.errors import AnsibleFilterError
from failure_cause import failure_cause
from p2p_support import p2p_support_verdict

from serving_rollout.redaction import redact_identifiers, redact_secrets


def test_secret_keys_and_assignments_are_redacted():
    data = {"HF_TOKEN": "hf_abc", "api_key": "k", "note": "SGLANG_API_KEY=abc --api-key s3cr3t --port 1",
            "nested": [{"password": "p"}, "DB_PASSWORD='x y'"], "empty_token": "", "count": 3}
    out = redact_secrets(data)
    assert out["HF_TOKEN"] == "<redacted>" and out["api_key"] == "<redacted>"
    assert out["note"] == "SGLANG_API_KEY=<redacted> --api-key <redacted> --port 1"
    assert out["nested"] == [{"password": "<redacted>"}, "DB_PASSWORD=<redacted>"]
    assert out["empty_token"] == "" and out["count"] == 3


def test_redaction_is_idempotent():
    once = redact_secrets("TOKEN=abc")
    assert redact_secrets(once) == once == "TOKEN=<redacted>"


def test_identifiers_are_replaced_longest_first():
    out = redact_identifiers({"host": "gpu-1", "fqdn": "gpu-1.example", "gpu-1": ["GPU-uuid"]},
                             ["gpu-1", "gpu-1.example", "GPU-uuid"])
    assert out == {"host": "<id-2>", "fqdn": "<id-0>", "<id-2>": ["<id-1>"]}


def test_identifiers_must_be_a_list_of_strings():
    with pytest.raises(ValueError, match="needs a list of strings, got 'gpu-1'"):
        redact_identifiers({}, "gpu-1")


def test_p2p_support_verdict_bad_input_names_types():
    with pytest.raises(AnsibleFilterError, match="got str and dict"):
        p2p_support_verdict("x", {})


def test_p2p_support_verdict_vm_guest_with_nvml_ok():
    iommu = {"enabled": False, "reasons": ["no IOMMU groups"], "gpus": []}
    nvml = {"available": True, "all_pairs_p2p_ok": True, "pairs": [{"i": 0, "j": 1, "p2p_ok": True}]}
    verdict = p2p_support_verdict(iommu, nvml)
    assert verdict["support_evidence"] and verdict["blockers"] == []
    assert verdict["notes"] == ["no IOMMU groups"]  # said once, not "no IOMMU groups: no IOMMU groups"


def test_p2p_support_verdict_one_gpu_has_no_peer_pair_and_each_note_once():
    reason = "no IOMMU groups in /sys/kernel/iommu_groups (no IOMMU, or a VM guest without a virtual IOMMU)"
    iommu = {"enabled": False, "reasons": [reason, reason], "gpus": []}
    nvml = {"available": True, "gpu_count": 1, "all_pairs_p2p_ok": False, "pairs": [], "gpus": [{"index": 0}]}
    verdict = p2p_support_verdict(iommu, nvml)
    assert verdict == {"driver_p2p_ok": None, "blockers": [], "support_evidence": False, "applies": False,
                       "notes": [reason, "one GPU: no peer pair; P2P controls do not apply"],
                       "proof": "not applicable: one GPU has no peer pair"}


def test_token_counts_are_not_secrets():
    data = {"prompt_tokens": 5, "max_tokens": 3, "usage": {"completion_tokens_details": 1}, "tokenizer": "t",
            "HF_TOKEN": "hf_x", "note": "max_tokens=64 access_token=abc"}
    out = redact_secrets(data)
    assert out["prompt_tokens"] == 5 and out["max_tokens"] == 3 and out["tokenizer"] == "t"
    assert out["usage"] == {"completion_tokens_details": 1}
    assert out["HF_TOKEN"] == "<redacted>" and out["note"] == "max_tokens=64 access_token=<redacted>"


def test_failure_cause_names_each_failed_loop_item_not_the_loop():
    loop = {"failed": True, "msg": "One or more items failed", "results": [
        {"failed": False, "msg": "health OK: pass"},
        {"failed": True, "msg": "preflight check 'TP size' failed: observed 2, expected 4"},
        {"failed": True, "msg": "preflight check 'context length' failed: observed 32768, expected 1"}]}
    assert failure_cause(loop, "Assert each preflight check") == (
        "Assert each preflight check: preflight check 'TP size' failed: observed 2, expected 4; "
        "preflight check 'context length' failed: observed 32768, expected 1")
    assert failure_cause({"failed": True, "msg": "timed out"}, "Wait") == "Wait: timed out"
    with pytest.raises(AnsibleFilterError, match="got str: 'boom'"):
        failure_cause("boom")


def test_recipe_base_url_takes_the_operators_port_then_the_units_then_the_engines_default():
    from serving_recipe_filters import recipe_base_url
    # the lab's real vLLM unit names no --port: vLLM serves on its default, 8000 (test_real_vllm_lab.py)
    assert recipe_base_url({"engine": "vllm", "engine_args": {"--model": "m"}}) == "http://127.0.0.1:8000"
    assert recipe_base_url({"engine": "sglang", "engine_args": {}}) == "http://127.0.0.1:30000"
    assert recipe_base_url({"engine": "vllm", "engine_args": {"--port": "8001"}}) == "http://127.0.0.1:8001"
    assert recipe_base_url({"engine": "vllm", "engine_args": {"--port": "8001"}}, "10.0.0.5", 9000) == \
        "http://10.0.0.5:9000"
    assert recipe_base_url({"engine": "unknown", "engine_args": {"--port": "7000"}}) == "http://127.0.0.1:7000"
    with pytest.raises(AnsibleFilterError, match="engine 'unknown' has no known default port: set rollout_engine_port"):
        recipe_base_url({"engine": "unknown", "engine_args": {}})
    with pytest.raises(AnsibleFilterError, match="takes an adopted recipe"):
        recipe_base_url({"model": "m"})
