"""Managed mode's pure parts: the recipe's schema and rules (errors by path, secrets refused inline), its
render (service unit, Quadlet) read back by the project's parser, one control changed, the inventory patch
that moves only that line, the recipe of an adopted unit, and the equality proof's reading of argv order.
What systemd makes of a render is the lab's to show (tests/integration/test_managed_lab.py)."""

import copy

import pytest

from serving_rollout import recipe as managed
from serving_rollout.module_utils import recipe_adopt, recipe_render, unit_oracle, unit_recipe

DIGEST = "sha256:" + "ab" * 32
RECIPE = {
    "unit": "sglang.service", "engine": "sglang",
    "runtime": {"kind": "process", "python": "/opt/sglang/.venv/bin/python"},
    "model": "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "revision": "2c9ba0a5", "tp": 8, "context": 131072,
    "port": 30000,
    "environment": {"NCCL_P2P_DISABLE": "1", "NCCL_IB_DISABLE": "1"},
    "environment_files": ["/etc/sglang/secrets.env"],
    "engine_args": {"--mem-fraction-static": "0.85", "--enable-metrics": True, "--api-key": "${SGLANG_API_KEY}"},
    "unit_settings": {"user": "sglang", "restart": "on-failure", "timeout_stop_sec": 120,
                      "limits": {"LimitNOFILE": 1048576, "LimitMEMLOCK": "infinity"}},
}
CONTAINER = dict(copy.deepcopy(RECIPE), engine="vllm", model="meta-llama/Llama-3.1-70B-Instruct",
                 runtime={"kind": "container", "tool": "podman", "image": f"docker.io/vllm/vllm-openai@{DIGEST}",
                          "name": "vllm", "options": ["--device", "nvidia.com/gpu=all", "--ipc=host"],
                          "pass_env": ["VLLM_API_KEY"]},
                 engine_args={"--api-key": "${VLLM_API_KEY}"},
                 secrets=[{"secret": "hf-token", "env": "HF_TOKEN"}], output="quadlet")


def test_a_good_recipe_has_no_errors_and_a_bad_one_is_named_by_path():
    assert managed.recipe_errors(RECIPE) == []
    assert managed.recipe_errors(CONTAINER) == []
    bad = dict(RECIPE, tp=0, port="http", runtime={"kind": "process"}, extra=1)
    errors = managed.recipe_errors(bad)
    assert "$: Additional properties are not allowed ('extra' was unexpected)" in errors
    assert any(e.startswith("$.tp:") for e in errors) and any(e.startswith("$.port:") for e in errors)
    assert any(e.startswith("$.runtime:") for e in errors)
    unpinned = dict(CONTAINER, runtime=dict(CONTAINER["runtime"], image="docker.io/vllm/vllm-openai:latest"))
    assert [e for e in managed.recipe_errors(unpinned) if e.startswith("$.runtime")]


def test_secrets_only_by_reference_and_the_error_never_shows_the_value():
    inline = dict(RECIPE, environment={"HF_TOKEN": "hf_secretValue1"}, engine_args={"--api-key": "sk-secret-2"})
    errors = managed.recipe_errors(inline)
    assert errors == [
        "$.environment.HF_TOKEN: a secret-named variable inline; put it in an EnvironmentFile (environment_files) "
        "or, in a container, a podman secret (secrets)",
        "$.engine_args.--api-key: a secret inline; give it as a $VAR reference to the environment (an "
        "EnvironmentFile or a podman secret)"]
    assert "hf_secretValue1" not in str(errors) and "sk-secret-2" not in str(errors)
    assert managed.recipe_errors(dict(RECIPE, output="quadlet")) == [
        "$.output: quadlet needs a podman container runtime, got 'process'"]
    assert managed.recipe_errors(dict(RECIPE, engine_args={"--tp-size": "4"})) == [
        "$.engine_args.--tp-size: set by the recipe's own field 'tp'; give it there once"]


def test_the_service_unit_reads_back_as_the_recipe_says():
    files = managed.recipe_files(RECIPE)
    assert list(files) == ["/etc/systemd/system/sglang.service"]
    sections = unit_recipe.parse_unit_text(files["/etc/systemd/system/sglang.service"])
    parsed = unit_recipe.parse_recipe(sections)
    assert parsed["argv"][:3] == ["/opt/sglang/.venv/bin/python", "-m", "sglang.launch_server"]
    assert parsed["engine"] == "sglang" and parsed["model"] == RECIPE["model"] and parsed["tp_size"] == "8"
    assert parsed["engine_args"]["--enable-metrics"] is True
    assert parsed["engine_args"]["--api-key"] == "${SGLANG_API_KEY}"
    assert parsed["unit_env"] == {"NCCL_P2P_DISABLE": "1", "NCCL_IB_DISABLE": "1"}
    assert unit_recipe.values(sections, "Service", "LimitMEMLOCK") == ["infinity"]
    assert unit_recipe.values(sections, "Service", "EnvironmentFile") == ["/etc/sglang/secrets.env"]
    assert files["/etc/systemd/system/sglang.service"].startswith("# Rendered by serving-rollout (managed mode)")


def test_a_percent_in_a_value_stays_literal_for_systemd():
    text = managed.recipe_files(dict(RECIPE, model="/models/100%-tuned"))["/etc/systemd/system/sglang.service"]
    assert "--model-path /models/100%%-tuned" in text


def test_the_quadlet_holds_the_image_secret_and_command_and_the_unit_settings():
    files = managed.recipe_files(CONTAINER)
    text = files["/etc/containers/systemd/sglang.container"]
    sections = dict((name, dict(items)) for name, items in unit_recipe.parse_unit_text(text))
    assert sections["Container"]["Image"] == f"docker.io/vllm/vllm-openai@{DIGEST}"
    assert sections["Container"]["Secret"] == "hf-token,type=env,target=HF_TOKEN"
    assert sections["Container"]["PodmanArgs"] == "--device nvidia.com/gpu=all --ipc=host -e VLLM_API_KEY"
    # vLLM's image runs the API server itself: Exec= is its arguments only.
    assert sections["Container"]["Exec"].startswith("--model meta-llama/Llama-3.1-70B-Instruct --revision 2c9ba0a5 "
                                                    "--tensor-parallel-size 8 --max-model-len 131072 --port 30000")
    assert sections["Service"]["User"] == "sglang" and sections["Install"]["WantedBy"] == "multi-user.target"


def test_a_container_service_runs_in_the_foreground_removed_and_stopped_by_name():
    recipe = dict(CONTAINER, output="service", runtime=dict(CONTAINER["runtime"], stop_timeout_s=20))
    text = managed.recipe_files(recipe)["/etc/systemd/system/sglang.service"]
    sections = unit_recipe.parse_unit_text(text)
    assert unit_recipe.values(sections, "Service", "ExecStartPre") == ["-/usr/bin/podman rm -f vllm"]
    assert unit_recipe.values(sections, "Service", "ExecStop") == ["/usr/bin/podman stop -t 20 vllm"]
    parsed = unit_recipe.parse_recipe(sections)
    assert parsed["runtime"] == "podman" and parsed["container_name"] == "vllm" and parsed["image_digest"] == DIGEST
    assert parsed["env"]["NCCL_P2P_DISABLE"] == "1" and parsed["engine"] == "vllm"


def test_one_control_changes_the_recipe_and_nothing_else():
    drop = recipe_render.apply_control(RECIPE, {"kind": "env", "name": "NCCL_P2P_DISABLE", "value": None})
    assert recipe_render.recipe_difference(RECIPE, drop) == [
        {"path": "environment.NCCL_P2P_DISABLE", "before": "1", "after": None}]
    arg = recipe_render.apply_control(RECIPE, {"kind": "arg", "name": "--cuda-graph-max-bs", "value": "160"})
    assert recipe_render.recipe_difference(RECIPE, arg) == [
        {"path": "engine_args.--cuda-graph-max-bs", "before": None, "after": "160"}]
    tp = recipe_render.apply_control(RECIPE, {"kind": "arg", "name": "--tp-size", "value": 4})
    assert recipe_render.recipe_difference(RECIPE, tp) == [{"path": "tp", "before": 8, "after": 4}]
    spec = recipe_render.apply_control(RECIPE, {"kind": "speculative", "value": {"speculative_algorithm": "EAGLE"}})
    assert spec["engine_args"]["--speculative-algorithm"] == "EAGLE"
    assert RECIPE["environment"]["NCCL_P2P_DISABLE"] == "1"  # the original recipe is untouched
    with pytest.raises(recipe_render.RecipeRenderError, match="runtime: an image change needs a container"):
        recipe_render.apply_control(RECIPE, {"kind": "image", "value": "x@" + DIGEST})
    # an engine build: a process's interpreter, or its command's entry point; never a container's
    build = recipe_render.apply_control(RECIPE, {"kind": "program", "value": "/opt/sglang-next/bin/python"})
    assert recipe_render.recipe_difference(RECIPE, build) == [
        {"path": "runtime.python", "before": "/opt/sglang/.venv/bin/python", "after": "/opt/sglang-next/bin/python"}]
    serve = dict(RECIPE, runtime={"kind": "process", "command": ["/opt/vllm/bin/vllm", "serve"]})
    assert recipe_render.apply_control(serve, {"kind": "program", "value": "/opt/v2/bin/vllm"})["runtime"][
        "command"] == ["/opt/v2/bin/vllm", "serve"]
    with pytest.raises(recipe_render.RecipeRenderError, match="runtime: a program change needs a process"):
        recipe_render.apply_control(CONTAINER, {"kind": "program", "value": "/opt/v2/bin/python"})


def test_the_candidate_recipe_is_its_own_unit_and_container():
    container = dict(CONTAINER, output="service")
    candidate = managed.candidate_recipe(container, {"kind": "env", "name": "NCCL_P2P_DISABLE", "value": "0"},
                                         "sglang-candidate.service")
    assert candidate["unit"] == "sglang-candidate.service" and candidate["runtime"]["name"] == "vllm-candidate"
    assert candidate["environment"]["NCCL_P2P_DISABLE"] == "0" and container["runtime"]["name"] == "vllm"
    with pytest.raises(managed.RecipeError, match="a candidate of a Quadlet original is not supported yet"):
        managed.candidate_recipe(CONTAINER, {"kind": "env", "name": "X", "value": "1"}, "sglang-candidate.service")


HOST_VARS = """---
# gpu-07: the PCIe host (see the runbook)
serving_unit_recipe:
  unit: sglang.service
  engine: sglang
  runtime: {kind: process, python: /opt/sglang/.venv/bin/python}
  model: Qwen/Qwen3-235B-A22B-Instruct-2507-FP8
  tp: 8
  port: 30000
  environment:
    NCCL_P2P_DISABLE: "1"   # ACS on: see the peer-path evidence
    NCCL_IB_DISABLE: "1"
  engine_args:
    --enable-metrics: true
other_setting: keep me
"""


def test_the_promotion_patch_moves_only_the_controls_line_and_keeps_the_operators_comments(tmp_path):
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "gpu-07.yml").write_text(HOST_VARS)
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("ntp: pool.ntp.org\n")
    result = managed.promote(tmp_path, "gpu-07", ["gpu_serving_hosts"], "serving_unit_recipe",
                             {"kind": "env", "name": "NCCL_P2P_DISABLE", "value": "0"}, tmp_path / "out")
    moved = [line for line in result["patch"].splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert moved == ['-    NCCL_P2P_DISABLE: "1"   # ACS on: see the peer-path evidence',
                     '+    NCCL_P2P_DISABLE: "0"   # ACS on: see the peer-path evidence']
    assert result["patch"].startswith("--- a/host_vars/gpu-07.yml\n+++ b/host_vars/gpu-07.yml\n")
    assert (tmp_path / "host_vars" / "gpu-07.yml").read_text() == HOST_VARS  # not written unless asked
    after = (tmp_path / "out" / "recipe-after.yml").read_text()
    assert after.startswith("---\n# gpu-07: the PCIe host") and "other_setting: keep me" in after
    assert (tmp_path / "out" / "inventory-revert.patch").read_text().count('NCCL_P2P_DISABLE: "1"') == 1
    dropped = managed.promote(tmp_path, "gpu-07", [], "serving_unit_recipe",
                              {"kind": "env", "name": "NCCL_P2P_DISABLE", "value": None}, tmp_path / "drop",
                              write=True)
    assert dropped["written"] and "NCCL_P2P_DISABLE" not in (tmp_path / "host_vars" / "gpu-07.yml").read_text()


def test_the_recipe_must_sit_in_exactly_one_inventory_file(tmp_path):
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("ntp: pool.ntp.org\n")
    with pytest.raises(managed.RecipeError, match=r"serving_unit_recipe must be set in exactly one inventory file"):
        managed.promote(tmp_path, "gpu-07", [], "serving_unit_recipe",
                        {"kind": "env", "name": "X", "value": "0"}, tmp_path / "out")


def adopted(text, env_files=None):
    sections = unit_recipe.parse_unit_text(text)
    return unit_recipe.parse_recipe(sections, env_files), sections


def test_an_adopted_process_unit_becomes_a_recipe_that_renders_the_same_words():
    text = open("tests/fixtures/units/sglang-process.service").read()
    parsed, sections = adopted(text)
    recipe, problems = recipe_adopt.managed_recipe("sglang.service", parsed, sections)
    assert managed.recipe_errors(recipe) == [], (recipe, problems)
    rendered = unit_recipe.parse_recipe(unit_recipe.parse_unit_text(managed.recipe_files(recipe)[
        "/etc/systemd/system/sglang.service"]))
    assert rendered["engine_args"] == parsed["engine_args"] or problems
    assert rendered["unit_env"] == {k: v for k, v in parsed["unit_env"].items() if not unit_recipe.is_secret_name(k)}


def test_an_adopted_container_unit_keeps_its_options_env_files_and_pass_through():
    text = ("[Service]\nEnvironmentFile=/etc/sglang/sglang.env\nExecStartPre=-/usr/bin/podman rm -f sg\n"
            "ExecStart=/usr/bin/podman run --rm --name sg --network host --env-file /etc/sg/nccl.env "
            f"-e SGLANG_API_KEY -e NCCL_P2P_DISABLE=1 quay.io/x/sglang@{DIGEST} python3 -m sglang.launch_server "
            "--model-path m --tp-size 2 --port 30000 --api-key ${SGLANG_API_KEY}\n"
            "ExecStop=/usr/bin/podman stop -t 20 sg\nKillMode=mixed\n")
    parsed, sections = adopted(text)
    recipe, problems = recipe_adopt.managed_recipe("sg.service", parsed, sections)
    assert problems == [] and managed.recipe_errors(recipe) == []
    assert recipe["runtime"] == {"kind": "container", "tool": "podman", "image": f"quay.io/x/sglang@{DIGEST}",
                                 "name": "sg", "options": ["--network", "host"], "env_files": ["/etc/sg/nccl.env"],
                                 "pass_env": ["SGLANG_API_KEY"], "command": ["python3", "-m", "sglang.launch_server"],
                                 "stop_timeout_s": 20}
    assert recipe["environment"] == {"NCCL_P2P_DISABLE": "1"}
    # A setting the recipe has no field for is kept word for word in a drop-in of its own.
    assert recipe["unit_settings"]["dropins"] == {"50-adopted.conf": "[Service]\nKillMode=mixed\n"}


def test_what_a_recipe_cannot_hold_is_named_and_no_secret_enters_it():
    text = ("[Service]\nEnvironment=HF_TOKEN=hf_adoptSecret1 NCCL_P2P_DISABLE=1\n"
            "ExecStart=/usr/local/bin/vllm serve m --tensor-parallel-size 2 --port 8000 --api-key sk-adopt-2\n")
    parsed, sections = adopted(text)
    recipe, problems = recipe_adopt.managed_recipe("vllm.service", parsed, sections)
    assert any("sets the secret-named HF_TOKEN inline" in p for p in problems)
    assert any("engine argument --api-key holds a secret inline" in p for p in problems)
    assert len(problems) == 2 and recipe["model"] == "m" and recipe["runtime"]["command"][-1] == "serve"
    assert "hf_adoptSecret1" not in str((recipe, problems)) and "sk-adopt-2" not in str((recipe, problems))


def test_the_equality_proof_forgives_the_order_of_engine_flags_only():
    before = ["/usr/bin/python3", "/opt/x.py", "--port", "1", "--host", "h", "--enable-metrics"]
    reordered = ["/usr/bin/python3", "/opt/x.py", "--host", "h", "--enable-metrics", "--port", "1"]
    changed = ["/usr/bin/python3", "/opt/x.py", "--host", "h", "--enable-metrics", "--port", "2"]
    diff = {"what": "ExecStart[0] argv", "before": before, "after": reordered,
            "argv": {"before": before, "after": reordered}}
    proof = unit_oracle.equal_proof([diff], "/opt/x.py")
    assert proof["ok"] and proof["reordered"] == ["ExecStart[0] argv"]
    diff = dict(diff, after=changed, argv={"before": before, "after": changed})
    assert not unit_oracle.equal_proof([diff], "/opt/x.py")["ok"]
    runtime = ["/usr/bin/podman", "run", "--env-file", "a", "--env-file", "b", "img", "/opt/x.py", "--port", "1"]
    swapped = ["/usr/bin/podman", "run", "--env-file", "b", "--env-file", "a", "img", "/opt/x.py", "--port", "1"]
    diff = {"what": "ExecStart[0] argv", "argv": {"before": runtime, "after": swapped}, "before": 0, "after": 0}
    assert not unit_oracle.equal_proof([diff], "/opt/x.py")["ok"]  # the runtime's order counts (env-file order)
    setting = {"what": "setting Slice", "before": "system-sglang.slice", "after": "system.slice"}
    assert unit_oracle.equal_proof([setting], "/opt/x.py")["unexplained"] == [setting]


def test_vllm_serve_keeps_its_model_positional_in_the_recipe_and_the_render():
    text = ("[Service]\nEnvironmentFile=/etc/vllm/vllm.env\nEnvironment=NCCL_P2P_DISABLE=1\n"
            "ExecStart=/opt/vllm/.venv/bin/vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 8 "
            "--max-model-len 65536 --port 8000 --api-key ${VLLM_API_KEY}\n")
    parsed, sections = adopted(text)
    recipe, problems = recipe_adopt.managed_recipe("vllm.service", parsed, sections)
    assert problems == [] and managed.recipe_errors(recipe) == []
    assert recipe["runtime"] == {"kind": "process", "command": ["/opt/vllm/.venv/bin/vllm", "serve"]}
    assert recipe["model"] == "meta-llama/Llama-3.1-70B-Instruct" and recipe["tp"] == 8
    rendered = managed.recipe_files(recipe)["/etc/systemd/system/vllm.service"]
    back = unit_recipe.parse_recipe(unit_recipe.parse_unit_text(rendered))
    assert back["argv"] == parsed["argv"]  # the same words, in the same order
    assert recipe_render.launcher_word(recipe) == "meta-llama/Llama-3.1-70B-Instruct"


def test_the_docker_vllm_fixture_converts_but_names_its_inline_token():
    parsed, sections = adopted(open("tests/fixtures/units/vllm-docker.service").read())
    recipe, problems = recipe_adopt.managed_recipe("vllm.service", parsed, sections)
    assert problems == ["-e sets the secret-named HF_TOKEN inline: the recipe takes secrets only by reference "
                        "(an EnvironmentFile, or a podman secret); left out"]
    assert "hf_inline_secret_0003" not in str(recipe)
    assert recipe["runtime"]["tool"] == "docker" and recipe["runtime"]["command"] == ["vllm", "serve"]
    assert recipe["runtime"]["options"] == ["--gpus", "all", "--ipc", "host"] and recipe["tp"] == 8
    assert managed.recipe_errors(recipe) == []


def test_a_var_as_a_flags_value_stays_a_reference_and_a_bare_var_word_is_refused():
    parsed, sections = adopted("[Service]\nEnvironmentFile=/etc/m.env\nExecStart=/usr/bin/python3 -m "
                               "sglang.launch_server --model-path $MODEL --tp-size 2\n",
                               {"/etc/m.env": "MODEL=/srv/m\n"})
    recipe, problems = recipe_adopt.managed_recipe("x.service", parsed, sections)
    assert problems == [] and managed.recipe_errors(recipe) == []
    rendered = unit_recipe.parse_recipe(unit_recipe.parse_unit_text(managed.recipe_files(recipe)[
        "/etc/systemd/system/x.service"]))
    assert rendered["argv"] == parsed["argv"]  # `$MODEL` as written: systemd expands it in both
    parsed, sections = adopted("[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --model-path /srv/m "
                               "$ARGS\n")
    recipe, problems = recipe_adopt.managed_recipe("x.service", parsed, sections)
    assert recipe is None and "cannot hold these words" in problems[0], problems


def test_a_refused_launcher_is_shown_without_the_values_a_wrapper_sets():
    parsed, sections = adopted("[Service]\nExecStart=/usr/bin/env -i MYCORP_AUTH=zz9PlanTed /usr/bin/python3 -m "
                               "sglang.launch_server --model-path /srv/m --tp-size 2\n")
    recipe, problems = recipe_adopt.managed_recipe("x.service", parsed, sections)
    assert recipe is None and "cannot hold these words" in problems[0] and "sglang.launch_server" in problems[0]
    assert "zz9PlanTed" not in str(problems)


def test_a_managed_recipes_engine_address_binds_port_or_engine_default():
    from serving_rollout.recipe import managed_base_url
    base = {"unit": "e.service", "engine": "vllm", "runtime": {"kind": "process"}, "model": "m"}
    assert managed_base_url(base) == "http://127.0.0.1:8000"  # vLLM's default port
    assert managed_base_url(dict(base, engine="sglang", host="0.0.0.0", port=30051)) == "http://127.0.0.1:30051"
    assert managed_base_url(dict(base, host="10.0.0.5", port=9000)) == "http://10.0.0.5:9000"
    assert managed_base_url(dict(base, host="::", engine_args={"--port": "8001"})) == "http://127.0.0.1:8001"
    assert managed_base_url(dict(base, host="fd00::5", port=8001)) == "http://[fd00::5]:8001"
    # a port held in the recipe's own environment resolves; one in an EnvironmentFile cannot be known here
    assert managed_base_url(dict(base, port="${PORT}", environment={"PORT": "8100"})) == "http://127.0.0.1:8100"
    assert managed_base_url(dict(base, port="${PORT}", environment_files=["/etc/vllm/vllm.env"])) == ""
