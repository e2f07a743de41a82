"""candidate-render.yml on the lab host: adopt, snapshot, plan, render, check/diff, refusals."""

import json
import re
import subprocess

import pytest
from conftest import LAB_HOST, lab, run_playbook

LAB = LAB_HOST  # this test worker's lab host (conftest)
SECRET = "lab-secret-6f1d0c9e2b7a4e58"


def original_state():
    return (lab("sha256sum", "/etc/systemd/system/sglang.service", "/etc/sglang/sglang.env").stdout,
            lab("systemctl", "show", "-p", "InvocationID,ActiveState,UnitFileState", "sglang.service").stdout)


def render(*extra_args, check=False, **extra_vars):
    result = run_playbook("candidate-render.yml", extra_vars or None, inventory="inventory/lab", local=False,
                          check=check)
    return result


@pytest.fixture(autouse=True)
def clean_lab():
    def clean():
        lab("rm", "-rf", "/var/lib/serving-rollout", "/etc/systemd/system/sglang-candidate.service",
            "/etc/systemd/system/quoting.service", "/etc/systemd/system/quoting-candidate.service",
            "/etc/systemd/system/docker-unpinned.service", "/etc/systemd/system/percent.service",
            "/etc/systemd/system/percent-candidate.service", "/etc/systemd/system/exported.service",
            "/etc/sglang/exported.env", "/etc/systemd/system/planted.service",
            "/etc/systemd/system/planted-candidate.service", "/etc/systemd/system/official.service",
            "/etc/systemd/system/official-candidate.service")
        lab("systemctl", "daemon-reload")
    clean()
    before = original_state()
    yield
    assert original_state() == before, "the original unit or its files changed"
    clean()


def test_check_diff_shows_the_candidate_and_changes_nothing():
    result = render(check=True)
    assert result.returncode == 0, result.stdout
    assert "-Environment=NCCL_P2P_DISABLE=1" in result.stdout
    assert "+Environment=NCCL_P2P_DISABLE=0" in result.stdout
    assert SECRET not in result.stdout + result.stderr
    assert lab("test", "-e", "/etc/systemd/system/sglang-candidate.service", check=False).returncode == 1
    assert lab("test", "-e", "/var/lib/serving-rollout", check=False).returncode == 1


def test_render_writes_a_verified_static_candidate_and_converges():
    first = render()
    assert first.returncode == 0, first.stdout
    assert lab("systemctl", "is-enabled", "sglang-candidate.service", check=False).stdout.strip() == "static"
    assert lab("systemd-analyze", "verify", "/etc/systemd/system/sglang-candidate.service",
               check=False).returncode == 0
    manifest = json.loads(lab("cat", "/var/lib/serving-rollout/sglang.service/manifest.json").stdout)
    assert [f["kind"] for f in manifest["files"]] == ["unit", "EnvironmentFile", "EnvironmentFile"]
    assert lab("stat", "-c", "%a", manifest["files"][1]["copy"]).stdout.strip() == "600"
    assert manifest["state"]["UnitFileState"] == "enabled"
    second = render()
    assert re.search(r"lab-gpu-1\s+: ok=\d+\s+changed=0 ", second.stdout), second.stdout


QUOTING_UNIT = r"""[Unit]
Description=quoting test

[Service]
Environment=NCCL_P2P_DISABLE=1
ExecStart=/usr/bin/python3 -m sglang.launch_server --model-path "/srv/models/My Model" \
  --json-model-override-args "{\"rope_scaling\": {\"type\": \"yarn\"}}" \
  --note 'single quoted "inner"' --api-key ${SGLANG_API_KEY}

[Install]
WantedBy=multi-user.target
"""


def exec_argv(unit):
    shown = lab("systemctl", "show", "-p", "ExecStart", unit).stdout
    return re.search(r"argv\[\]=(.*?) ; ignore_errors", shown).group(1)


def test_execstart_quoting_survives_rendering_as_systemd_reads_it():
    lab("sh", "-c", f"cat > /etc/systemd/system/quoting.service <<'EOF'\n{QUOTING_UNIT}EOF\nsystemctl daemon-reload")
    result = render(serving_recipe_unit="quoting.service")
    assert result.returncode == 0, result.stdout
    assert exec_argv("quoting-candidate.service") == exec_argv("quoting.service")
    shown = lab("systemctl", "show", "-p", "Environment", "quoting-candidate.service").stdout
    assert "NCCL_P2P_DISABLE=0" in shown


PERCENT_UNIT = """[Service]
Environment=NCCL_P2P_DISABLE=1
ExecStart=/usr/bin/python3 -m sglang.launch_server --model-path /srv/m --served-model-name qwen-100%% \\
  --chunked-prefill-size 4096 --port 30000 --host 0.0.0.0
"""


def test_a_percent_and_a_changed_flag_keep_their_words_as_systemd_reads_them():
    """Issue 49: `%%` was written back as `%` (a specifier to systemd) and a changed flag moved to the end of the
    command line (a second difference). On real systemd: the candidate's argv is the original's with the flag's
    value changed in place, and systemd reads the literal % in both."""
    lab("sh", "-c", f"cat > /etc/systemd/system/percent.service <<'EOF'\n{PERCENT_UNIT}EOF\nsystemctl daemon-reload")
    result = render(serving_recipe_unit="percent.service", serving_recipe_candidate_id="chunked-prefill",
                    serving_recipe_control_value=8192)
    assert result.returncode == 0, result.stdout[-3000:]
    original, candidate = exec_argv("percent.service"), exec_argv("percent-candidate.service")
    assert "--served-model-name qwen-100% --chunked-prefill-size 4096 --port" in original, original
    assert candidate == original.replace("--chunked-prefill-size 4096", "--chunked-prefill-size 8192"), candidate


def test_an_export_line_systemd_ignores_makes_a_p2p_candidate_a_no_op_refused_with_the_truth():
    """Issue 49: `export NCCL_P2P_DISABLE=1` in an EnvironmentFile sets nothing in systemd (the engine gets it
    unset, NCCL's 0): a p2p candidate would change nothing, and is refused for that before anything is written."""
    lab("sh", "-c", "printf 'export NCCL_P2P_DISABLE=1\\n' > /etc/sglang/exported.env && "
                    "sed 's|^Environment=NCCL_P2P_DISABLE=1|EnvironmentFile=/etc/sglang/exported.env|' "
                    "/etc/systemd/system/sglang.service > /etc/systemd/system/exported.service && "
                    "systemctl daemon-reload")
    result = render(serving_recipe_unit="exported.service")
    assert result.returncode != 0, result.stdout[-3000:]
    assert ("candidate refused: systemd ignores `export NCCL_P2P_DISABLE=1` in /etc/sglang/exported.env (an "
            "EnvironmentFile is not a shell script); the candidate does not change the effective NCCL_P2P_DISABLE: "
            "'0' before (from NCCL's default), '0' after" in re.sub(r"\s+", " ", result.stdout)), result.stdout[-3000:]
    assert lab("test", "-e", "/etc/systemd/system/exported-candidate.service", check=False).returncode == 1
    assert lab("test", "-e", "/var/lib/serving-rollout/exported.service", check=False).returncode == 1


PLANTED_UNIT = """[Unit]
Description=planted
Requires=sysinit.target
Wants=network-online.target
After=network-online.target

[Service]
StartLimitIntervalSec=60
Environment="PATH=/usr/local/cuda/bin:$PATH" HOME_NOTE=${HOME}
Environment=NCCL_P2P_DISABLE=1
ExecStart=/usr/bin/python3 -m sglang.launch_server --model-path /srv/m --tp-size 2 --port 30000
"""


def test_a_unit_systemd_runs_fine_with_path_home_a_set_of_dependencies_and_an_unknown_key_gets_its_candidate():
    """Issue 49, on real systemd 252: `$PATH` and `${HOME}` in Environment= reach systemd's probe untouched (the
    module once expanded them to its own), `Requires=`/`Wants=` are compared as sets across daemon-reloads, and
    systemd's load warning for an unknown [Service] key that names nothing the engine runs is shown, not a
    refusal. Rendered twice around a daemon-reload: the same reading, no difference, no change."""
    lab("sh", "-c", f"cat > /etc/systemd/system/planted.service <<'EOF'\n{PLANTED_UNIT}EOF\nsystemctl daemon-reload")
    first = render(serving_recipe_unit="planted.service")
    assert first.returncode == 0, first.stdout[-3000:]
    said = first.stdout + first.stderr  # Ansible prints a module's warnings on stderr
    assert "Unknown key 'StartLimitIntervalSec' in section [Service], ignoring" in said, said[-3000:]  # shown
    # systemctl show escapes a literal $ as \$: the value is the unit's own words, never expanded
    shown = lab("systemctl", "show", "-p", "Environment", "planted-candidate.service").stdout.replace("\\$", "$")
    assert "PATH=/usr/local/cuda/bin:$PATH" in shown and "HOME_NOTE=${HOME}" in shown, shown
    lab("systemctl", "daemon-reload")
    second = render(serving_recipe_unit="planted.service")
    assert second.returncode == 0, second.stdout[-3000:]
    assert re.search(r"lab-gpu-1\s+: ok=\d+\s+changed=0 ", second.stdout), second.stdout[-3000:]


OFFICIAL_UNIT = """[Service]
Environment=NCCL_P2P_DISABLE=1
ExecStart=/usr/bin/podman run --rm --name official -e NCCL_P2P_DISABLE {image} Qwen/Qwen3-8B --tensor-parallel-size 2
"""


@pytest.mark.parametrize("image, problem", [
    ("docker.io/vllm/vllm-openai@sha256:" + "ab" * 32, None),
    ("docker.io/vllm/vllm-openai:latest", "image 'docker.io/vllm/vllm-openai:latest' is not pinned by digest"),
])
def test_the_official_vllm_image_takes_its_model_as_a_word_pinned_or_refused_for_the_pin(image, problem):
    """Issue 49: the official image's entrypoint is `vllm serve`, so the word after it is the model: adopted and
    rendered when pinned, refused for the pin (never as "a launcher") when not."""
    lab("sh", "-c", f"cat > /etc/systemd/system/official.service <<'EOF'\n{OFFICIAL_UNIT.format(image=image)}EOF\n"
                    "systemctl daemon-reload")
    result = render(serving_recipe_unit="official.service")
    text = re.sub(r"\s+", " ", result.stdout)
    assert "launcher" not in text, text[-3000:]
    if problem:
        assert result.returncode != 0 and problem in text, text[-3000:]
        return
    assert result.returncode == 0, text[-3000:]
    assert "Qwen/Qwen3-8B --tensor-parallel-size 2" in exec_argv("official-candidate.service")


def test_unknown_candidate_id_lists_the_valid_ones():
    result = render(serving_recipe_candidate_id="nvlink-sharp")
    assert result.returncode != 0
    text = re.sub(r"\s+", " ", result.stdout)
    assert "unknown candidate id 'nvlink-sharp'; the plan's catalog ids: p2p, cumem, custom-all-reduce, " \
           "scheduler-and-speculation; the catalog: p2p, cumem, custom-all-reduce, disable-custom-all-reduce, " \
           "nccl-algo," in text, text[-2000:]
    assert lab("test", "-e", "/var/lib/serving-rollout", check=False).returncode == 1


def test_malformed_plan_names_the_path_in_the_document(tmp_path):
    plan = json.loads(open("plans/candidate-plan-example.json").read())
    del plan["ordered_candidates"][1]["id"]
    plan["schema"] = "something/v0"
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    result = render(serving_recipe_plan_file=str(path))
    assert result.returncode != 0
    assert "$.ordered_candidates[1].id: required, missing" in result.stdout
    assert "$.schema: expected 'anvil-serving.followup-candidate-plan/v1', got 'something/v0'" in result.stdout


def test_broken_json_plan_names_the_file(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text('{"schema": "anvil-serving.followup-candidate-plan/v1", "ordered_candidates": [}')
    result = render(serving_recipe_plan_file=str(path))
    text = re.sub(r"\s+", " ", result.stdout)
    assert result.returncode != 0 and f"plan file {path} is not valid JSON: Expecting value: line 1" in text


def test_candidate_without_its_evidence_is_refused():
    result = render(serving_recipe_candidate_id="custom-all-reduce", serving_recipe_assumed_evidence={})
    assert result.returncode != 0
    assert "candidate 'custom-all-reduce' needs evidence first: a peer-path proof with verdict ok" in result.stdout


def test_missing_original_unit_is_named():
    result = render(serving_recipe_unit="nonexistent.service")
    assert result.returncode != 0 and "serving unit 'nonexistent.service' not found" in result.stdout


def test_image_not_pinned_by_digest_is_refused():
    unit = ("[Service]\nExecStart=/usr/bin/docker run --rm --name s lmsysorg/sglang:latest "
            "python3 -m sglang.launch_server --model-path m --tp-size 2\n")
    lab("sh", "-c", f"printf '%s' '{unit}' > /etc/systemd/system/docker-unpinned.service && systemctl daemon-reload")
    result = render(serving_recipe_unit="docker-unpinned.service")
    assert result.returncode != 0
    assert "image 'lmsysorg/sglang:latest' is not pinned by digest" in result.stdout


def test_original_changed_since_snapshot_is_never_overwritten():
    assert render().returncode == 0
    saved = lab("cat", "/etc/sglang/sglang.env").stdout  # kept in the test, never as a copy on the host
    lab("sh", "-c", "echo EXTRA=1 >> /etc/sglang/sglang.env")
    try:
        result = render()
        assert result.returncode != 0
        assert "the original changed since its snapshot; nothing was overwritten: /etc/sglang/sglang.env" \
            in result.stdout
        kept = lab("sh", "-c", "cat /var/lib/serving-rollout/sglang.service/files/01-sglang.env").stdout
        assert "EXTRA=1" not in kept
    finally:
        subprocess.run(["podman", "exec", "-i", LAB, "sh", "-c",
                        "cat > /etc/sglang/sglang.env && chmod 600 /etc/sglang/sglang.env"],
                       input=saved, text=True, check=True)


def test_a_second_difference_only_systemd_sees_refuses_the_candidate_before_anything_stops():
    """A drop-in for the candidate's name (left by an operator or a config tool) that the project's parser
    never reads: systemd merges it, so the candidate would run with NCCL_ALGO=Tree besides the one control.
    systemd's own reading of both units catches it; the candidate is removed, the original untouched."""
    dropin = "/etc/systemd/system/sglang-candidate.service.d"
    lab("sh", "-c", f"mkdir -p {dropin} && printf '[Service]\\nEnvironment=NCCL_ALGO=Tree\\n' "
                    f"> {dropin}/10-tuning.conf")
    try:
        result = render()
        assert result.returncode != 0
        message = re.sub(r"\s+", " ", result.stdout).replace("''", "'")
        assert "candidate refused before any change: sglang-candidate.service is not sglang.service with one " \
               "control changed in systemd's own reading (env NCCL_P2P_DISABLE)" in message, message[-3000:]
        assert "environment NCCL_ALGO: None -> 'Tree'" in message, message[-3000:]
        assert lab("test", "-e", "/etc/systemd/system/sglang-candidate.service", check=False).returncode == 1
        assert lab("systemctl", "is-active", "sglang.service", check=False).stdout.strip() == "active"
        assert SECRET not in result.stdout + result.stderr
    finally:
        lab("rm", "-rf", dropin)
        lab("systemctl", "daemon-reload")


def test_systemds_reading_proves_the_rendered_candidate_and_the_secret_only_as_a_digest():
    result = render()
    assert result.returncode == 0, result.stdout[-3000:]
    assert SECRET not in result.stdout + result.stderr
    # the action ends with unit_oracle's comparison; the diff it shows comes before its result
    proof = re.search(r"TASK \[serving_recipe : Snapshot the original, write the one-control candidate and prove it in "
                      r"systemd's own reading\] \*+\n(?:.*\n)*?(?:ok|changed): \[lab-gpu-1\]", result.stdout)
    assert proof, result.stdout[-3000:]


@pytest.mark.parametrize("extra, message", [
    ({"serving_recipe_candidate_id": "nccl-algo", "serving_recipe_control_value": "Ring; rm -rf /"},
     "control 'nccl-algo': 'Ring; rm -rf /' is not a value matching"),
    ({"serving_recipe_candidate_id": "nccl-min-nchannels", "serving_recipe_control_value": "0"},
     "control 'nccl-min-nchannels' needs an integer 1-64, got '0'"),
    ({"serving_recipe_candidate_id": "custom",
      "serving_recipe_custom_change": {"kind": "env", "name": "NCCL_IB_HCA", "value": "mlx5"}},
     "a custom candidate declares how the engine proves it"),
    ({"serving_recipe_candidate_id": "engine-image",
      "serving_recipe_control_value": "lmsysorg/sglang@sha256:" + "ef" * 32},
     "process unit runs no container image"),
])
def test_a_bad_catalog_setting_is_refused_by_name_before_anything_is_written(extra, message):
    before = lab("sha256sum", "/etc/systemd/system/sglang.service").stdout
    result = render(**extra)
    text = re.sub(r"\s+", " ", result.stdout)
    assert result.returncode != 0 and message in text, text[-2000:]
    assert lab("test", "-e", "/var/lib/serving-rollout", check=False).returncode == 1
    assert lab("test", "-e", "/etc/systemd/system/sglang-candidate.service", check=False).returncode == 1
    assert lab("sha256sum", "/etc/systemd/system/sglang.service").stdout == before
