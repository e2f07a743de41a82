"""Secrets kept out by design: a serving unit whose EnvironmentFile holds secrets under a dozen
name shapes (most of which no name pattern would guess) runs a whole candidate cycle at -vv;
no planted value appears in the console or in any file the run writes, while allow-listed
controls (one of them named ...TOKEN) are shown. An inline secret is refused without showing it."""

import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import LAB_HOST, REPO, lab

LAB = LAB_HOST  # this test worker's lab host (conftest)
UNIT = "secret-shapes.service"
ENV = "/etc/secret-shapes/secrets.env"
PORT = 30021
PLANTED = {
    "SGLANG_API_KEY": "sk-plant-sglang-0001",
    "OPENAI_KEY": "sk-plant-openai-0002",
    "AWS_ACCESS_KEY_ID": "AKIAPLANT00000003",
    "AWS_SECRET_ACCESS_KEY": "plant-aws-secret-0004",
    "HF_TOKEN": "hf_plantToken0005",
    "GITHUB_PAT": "ghp_plant0006abcdef",
    "DATABASE_URL": "postgres://svc:plantpw0007@db.internal/prod",
    "SLACK_WEBHOOK": "https://hooks.slack.example/plant0008",
    "MY_SERVICE_CREDENTIAL": "plant-cred-0009",
    "AZURE_CLIENT_SECRET": "plant-azure-0010",
    "SENTRY_DSN": "https://plant0011@sentry.example/1",
    "X_PASS_PHRASE": "plant-passphrase-0012",
}
UNIT_TEXT = f"""[Unit]
Description=secret shapes test unit (engine double)

[Service]
EnvironmentFile={ENV}
EnvironmentFile=/etc/sglang/engine-double.env
Environment=NCCL_P2P_DISABLE=1
ExecStart=/usr/bin/python3 /opt/engine-double/engine_double.py --model-path Qwen/Qwen3-235B-A22B-Instruct-2507-FP8 \\
  --revision 2c9ba0a5b9c2d5c7b2a4e1f0a7d3c6e9b8f1a2d4 --tp-size 2 --context-length 32768 \\
  --host 127.0.0.1 --port {PORT} --api-key ${{SGLANG_API_KEY}}

[Install]
WantedBy=multi-user.target
"""


@pytest.fixture
def secret_unit():
    lab("mkdir", "-p", "/etc/secret-shapes")
    lab("sh", "-c", f"cat > {ENV} && chmod 600 {ENV}",
        stdin="".join(f"{k}={v}\n" for k, v in PLANTED.items()))
    lab("sh", "-c", f"cat > /etc/systemd/system/{UNIT}", stdin=UNIT_TEXT)
    lab("sh", "-c", f"systemctl daemon-reload && systemctl enable --now {UNIT}")
    yield
    lab("sh", "-c", f"systemctl disable --now {UNIT}; rm -rf /etc/systemd/system/{UNIT} /etc/secret-shapes "
                    f"/var/lib/serving-rollout/{UNIT} /etc/systemd/system/secret-shapes-candidate.service; "
                    "systemctl daemon-reload", check=False)


def ansible_playbook(playbook, extra, *flags):
    command = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "inventory/lab", *flags,
               str(REPO / "playbooks" / playbook), "-e", json.dumps(extra)]
    env = {"PATH": f"{REPO / '.venv' / 'bin'}:/usr/bin:/bin", "ANSIBLE_NOCOLOR": "1", "HOME": "/root",
           "CONTAINERS_CONF": str(REPO / "lab" / "containers.conf"),
           "LAB_SSH_PORT": os.environ.get("LAB_SSH_PORT", "2222")}  # this test worker's lab host (conftest)
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def leaks(text):
    return sorted(name for name, value in PLANTED.items() if value in text)


def test_no_planted_secret_reaches_the_console_or_any_file_the_run_writes(secret_unit):
    evidence = Path(tempfile.mkdtemp(prefix="secrets-evidence-"))
    extra = {"serving_recipe_unit": UNIT, "rollout_engine_port": PORT, "rollout_evidence_dir": str(evidence),
             "rollout_gpu_process_pattern": f"engine_double.py .*--port {PORT}", "rollout_cell_requests": 2,
             "rollout_cells": [{"name": "1k", "prompt_tokens": 1000}], "rollout_gate_target_tokens": 1000}
    result = ansible_playbook("candidate.yml", extra, "-vv")
    assert result.returncode == 0, result.stdout[-4000:]
    console = result.stdout + result.stderr
    assert leaks(console) == []
    written = {str(p): p.read_text(errors="replace") for p in evidence.rglob("*") if p.is_file() and p.suffix != ".png"}
    assert len(written) >= 10
    assert {path: leaks(text) for path, text in written.items() if leaks(text)} == {}
    assert leaks(lab("cat", f"/var/lib/serving-rollout/{UNIT}/state.json").stdout) == []
    # Allow-listed controls stay visible, one of them named ...TOKEN.
    recipes = json.loads(next(evidence.rglob("recipes.json")).read_text())
    assert recipes["original"]["env_file_env"]["DOUBLE_DECODE_MS_PER_TOKEN"] == "4"
    assert recipes["original"]["env_file_env"]["OPENAI_KEY"] == "<redacted>"
    assert recipes["original"]["env"]["NCCL_P2P_DISABLE"] == "1"
    rollback = ansible_playbook("rollback.yml", {"serving_recipe_unit": UNIT, "rollout_engine_port": PORT,
                                                 "rollout_evidence_dir": str(evidence)}, "-vv")
    assert rollback.returncode == 0, rollback.stdout[-3000:]
    assert leaks(rollback.stdout + rollback.stderr) == []


def test_inline_secret_is_refused_without_showing_it(secret_unit):
    inline = UNIT_TEXT.replace("Environment=NCCL_P2P_DISABLE=1",
                               "Environment=NCCL_P2P_DISABLE=1 HF_TOKEN=hf_inlinePlant0099")
    lab("sh", "-c", f"cat > /etc/systemd/system/{UNIT} && systemctl daemon-reload", stdin=inline)
    result = ansible_playbook("candidate-render.yml", {"serving_recipe_unit": UNIT}, "-vv", "--check", "--diff")
    text = re.sub(r"\s+", " ", result.stdout)
    assert result.returncode != 0
    assert "the unit holds inline secret values (Environment=HF_TOKEN)" in text
    assert "hf_inlinePlant0099" not in result.stdout + result.stderr and leaks(result.stdout + result.stderr) == []


# Values that only comments hold, and a credential given inline (systemd.exec(5) SetCredential=).
COMMENTED = ("hf_commentPlant0101abcdef", "sk-commentPlant0102xyz", "ghp_commentPlant0103abcdefgh")
COMMENTED_TEXT = UNIT_TEXT.replace("[Service]\n", "[Service]\n"
                                   "# old token: Environment=HF_TOKEN=hf_commentPlant0101abcdef\n"
                                   "#ExecStart=/usr/bin/python3 serve --api-key sk-commentPlant0102xyz --port 1\n"
                                   "; rotated 2026-11: ghp_commentPlant0103abcdefgh\n")
CANDIDATE = "/etc/systemd/system/secret-shapes-candidate.service"


def comment_leaks(text):
    return [value for value in COMMENTED if value in text]


def test_secrets_in_comment_lines_never_reach_the_console_the_result_or_the_candidate(secret_unit):
    """A unit whose comments hold old secrets (systemd ignores the lines; the redaction does not): a plain
    candidate-render.yml at the default verbosity, then -vvv --check --diff, shows every comment redacted by the
    same allow-lists, and the candidate written on the host holds none of them."""
    lab("sh", "-c", f"cat > /etc/systemd/system/{UNIT} && systemctl daemon-reload", stdin=COMMENTED_TEXT)
    plain = ansible_playbook("candidate-render.yml", {"serving_recipe_unit": UNIT})
    assert plain.returncode == 0, plain.stdout[-3000:]
    assert comment_leaks(plain.stdout + plain.stderr) == [] and leaks(plain.stdout + plain.stderr) == []
    assert comment_leaks(lab("cat", CANDIDATE).stdout) == []
    verbose = ansible_playbook("candidate-render.yml", {"serving_recipe_unit": UNIT}, "-vvv", "--check", "--diff")
    out = verbose.stdout + verbose.stderr
    assert verbose.returncode == 0, verbose.stdout[-3000:]
    assert comment_leaks(out) == [] and leaks(out) == []
    assert "# old token: Environment=<redacted>" in out and "#ExecStart=/usr/bin/python3 serve --api-key <redacted>" \
        in out, out[-3000:]


def test_an_inline_credential_is_refused_naming_the_directive_never_its_value(secret_unit):
    inline = UNIT_TEXT.replace("[Service]\n", "[Service]\nSetCredential=hf-token:hf_credPlant0201abcdef\n")
    lab("sh", "-c", f"rm -f {CANDIDATE}; cat > /etc/systemd/system/{UNIT} && systemctl daemon-reload", stdin=inline)
    result = ansible_playbook("candidate-render.yml", {"serving_recipe_unit": UNIT}, "-vvv", "--diff")
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert "the unit gives a credential inline (SetCredential=hf-token)" in re.sub(r"\s+", " ", result.stdout), \
        result.stdout[-3000:]
    assert "hf_credPlant0201abcdef" not in out and leaks(out) == []
    assert lab("test", "-e", CANDIDATE, check=False).returncode == 1  # no candidate copied the credential
