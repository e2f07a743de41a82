"""unit_recipe with realistic serving units: docker, podman, process with drop-ins, vLLM."""

import json

import pytest
from conftest import FIXTURES

from serving_rollout.module_utils import unit_recipe as ur

UNITS = FIXTURES / "units"
ENV = {"/etc/sglang/sglang.env": (UNITS / "sglang-process.env").read_text()}


def load(name, dropins=()):
    sections = ur.parse_unit_text((UNITS / name).read_text())
    return ur.merge_dropins(sections, [(UNITS / d).read_text() for d in dropins])


def recipe_of(name, dropins=(), env=None):
    sections = load(name, dropins)
    return sections, ur.parse_recipe(sections, env or ENV)


def candidate(name, change, dropins=(), env=None):
    sections, recipe = recipe_of(name, dropins, env)
    text = ur.render_sections(ur.apply_change(sections, recipe, change))
    return recipe, text, ur.parse_recipe(ur.parse_rendered(text), env or ENV)


def test_docker_sglang_unit_recipe():
    _, recipe = recipe_of("sglang-docker.service")
    assert recipe["runtime"] == "docker" and recipe["engine"] == "sglang"
    assert recipe["image_digest"].startswith("sha256:4f1e") and recipe["container_name"] == "sglang-qwen"
    assert recipe["model"] == "/models/Qwen3-235B-A22B-FP8" and recipe["tp_size"] == "2"
    assert recipe["context_length"] == "393216" and recipe["gpus"] == "device=0,1"
    assert recipe["concurrency"] == "1"
    assert recipe["env"]["NCCL_P2P_DISABLE"] == "1" and recipe["engine_args"]["--disable-custom-all-reduce"] is True
    override = json.loads(recipe["engine_args"]["--json-model-override-args"])
    assert override["rope_scaling"]["factor"] == 4.0


def test_process_unit_with_dropin_and_environment_file():
    _, recipe = recipe_of("sglang-process.service", ["sglang-process-override.conf"])
    assert recipe["runtime"] == "process" and recipe["gpus"] == "0,1"
    assert recipe["env"]["NCCL_DEBUG"] == "INFO" and recipe["env"]["SGLANG_API_KEY"] == "sk-planted-secret-0001"
    assert recipe["model"] == "/srv/models/My Model"
    assert ur.redacted(recipe)["env"]["SGLANG_API_KEY"] == "<redacted>"
    assert ur.inline_secrets(recipe) == []  # the secret lives in the EnvironmentFile


def test_vllm_unit_recipe_and_inline_secret():
    _, recipe = recipe_of("vllm-docker.service")
    assert recipe["engine"] == "vllm" and recipe["model"] == "meta-llama/Llama-3.1-70B-Instruct"
    assert recipe["tp_size"] == "8" and recipe["context_length"] == "65536"
    assert ur.inline_secrets(recipe) == ["-e HF_TOKEN"]
    assert "hf_inline_secret_0003" not in json.dumps(ur.redacted(recipe))


@pytest.mark.parametrize("unit, change, control, before, after", [
    ("sglang-docker.service", {"kind": "env", "name": "NCCL_P2P_DISABLE", "value": "0"},
     "env:NCCL_P2P_DISABLE", "1", "0"),
    ("sglang-docker.service", {"kind": "env", "name": "NCCL_CUMEM_ENABLE", "value": None},
     "env:NCCL_CUMEM_ENABLE", "0", None),
    ("sglang-docker.service", {"kind": "arg", "name": "--disable-custom-all-reduce", "value": None},
     "arg:--disable-custom-all-reduce", True, None),
    ("sglang-podman.service", {"kind": "env", "name": "NCCL_P2P_DISABLE", "value": None},
     "env:NCCL_P2P_DISABLE", "1", None),
    ("sglang-podman.service", {"kind": "speculative", "value": {"--speculative-algorithm": "EAGLE",
                                                                "--speculative-num-steps": "5"}},
     "speculative", {"--speculative-algorithm": "EAGLE", "--speculative-num-steps": "3"},
     {"--speculative-algorithm": "EAGLE", "--speculative-num-steps": "5"}),
    ("sglang-process.service", {"kind": "env", "name": "NCCL_P2P_DISABLE", "value": "0"},
     "env:NCCL_P2P_DISABLE", "1", "0"),
    ("sglang-process.service", {"kind": "arg", "name": "--chunked-prefill-size", "value": "4096"},
     "arg:--chunked-prefill-size", "8192", "4096"),
    ("vllm-docker.service", {"kind": "arg", "name": "--disable-custom-all-reduce", "value": None},
     "arg:--disable-custom-all-reduce", True, None),
])
def test_candidates_differ_by_exactly_the_declared_control(unit, change, control, before, after):
    original, text, cand = candidate(unit, change)
    assert ur.check_one_control(original, cand) == {"control": control, "before": before, "after": after}
    assert "[Install]" not in text and "(candidate)" in text


def test_candidate_keeps_quoting_of_spaces_quotes_and_json():
    original, text, cand = candidate("sglang-docker.service",
                                     {"kind": "env", "name": "NCCL_P2P_DISABLE", "value": "0"})
    assert cand["engine_args"]["--json-model-override-args"] == original["engine_args"]["--json-model-override-args"]
    assert '"{\\"rope_scaling\\": {\\"type\\": \\"yarn\\", \\"factor\\": 4.0}}"' in text
    assert cand["container_name"] == "sglang-qwen-candidate"
    _, text, cand = candidate("sglang-process.service", {"kind": "env", "name": "NCCL_P2P_DISABLE", "value": "0"})
    assert cand["model"] == "/srv/models/My Model" and "${SGLANG_API_KEY}" in text
    assert "sk-planted-secret" not in text


def test_dropins_are_merged_into_the_candidate():
    _, text, cand = candidate("sglang-process.service", {"kind": "env", "name": "NCCL_P2P_DISABLE", "value": "0"},
                              dropins=["sglang-process-override.conf"])
    assert cand["env"]["NCCL_DEBUG"] == "INFO" and "Restart=always" in text and "Restart=on-failure" not in text


def test_more_than_one_difference_is_refused_naming_every_one():
    original = recipe_of("sglang-docker.service")[1]
    other = json.loads(json.dumps(original))
    other["env"]["NCCL_P2P_DISABLE"] = "0"
    other["engine_args"].pop("--disable-custom-all-reduce")
    other["tp_size"] = "4"
    with pytest.raises(ur.RecipeError) as error:
        ur.check_one_control(original, other)
    message = str(error.value)
    assert "held controls changed (tp_size)" in message and "found 3" in message
    assert "env:NCCL_P2P_DISABLE: '1' -> '0'" in message and "arg:--disable-custom-all-reduce: True -> None" in message


def test_no_difference_is_refused():
    original = recipe_of("sglang-docker.service")[1]
    with pytest.raises(ur.RecipeError, match="found 0: none"):
        ur.check_one_control(original, original)


def test_control_in_an_environment_file_is_refused():
    env = {"/etc/sglang/sglang.env": "NCCL_IB_DISABLE=1\n"}
    sections, recipe = recipe_of("sglang-process.service", env=env)
    with pytest.raises(ur.RecipeError, match="NCCL_IB_DISABLE is set in an EnvironmentFile"):
        ur.apply_change(sections, recipe, {"kind": "env", "name": "NCCL_IB_DISABLE", "value": "0"})


@pytest.mark.parametrize("change, message", [
    ({"kind": "volume", "value": "x"}, "change kind must be env, arg, speculative, image, program, got 'volume'"),
    ({"kind": "env", "name": "BAD NAME", "value": "1"}, "env control name 'BAD NAME' is not a variable name"),
    ({"kind": "arg", "name": "tp-size", "value": "4"}, "arg control name 'tp-size' must be a --flag"),
])
def test_bad_changes_name_the_bad_value(change, message):
    sections, recipe = recipe_of("sglang-docker.service")
    with pytest.raises(ur.RecipeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ur.apply_change(sections, recipe, change)


def test_lines_systemd_ignores_are_ignored_and_named_redacted():
    """systemd runs a unit without a line lacking '=' ("Missing '=', ignoring line.") or an assignment before any
    section: so does the reading, naming each line (redacted) instead of refusing the whole unit."""
    ignored = []
    sections = ur.parse_unit_text("vi /etc/systemd/system/vllm.service\nType=simple\n[Service]\ngarbage\n"
                                  "ExecStart=/bin/serve\n  --api-key sk-live-123\n", ignored)
    assert sections == [["Service", [["ExecStart", "/bin/serve"]]]]
    assert ignored == [(1, "<redacted>", "missing '='"), (2, "Type=simple", "an assignment outside of any section"),
                       (4, "<redacted>", "missing '='"), (6, "<redacted>", "missing '='")]
    assert "sk-live-123" not in str(ignored)


def test_bad_unit_text_is_named():
    with pytest.raises(ur.RecipeError, match="exactly one ExecStart, found 0"):
        ur.parse_recipe(ur.parse_unit_text("[Service]\nType=simple\n"))


def test_unit_lines_are_redacted_wherever_the_secret_sits():
    assert ur.redact_unit_line("Environment=HF_TOKEN=hf_x NCCL_P2P_DISABLE=1") == \
        "Environment=HF_TOKEN=<redacted> NCCL_P2P_DISABLE=1"
    assert ur.redact_unit_line("ExecStart=/bin/serve --api-key sk-1 --port 1") == \
        "ExecStart=/bin/serve --api-key <redacted> --port 1"
    assert ur.redact_unit_line("ExecStart=/bin/serve --api-key ${SGLANG_API_KEY}") == \
        "ExecStart=/bin/serve --api-key ${SGLANG_API_KEY}"
    assert ur.redact_unit_line("[Service]") == "[Service]"


OFFICIAL_IMAGE = ("[Service]\nExecStart=/usr/bin/docker run --rm --name vllm --gpus all --ipc host {image} "
                  "Qwen/Qwen3-8B --tensor-parallel-size 2\n")


@pytest.mark.parametrize("image", ["vllm/vllm-openai@sha256:" + "ab" * 32, "vllm/vllm-openai:latest"])
def test_the_official_vllm_image_takes_the_model_as_its_entrypoints_first_word(image):
    """vllm/vllm-openai's entrypoint is `vllm serve`: the word after the image is the model, never a launcher
    (issue 49); whether the image is pinned is then the module's own check."""
    recipe = ur.parse_recipe(ur.parse_unit_text(OFFICIAL_IMAGE.format(image=image)), {})
    assert (recipe["engine"], recipe["model"], recipe["tp_size"]) == ("vllm", "Qwen/Qwen3-8B", "2"), recipe
    assert recipe["image_digest"] == (image.split("@")[1] if "@" in image else None)
    launched = ur.launched_by(recipe["runtime"], recipe["argv"], recipe["image"], recipe["engine_command"])
    assert (launched["kind"], launched["engine"]) == ("engine", "vllm"), launched
    # a program after the same image is still a command of its own, not a model
    program = ur.launched_by("docker", [], image, ["bash", "-c", "vllm serve Qwen/Qwen3-8B"])
    assert program["kind"] == "launcher", program


def test_the_official_vllm_image_unit_is_adopted_not_refused_as_a_launcher():
    from serving_rollout.module_utils import unit_shapes

    text = OFFICIAL_IMAGE.format(image="vllm/vllm-openai@sha256:" + "cd" * 32)
    recipe = unit_shapes.adopt("vllm.service", "/etc/systemd/system/vllm.service",
                               lambda path: text if path.endswith("vllm.service") else None)
    assert (recipe["engine"], recipe["model"], recipe["runtime"]) == ("vllm", "Qwen/Qwen3-8B", "docker"), recipe


# Shapes learned from public deployment scripts that write a vLLM unit (written here, not copied): the official
# image unpinned, pulled in ExecStartPre, `Requires=docker.service`, the model by --model, a key from the unit's
# environment, CUDA_VISIBLE_DEVICES set by systemd but not passed to the container.
DOCKER_VLLM_UNIT = """[Unit]
Description=vLLM OpenAI-compatible server
After=network-online.target docker.service
Requires=docker.service

[Service]
Restart=always
RestartSec=10
Environment=CUDA_VISIBLE_DEVICES=0
Environment=VLLM_API_KEY=sk-unit-4d2f
ExecStartPre=-/usr/bin/docker stop vllm
ExecStartPre=/usr/bin/docker pull vllm/vllm-openai:latest
ExecStart=/usr/bin/docker run --rm --name vllm --gpus all --ipc=host -p 127.0.0.1:8000:8000 \\
  -v /srv/hf:/root/.cache/huggingface vllm/vllm-openai:latest --model /root/.cache/huggingface/qwen \\
  --served-model-name local --max-model-len 32768 --tensor-parallel-size 2 --api-key "$VLLM_API_KEY" --port 8000
ExecStop=/usr/bin/docker stop vllm

[Install]
WantedBy=multi-user.target
"""


def test_a_docker_vllm_unit_in_the_shape_deployment_scripts_write_is_read_as_systemd_and_docker_run_it():
    recipe = ur.parse_recipe(ur.parse_unit_text(DOCKER_VLLM_UNIT), {})
    assert (recipe["engine"], recipe["runtime"], recipe["container_name"]) == ("vllm", "docker", "vllm")
    assert (recipe["model"], recipe["tp_size"], recipe["context_length"]) == ("/root/.cache/huggingface/qwen", "2",
                                                                              "32768")
    assert recipe["image_digest"] is None  # unpinned: the module refuses it for that, first
    # systemd's environment is the unit's; the container gets only what docker passes (-e, --env-file)
    assert recipe["unit_env"]["CUDA_VISIBLE_DEVICES"] == "0" and "CUDA_VISIBLE_DEVICES" not in recipe["env"]
    assert recipe["engine_args"]["--api-key"] == "$VLLM_API_KEY"
    assert "sk-unit-4d2f" not in json.dumps(ur.redacted(recipe))
    # the candidate renames the container in every Exec line that names it, and changes only the flag
    change = {"kind": "arg", "name": "--max-num-seqs", "value": "64"}
    text = ur.render_sections(ur.apply_change(ur.parse_unit_text(DOCKER_VLLM_UNIT), recipe, change))
    assert "ExecStartPre=-/usr/bin/docker stop vllm-candidate" in text and "--name vllm-candidate" in text
    candidate = ur.parse_recipe(ur.parse_rendered(text), {})
    assert ur.check_one_control(recipe, candidate, change)["control"] == "arg:--max-num-seqs"


@pytest.mark.parametrize("line, shown", [
    ("# old token: Environment=HF_TOKEN=hf_abcdefghijklmnop1234", "# old token: Environment=<redacted>"),
    ("#ExecStart=/usr/bin/python3 -m sglang.launch_server --api-key sk-abcdef1234567890 --port 30000",
     "#ExecStart=/usr/bin/python3 -m sglang.launch_server --api-key <redacted> --port 30000"),
    ("; Environment=NCCL_P2P_DISABLE=1 HF_TOKEN=hf_x", "; Environment=NCCL_P2P_DISABLE=1 HF_TOKEN=<redacted>"),
    ("# rotated: ghp_abcdefghijklmnopqrstuvwxyz0123", "# rotated: <redacted>"),
    ("# Ansible managed (lab provisioning)", "# Ansible managed (lab provisioning)"),
    ("SetCredential=hf-token:hf_abcdefghijklmnopqrstu", "SetCredential=<redacted>"),
    ("PassEnvironment=HF_TOKEN", "PassEnvironment=<redacted>"),
    ("X-Vault-Token=s.abc", "X-Vault-Token=<redacted>"),
    ("Restart=unless-stopped", "Restart=unless-stopped"),
    ("WorkingDirectory=/srv/models/Qwen3-235B-A22B-Instruct-2507-FP8",
     "WorkingDirectory=/srv/models/Qwen3-235B-A22B-Instruct-2507-FP8"),
    ("Description=token hf_abcdefghijklmnop1234 in a description", "Description=<redacted>"),
    ("vi /etc/systemd/system/vllm.service", "<redacted>"),
])
def test_every_line_of_a_unit_passes_the_allow_list_comments_and_unknown_directives_too(line, shown):
    assert ur.redact_unit_line(line) == shown


def test_an_inline_credential_is_named_by_its_id_never_its_value():
    sections = ur.parse_unit_text("[Service]\nSetCredential=hf-token:hf_abc\nSetCredentialEncrypted=db: k7Q==\n"
                                  "LoadCredential=api:/etc/creds/api\nExecStart=/bin/serve\n")
    assert ur.inline_credentials(sections) == ["SetCredential=hf-token", "SetCredentialEncrypted=db"]


def test_a_word_glued_after_a_bare_flag_is_not_its_value_and_removing_the_flag_keeps_it():
    """A real shape: `--disable-custom-all-reduce Restart=always` on one ExecStart line (a directive pasted onto
    the command). The engine's parser takes the flag with no value (the adapter's is_bare_flag), so the word is the
    engine's next argument, and the custom-all-reduce candidate removes the flag alone."""
    unit = ("[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --model-path m --tp-size 2 "
            "--disable-custom-all-reduce Restart=always --port 30000\n")
    sections = ur.parse_unit_text(unit)
    recipe = ur.parse_recipe(sections, {})
    assert recipe["engine_args"]["--disable-custom-all-reduce"] is True
    change = {"kind": "arg", "name": "--disable-custom-all-reduce", "value": None}
    candidate_sections = ur.apply_change(sections, recipe, change)
    start = ur.values(candidate_sections, "Service", "ExecStart")[0]
    assert "--disable-custom-all-reduce" not in start and "Restart=always --port 30000" in start
