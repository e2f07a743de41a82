"""journal_scan's redaction of log lines: secret-named words (the same words as unit_recipe's)
and the EnvironmentFiles' secret values."""


from serving_rollout.module_utils import journal_reading as journal_scan


def test_log_lines_lose_every_secret_named_value_and_known_secret():
    line = ("args: credential=abc123 HF_TOKEN: xyz987 --api-key k123456 private_key='pk-1' "
            "tokenizer=qwen served with lab-secret-6f1d")
    out = journal_scan.redact(line, {"lab-secret-6f1d"})
    for secret in ("abc123", "xyz987", "k123456", "pk-1", "lab-secret-6f1d"):
        assert secret not in out, out
    assert "tokenizer=qwen" in out and out.count("<redacted>") == 5
