"""journal_scan's redaction of log lines: secret-named words (the same words as unit_recipe's)
and the EnvironmentFiles' secret values."""

import importlib.util

from conftest import REPO

# The module as a file, the way Ansible runs it (library/ is not a package).
_spec = importlib.util.spec_from_file_location("journal_scan", REPO / "library" / "journal_scan.py")
journal_scan = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(journal_scan)


def test_log_lines_lose_every_secret_named_value_and_known_secret():
    line = ("args: credential=abc123 HF_TOKEN: xyz987 --api-key k123456 private_key='pk-1' "
            "tokenizer=qwen served with lab-secret-6f1d")
    out = journal_scan.redact(line, {"lab-secret-6f1d"})
    for secret in ("abc123", "xyz987", "k123456", "pk-1", "lab-secret-6f1d"):
        assert secret not in out, out
    assert "tokenizer=qwen" in out and out.count("<redacted>") == 5
