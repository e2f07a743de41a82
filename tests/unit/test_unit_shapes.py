"""A corpus of serving-unit shapes, as operators write them (learned from public vLLM/SGLang
units; written here, not copied), each adopted with its facts or refused with its true reason."""

import pytest

from serving_rollout.module_utils import unit_recipe, unit_shapes

PY = "/usr/bin/python3"
ENV_QWEN = "MODEL=Qwen/Qwen3-32B\nTENSOR_PARALLEL_SIZE=4\nNCCL_P2P_DISABLE=1\nSGLANG_OPTS=--context-length 32768\n"
IMAGE = "lmsysorg/sglang@sha256:" + "a" * 64
FILES = {
    "/etc/sglang/qwen.env": ENV_QWEN,
    "/etc/vllm/llama.yaml": "model: meta-llama/Llama-3.1-70B-Instruct\ntensor-parallel-size: 8\nmax-model-len: 65536\n",
    "/etc/vllm/multi.yaml": "model: x/big\ntensor_parallel_size: 8\nnnodes: 2\n",
    "/opt/serve/launch.sh": "#!/bin/bash\nexec docker run --gpus all lmsysorg/sglang python3 -m sglang.launch_server\n",
    "/opt/venv/bin/vllm": "#!/opt/venv/bin/python3\nfrom vllm.entrypoints.cli.main import main\n",
    "/opt/venv/bin/sglang": "#!/opt/venv/bin/python3.12\n",
    "/home/svc/models/env": "NCCL_P2P_DISABLE=0\n",
    "/root/models/env": "NCCL_P2P_DISABLE=1\n",
    "/etc/nccl-shared.env": "NCCL_P2P_DISABLE=1\nNCCL_CUMEM_ENABLE=0\n",
    "/etc/sglang/mistral.env": "MODEL=mistralai/Mistral-Large\nTENSOR_PARALLEL_SIZE=8\n",
}
SGLANG = f"{PY} -m sglang.launch_server --model-path Qwen/Qwen3-32B --tp-size 2 --port 30000"

CASES = [
    # (id, unit name, unit text, expected facts or refusal fragment)
    ("plain process", "sglang.service", f"[Service]\nEnvironment=NCCL_P2P_DISABLE=1\nExecStart={SGLANG}\n",
     {"runtime": "process", "tp_size": "2", "model": "Qwen/Qwen3-32B"}),
    ("continuation lines", "sglang.service", f"[Service]\nExecStart={PY} -m sglang.launch_server \\\n"
     "  --model-path Qwen/Qwen3-32B \\\n  --tp-size 4\n", {"tp_size": "4"}),
    ("controls in an EnvironmentFile, ${VAR} args", "sglang.service",
     "[Service]\nEnvironmentFile=/etc/sglang/qwen.env\nExecStart=/usr/bin/python3 -m sglang.launch_server "
     "--model-path ${MODEL} --tp-size ${TENSOR_PARALLEL_SIZE} $SGLANG_OPTS\n",
     {"model": "Qwen/Qwen3-32B", "tp_size": "4", "context_length": "32768"}),
    ("template instance %i in EnvironmentFile", "sglang@qwen.service",
     "[Service]\nEnvironmentFile=/etc/sglang/%i.env\nExecStart=/usr/bin/python3 -m sglang.launch_server "
     "--model-path ${MODEL} --tp-size ${TENSOR_PARALLEL_SIZE}\n",
     {"model": "Qwen/Qwen3-32B", "tp_size": "4", "shape.template": True, "shape.instance": "qwen"}),
    ("vllm template with --config %i.yaml", "vllm@llama.service",
     "[Service]\nExecStart=/opt/venv/bin/vllm serve --config /etc/vllm/%i.yaml --port 8000\n",
     {"engine": "vllm", "tp_size": "8", "model": "meta-llama/Llama-3.1-70B-Instruct", "context_length": "65536"}),
    ("vllm positional model", "vllm.service",
     "[Service]\nExecStart=/opt/venv/bin/vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 2\n",
     {"engine": "vllm", "model": "meta-llama/Llama-3.1-8B-Instruct", "tp_size": "2"}),
    # systemd 252 in the lab: %h and %u of a system unit are the service manager's (/root, root), not User='s.
    ("%h and %u are the manager's, not User='s", "sglang.service",
     "[Service]\nUser=svc\nEnvironmentFile=%h/models/env\nExecStart=" + SGLANG + " --download-dir %h/models\n",
     {"env_file_env.NCCL_P2P_DISABLE": "1", "env_files": ["/root/models/env"]}),
    ("%n and %p", "sglang.service", f"[Service]\nSyslogIdentifier=%p\nExecStart={SGLANG} --served-model-name %N\n",
     {"engine_args.--served-model-name": "sglang"}),
    ("docker run pinned by digest", "sglang-docker.service",
     f"[Service]\nExecStartPre=-/usr/bin/docker rm -f sglang\nExecStart=/usr/bin/docker run --rm --name sglang "
     f"--gpus all -e NCCL_P2P_DISABLE=1 {IMAGE} python3 -m sglang.launch_server --model-path m --tp-size 8\n"
     "ExecStop=/usr/bin/docker stop sglang\n", {"runtime": "docker", "container_name": "sglang", "tp_size": "8"}),
    ("podman with --env-file", "sglang-podman.service",
     f"[Service]\nExecStart=/usr/bin/podman run --rm --name s --env-file /etc/nccl-shared.env {IMAGE} "
     "python3 -m sglang.launch_server --model-path m --tp 2\n", {"runtime": "podman", "tp_size": "2"}),
    ("shared NCCL EnvironmentFile", "sglang.service",
     f"[Service]\nEnvironmentFile=/etc/nccl-shared.env\nExecStart={SGLANG}\n",
     {"env.NCCL_CUMEM_ENABLE": "0"}),
    ("optional missing EnvironmentFile", "sglang.service",
     f"[Service]\nEnvironmentFile=-/etc/sglang/absent.env\nExecStart={SGLANG}\n", {"tp_size": "2"}),
    ("console script with shebang", "sglang.service",
     "[Service]\nExecStart=/opt/venv/bin/sglang serve --model-path m --tp-size 4\n", {"tp_size": "4"}),
    ("single-node --nnodes 1", "sglang.service", f"[Service]\nExecStart={SGLANG} --nnodes 1\n", {"tp_size": "2"}),
    # refusals, each with its true reason
    ("wrapper script", "sglang.service", "[Service]\nExecStart=/opt/serve/launch.sh\n",
     "runs a wrapper script (/opt/serve/launch.sh)"),
    ("bash -c wrapper", "sglang.service", "[Service]\nExecStart=/bin/bash /opt/serve/launch.sh\n",
     "runs a wrapper script (/opt/serve/launch.sh)"),
    ("Jinja template", "sglang.service", "[Service]\nExecStart={{ sglang_bin }} --port {{ vllm_port }}\n",
     "is a Jinja template, not a unit"),
    ("Jinja comment", "sglang.service", "{# managed #}\n[Service]\nExecStart=/bin/true\n",
     "is a Jinja template, not a unit"),
    ("multi-node sglang", "sglang.service", f"[Service]\nExecStart={SGLANG} --nnodes 2 --node-rank 0\n",
     "runs a multi-node engine (--nnodes 2)"),
    ("multi-node vllm config", "vllm@multi.service",
     "[Service]\nExecStart=/opt/venv/bin/vllm serve --config /etc/vllm/%i.yaml\n",
     "runs a multi-node engine (--nnodes 2 (in /etc/vllm/multi.yaml))"),
    ("%i in a plain unit", "sglang.service", "[Service]\nEnvironmentFile=/etc/sglang/%i.env\nExecStart=/bin/true\n",
     "specifier %i in EnvironmentFile= has no value here"),
    ("unknown specifier", "sglang.service", f"[Service]\nExecStart={SGLANG} --x %Z\n",
     "specifier %Z in ExecStart= is not supported"),
    ("missing EnvironmentFile", "sglang.service",
     f"[Service]\nEnvironmentFile=/etc/sglang/gone.env\nExecStart={SGLANG}\n",
     "EnvironmentFile /etc/sglang/gone.env (from sglang.service) cannot be read"),
]


def adopt(unit_name, text, path=None):
    files = {**FILES, path or f"/etc/systemd/system/{unit_name}": text}
    return unit_shapes.adopt(unit_name, path or f"/etc/systemd/system/{unit_name}", files.get)


def fact(recipe, dotted):
    value = recipe
    for part in dotted.split(".", 1) if not dotted.startswith("engine_args.") else ["engine_args", dotted[12:]]:
        value = value[part]
    return value


@pytest.mark.parametrize("case, unit_name, text, expected", CASES, ids=[c[0] for c in CASES])
def test_unit_shape(case, unit_name, text, expected):
    if isinstance(expected, str):
        with pytest.raises(unit_shapes.ShapeError) as error:
            adopt(unit_name, text)
        assert expected in str(error.value)
        return
    recipe = adopt(unit_name, text)
    for dotted, value in expected.items():
        assert fact(recipe, dotted) == value, (dotted, fact(recipe, dotted))


def test_corpus_has_at_least_twenty_shapes():
    assert len(CASES) >= 20


@pytest.mark.parametrize("path, text, reason", [
    ("/etc/containers/systemd/sglang.container", "[Container]\nImage=x\n", "is a Podman Quadlet file"),
    ("/home/svc/.config/systemd/user/sglang.service", "[Service]\nExecStart=/bin/true\n", "is a user unit"),
])
def test_quadlet_and_user_units_are_refused_by_name(path, text, reason):
    with pytest.raises(unit_shapes.ShapeError, match=reason):
        adopt("sglang.service", text, path=path)


def test_var_expansion_follows_systemd_word_rules():
    env = {"OPTS": "--tp-size 4  --port 1", "M": "a b"}
    assert unit_shapes.expand_vars(["x", "$OPTS", "--model=${M}", "pre$M", "$UNSET"], env) == \
        ["x", "--tp-size", "4", "--port", "1", "--model=a b", "prea b"]


def test_container_renamed_in_every_line_that_names_it():
    assert unit_shapes.rename_container(["/usr/bin/docker", "rm", "-f", "sglang"], "sglang", "sglang-candidate") == \
        ["/usr/bin/docker", "rm", "-f", "sglang-candidate"]
    assert unit_shapes.rename_container(["docker", "stop", "-t", "30", "sglang"], "sglang", "sglang-candidate")[-1] \
        == "sglang-candidate"
    assert unit_shapes.rename_container(["podman", "run", "--cidfile=/run/sglang.cid", "--name", "sglang", "img"],
                                        "sglang", "sglang-c") == ["podman", "run", "--cidfile=/run/sglang-c.cid",
                                                                  "--name", "sglang-c", "img"]


def test_container_candidate_manages_only_its_own_container():
    from serving_rollout.module_utils import unit_recipe
    docker = next(c for c in CASES if c[0] == "docker run pinned by digest")
    recipe = adopt(docker[1], docker[2])
    sections = unit_recipe.apply_change(recipe["sections"], recipe,
                                        {"kind": "env", "name": "NCCL_P2P_DISABLE", "value": "0"})
    service = dict((k, v) for name, items in sections if name == "Service" for k, v in items)
    assert service["ExecStartPre"] == "-/usr/bin/docker rm -f sglang-candidate"
    assert service["ExecStop"] == "/usr/bin/docker stop sglang-candidate"
    assert "--name sglang-candidate" in service["ExecStart"] and "NCCL_P2P_DISABLE=0" in service["ExecStart"]


def test_template_candidate_keeps_every_specifier_value_as_text():
    from serving_rollout.module_utils import unit_recipe
    case = next(c for c in CASES if c[0] == "template instance %i in EnvironmentFile")
    unit_text = case[2].replace("ExecStart=", "Environment=NCCL_P2P_DISABLE=1\nExecStart=")
    # qwen.env sets NCCL_P2P_DISABLE itself, and an EnvironmentFile overrides Environment=: refused, why named.
    qwen = adopt(case[1], unit_text)
    with pytest.raises(unit_recipe.RecipeError, match="overrides Environment= \\(where it is also set\\)"):
        unit_recipe.apply_change(qwen["sections"], qwen, {"kind": "env", "name": "NCCL_P2P_DISABLE", "value": "0"})
    recipe = adopt("sglang@mistral.service", unit_text)
    text = unit_recipe.render_sections(unit_recipe.apply_change(
        recipe["sections"], recipe, {"kind": "env", "name": "NCCL_P2P_DISABLE", "value": "0"}))
    # Started as sglang@qwen-candidate.service, a %i would read qwen-candidate's files: none is left.
    assert "%" not in text and "EnvironmentFile=/etc/sglang/mistral.env" in text
    name = "sglang@mistral-candidate.service"
    again = unit_shapes.adopt(name, f"/etc/systemd/system/{name}", {**FILES, f"/etc/systemd/system/{name}": text}.get)
    assert again["model"] == recipe["model"] == "mistralai/Mistral-Large" and again["tp_size"] == "8"
    assert unit_recipe.check_one_control(recipe, again)["control"] == "env:NCCL_P2P_DISABLE"


def test_env_file_lines_set_or_removed_the_rest_byte_for_byte():
    from serving_rollout.module_utils import unit_recipe
    text = "# tuned\nNCCL_P2P_DISABLE=1\nexport NCCL_ALGO='Ring'\nNCCL_P2P_DISABLE=1\n"
    assert unit_recipe.set_in_env_file(text, "NCCL_P2P_DISABLE", "0") == \
        "# tuned\nNCCL_P2P_DISABLE=1\nexport NCCL_ALGO='Ring'\nNCCL_P2P_DISABLE=0\n"  # the last one decides
    assert unit_recipe.set_in_env_file(text, "NCCL_ALGO", None) == "# tuned\nNCCL_P2P_DISABLE=1\nNCCL_P2P_DISABLE=1\n"
    assert unit_recipe.set_in_env_file("A=1", "B", "2") == "A=1\nB=2\n"


def test_a_control_in_an_environment_file_changes_in_the_candidates_own_copy():
    from serving_rollout.module_utils import unit_recipe
    unit = ("[Service]\nEnvironmentFile=/etc/nccl-shared.env\nEnvironmentFile=-/etc/sglang/absent.env\n"
            f"ExecStart={SGLANG}\n")
    recipe = adopt("sglang.service", unit)
    change = {"kind": "env", "name": "NCCL_P2P_DISABLE", "value": "0"}
    with pytest.raises(unit_recipe.RecipeError, match="own copy of that file"):
        unit_recipe.apply_change(recipe["sections"], recipe, change)
    sections, copies = unit_recipe.apply_change_with_files(recipe["sections"], recipe, change,
                                                           recipe["env_file_texts"], "/var/lib/sr/c")
    assert copies == {"/var/lib/sr/c/etc_nccl-shared.env": ("/etc/nccl-shared.env",
                                                            "NCCL_P2P_DISABLE=0\nNCCL_CUMEM_ENABLE=0\n")}
    text = unit_recipe.render_sections(sections)
    copy = "/var/lib/sr/c/etc_nccl-shared.env"
    assert f"EnvironmentFile={copy}" in text and "EnvironmentFile=-/etc/sglang/absent.env" in text
    candidate = unit_recipe.parse_recipe(unit_recipe.parse_unit_text(text), {copy: copies[copy][1]})
    assert unit_recipe.check_one_control(recipe, candidate) == {"control": "env:NCCL_P2P_DISABLE", "before": "1",
                                                                "after": "0"}


PODMAN_ENV_FILE = (f"[Service]\nEnvironmentFile=/etc/sglang/mistral.env\nExecStartPre=-/usr/bin/podman rm -f s\n"
                   f"ExecStart=/usr/bin/podman run --rm --name s --env-file /etc/nccl-shared.env -e MODEL {IMAGE} "
                   "python3 -m sglang.launch_server --model-path m --tp 2\nExecStop=/usr/bin/podman stop -t 30 s\n")


def test_a_container_reads_its_env_files_below_dash_e():
    recipe = adopt("sglang-podman.service", PODMAN_ENV_FILE)
    assert recipe["env"] == {"NCCL_P2P_DISABLE": "1", "NCCL_CUMEM_ENABLE": "0", "MODEL": "mistralai/Mistral-Large"}
    assert recipe["container_env_file_env"] == {"NCCL_P2P_DISABLE": "1", "NCCL_CUMEM_ENABLE": "0"}
    assert set(recipe["env_file_texts"]) == {"/etc/sglang/mistral.env", "/etc/nccl-shared.env"}
    inline = adopt("s.service", PODMAN_ENV_FILE.replace("-e MODEL", "-e NCCL_P2P_DISABLE=0"))
    assert inline["env"]["NCCL_P2P_DISABLE"] == "0"  # -e overrides --env-file, whatever the order


def test_a_control_in_a_containers_env_file_changes_in_the_candidates_own_copy():
    from serving_rollout.module_utils import unit_recipe
    recipe = adopt("sglang-podman.service", PODMAN_ENV_FILE)
    change = {"kind": "env", "name": "NCCL_P2P_DISABLE", "value": "0"}
    sections, copies = unit_recipe.apply_change_with_files(recipe["sections"], recipe, change,
                                                           recipe["env_file_texts"], "/var/lib/sr/c")
    copy = "/var/lib/sr/c/etc_nccl-shared.env"
    assert copies == {copy: ("/etc/nccl-shared.env", "NCCL_P2P_DISABLE=0\nNCCL_CUMEM_ENABLE=0\n")}
    service = dict((k, v) for name, items in sections if name == "Service" for k, v in items)
    assert f"--env-file {copy}" in service["ExecStart"] and "/etc/nccl-shared.env" not in service["ExecStart"]
    assert "-e MODEL" in service["ExecStart"] and "NCCL_P2P_DISABLE" not in service["ExecStart"]
    assert service["ExecStop"].endswith("stop -t 30 s-candidate") and service["ExecStartPre"].endswith("s-candidate")
    candidate = unit_recipe.parse_recipe(sections, {**recipe["env_file_texts"], copy: copies[copy][1]})
    assert unit_recipe.check_one_control(recipe, candidate) == {"control": "env:NCCL_P2P_DISABLE", "before": "1",
                                                                "after": "0"}


def test_a_dash_e_control_changes_in_the_unit_even_when_an_env_file_also_sets_it():
    from serving_rollout.module_utils import unit_recipe
    recipe = adopt("s.service", PODMAN_ENV_FILE.replace("-e MODEL", "-e NCCL_P2P_DISABLE=1"))
    sections, copies = unit_recipe.apply_change_with_files(
        recipe["sections"], recipe, {"kind": "env", "name": "NCCL_P2P_DISABLE", "value": "0"},
        recipe["env_file_texts"], "/var/lib/sr/c")
    assert copies == {}
    exec_start = dict(next(items for name, items in sections if name == "Service"))["ExecStart"]
    assert "-e NCCL_P2P_DISABLE=0" in exec_start and "--env-file /etc/nccl-shared.env" in exec_start


def test_an_unreadable_env_file_of_a_container_is_refused_by_name():
    with pytest.raises(unit_shapes.ShapeError, match="--env-file /etc/absent.env .* cannot be read"):
        adopt("s.service", PODMAN_ENV_FILE.replace("/etc/nccl-shared.env", "/etc/absent.env"))


def render(recipe, change):
    """The candidate as serving_recipe renders it from the adopted (specifier-expanded) sections, and that text
    read back as systemd loads it."""
    text = unit_recipe.render_sections(unit_recipe.apply_change(recipe["sections"], recipe, change))
    return text, unit_recipe.parse_recipe(unit_recipe.parse_rendered(text))


def test_a_literal_percent_is_written_back_escaped_so_systemd_reads_the_same_words():
    """Issue 49: `%%` in an Exec line was expanded at adoption and written back as `%`, which systemd then reads
    as a specifier (`%2` refused, `%n` the unit's name). The candidate keeps `%%`; a template's %i is written as
    its instance's value (the candidate is not a template)."""
    unit = ("[Service]\nEnvironment=NCCL_P2P_DISABLE=1\n"
            "ExecStart=/usr/bin/python3 -m sglang.launch_server --model-path /srv/models/%i --tp-size 2 "
            "--served-model-name qwen-100%%-%%n --port 30000\n")
    recipe = adopt("sglang@qwen.service", unit, "/etc/systemd/system/sglang@.service")
    assert recipe["engine_args"]["--served-model-name"] == "qwen-100%-%n"
    text, candidate = render(recipe, {"kind": "env", "name": "NCCL_P2P_DISABLE", "value": "0"})
    assert "--model-path /srv/models/qwen " in text and "--served-model-name qwen-100%%-%%n " in text, text
    assert candidate["engine_args"]["--served-model-name"] == "qwen-100%-%n"
    difference = unit_recipe.check_one_control(recipe, candidate, {"kind": "env", "name": "NCCL_P2P_DISABLE"})
    assert difference == {"control": "env:NCCL_P2P_DISABLE", "before": "1", "after": "0"}


@pytest.mark.parametrize("flag, value, before, after", [
    ("--chunked-prefill-size", 8192, "--chunked-prefill-size 4096 --port", "--chunked-prefill-size 8192 --port"),
    ("--max-running-requests", 64, "--max-running-requests=128 --port", "--max-running-requests=64 --port"),
    ("--disable-custom-all-reduce", None, "--disable-custom-all-reduce --port", "--port"),
])
def test_a_changed_flag_keeps_its_place_in_the_command_line(flag, value, before, after):
    """Issue 49: the renderer moved a changed flag to the end of the command line, a second difference systemd's
    reading (the argv) then refused. The flag changes where it stands, in the form the original wrote it."""
    unit = ("[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --model-path /srv/m --tp-size 2 "
            f"{before} 30000 --host 0.0.0.0\n")
    recipe = adopt("sglang.service", unit)
    text, candidate = render(recipe, {"kind": "arg", "name": flag, "value": value})
    assert f"--tp-size 2 {after} 30000 --host 0.0.0.0\n" in text, text
    assert unit_recipe.check_one_control(recipe, candidate, {"kind": "arg", "name": flag})["control"] == f"arg:{flag}"
