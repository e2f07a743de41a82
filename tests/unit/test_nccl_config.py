"""nccl_config: every source of NCCL settings, its precedence, and the candidate refusals."""

import subprocess
import sys

import pytest

from serving_rollout.module_utils import nccl_config
from serving_rollout.module_utils.unit_recipe import parse_recipe, parse_unit_text

# The handoff persisted its tuning in the interpreter's sitecustomize.py, like this.
HANDOFF_SITECUSTOMIZE = '''
import os
os.environ["NCCL_PROTO"] = "LL"
os.environ["NCCL_ALGO"] = "Ring"
os.environ.update({"NCCL_P2P_LEVEL": "SYS", "NCCL_MAX_NCHANNELS": "16"})
os.environ.setdefault("NCCL_BUFFSIZE", "16777216")
os.putenv("NCCL_NTHREADS", "512")
os.environ["HF_TOKEN"] = "hf_never_read_by_us"
os.environ["NCCL_SOCKET_IFNAME"] = os.getenv("IFACE", "eth0")
'''


def test_hook_assignments_find_every_shape_and_only_nccl_names():
    found = nccl_config.hook_assignments(HANDOFF_SITECUSTOMIZE)
    assert sorted(found) == sorted([
        ("NCCL_PROTO", "LL", "set"), ("NCCL_ALGO", "Ring", "set"), ("NCCL_P2P_LEVEL", "SYS", "set"),
        ("NCCL_MAX_NCHANNELS", "16", "set"), ("NCCL_BUFFSIZE", "16777216", "default"),
        ("NCCL_NTHREADS", "512", "set"), ("NCCL_SOCKET_IFNAME", nccl_config.COMPUTED, "set")])
    assert nccl_config.hook_assignments("this is not python (") == []


def test_pth_files_count_only_their_import_lines():
    pth = "/opt/extra/lib\nimport os; os.environ['NCCL_P2P_DISABLE'] = '1'\n# os.environ['NCCL_X'] = '2'\n"
    sources = nccl_config.hook_sources({"/usr/lib/python3/dist-packages/tune.pth": pth,
                                        "/usr/lib/python3.12/sitecustomize.py": HANDOFF_SITECUSTOMIZE})
    assert [(s["source"], s["path"]) for s in sources] == [
        ("python-hook", "/usr/lib/python3.12/sitecustomize.py"),
        ("python-default", "/usr/lib/python3.12/sitecustomize.py"),
        ("python-hook", "/usr/lib/python3/dist-packages/tune.pth")]
    assert sources[2]["values"] == {"NCCL_P2P_DISABLE": "1"}


def test_nccl_conf_and_environ_keep_only_nccl_variables():
    conf = "# system defaults\nNCCL_DEBUG=WARN\n NCCL_P2P_LEVEL = PXB \nOPENAI_KEY=sk-x\nnot a line\n"
    assert nccl_config.parse_nccl_conf(conf) == {"NCCL_DEBUG": "WARN", "NCCL_P2P_LEVEL": "PXB"}
    blob = b"PATH=/usr/bin\0NCCL_P2P_DISABLE=1\0AWS_SECRET_ACCESS_KEY=abc\0NCCL_CUMEM_ENABLE=0\0"
    assert nccl_config.parse_environ_blob(blob) == {"NCCL_P2P_DISABLE": "1", "NCCL_CUMEM_ENABLE": "0"}


def sources(**kinds):
    return [{"source": kind.replace("_", "-"), "path": f"/{kind}", "values": values}
            for kind, values in kinds.items()]


def test_precedence_hook_over_environment_over_conf_files():
    config = nccl_config.effective(sources(
        nccl_conf_system={"NCCL_P2P_DISABLE": "1", "NCCL_DEBUG": "WARN"},
        nccl_conf_user={"NCCL_DEBUG": "INFO"},
        process_env={"NCCL_P2P_DISABLE": "0"},
        python_default={"NCCL_P2P_DISABLE": "1", "NCCL_BUFFSIZE": "4194304"},
        python_hook={"NCCL_ALGO": "Ring"}))
    assert config["NCCL_P2P_DISABLE"]["source"] == "process-env"
    assert [o["source"] for o in config["NCCL_P2P_DISABLE"]["overrides"]] == ["python-default", "nccl-conf-system"]
    assert config["NCCL_DEBUG"]["value"] == "INFO"  # ~/.nccl.conf over /etc/nccl.conf
    assert config["NCCL_BUFFSIZE"]["source"] == "python-default"  # nothing above sets it
    with pytest.raises(ValueError, match="unknown NCCL configuration source"):
        nccl_config.effective([{"source": "guess", "values": {}}])


def test_candidate_overridden_by_a_start_up_hook_is_refused_naming_it():
    problem = nccl_config.change_problem(
        sources(process_env={"NCCL_P2P_DISABLE": "1"}, python_hook={"NCCL_P2P_DISABLE": "1"}),
        "NCCL_P2P_DISABLE", "0")
    assert "set by a Python start-up hook" in problem and "/python_hook: NCCL_P2P_DISABLE=1" in problem


@pytest.mark.parametrize("given, name, value, decided", [
    # nothing disables P2P: the p2p candidate is a no-op
    ({}, "NCCL_P2P_DISABLE", "0", "'0' before (from NCCL's default), '0' after (from process-env candidate unit)"),
    # dropping it from the unit lets /etc/nccl.conf decide the same value
    ({"process_env": {"NCCL_P2P_DISABLE": "1"}, "nccl_conf_system": {"NCCL_P2P_DISABLE": "1"}},
     "NCCL_P2P_DISABLE", None,
     "'1' before (from process-env /process_env), '1' after (from nccl-conf-system /nccl_conf_system)"),
    ({"process_env": {"NCCL_ALGO": "Ring"}}, "NCCL_ALGO", "Ring", "'Ring' before (from process-env /process_env)"),
])
def test_candidate_that_does_not_change_the_effective_value_is_refused(given, name, value, decided):
    problem = nccl_config.change_problem(sources(**given), name, value)
    assert problem.startswith(f"the candidate does not change the effective {name}")
    assert decided in problem


def test_real_changes_pass():
    assert nccl_config.change_problem(sources(process_env={"NCCL_P2P_DISABLE": "1"}), "NCCL_P2P_DISABLE", "0") is None
    assert nccl_config.change_problem(sources(process_env={"NCCL_P2P_DISABLE": "1"}), "NCCL_P2P_DISABLE", None) is None
    assert nccl_config.change_problem(sources(), "CUDA_DEVICE_MAX_CONNECTIONS", "1") is None


def test_serving_interpreter_from_argv_or_shebang(tmp_path):
    script = tmp_path / "vllm"
    script.write_text("#!/opt/venv/bin/python3.12\nfrom vllm.entrypoints.cli.main import main\n")
    env_script = tmp_path / "sglang"
    env_script.write_text("#!/usr/bin/env python3\n")
    wrapper = tmp_path / "serve.sh"
    wrapper.write_text("#!/bin/bash\nexec docker run ...\n")

    def read(path):
        try:
            return open(path).read()
        except OSError:
            return None
    assert nccl_config.serving_interpreter(["/usr/bin/python3", "-m", "sglang.launch_server"], read) == \
        "/usr/bin/python3"
    assert nccl_config.serving_interpreter([str(script), "serve"], read) == "/opt/venv/bin/python3.12"
    assert nccl_config.serving_interpreter([str(env_script)], read) == "python3"
    assert nccl_config.serving_interpreter([str(wrapper)], read) is None


def test_hook_probe_runs_without_running_the_hooks(tmp_path):
    # A real interpreter with a sitecustomize on its path: the probe lists it, and -S keeps it from running.
    (tmp_path / "sitecustomize.py").write_text("import os\nos.environ['NCCL_P2P_DISABLE'] = '1'\nraise SystemExit(3)\n")
    (tmp_path / "extra").mkdir()
    (tmp_path / "extra" / "sitecustomize.py").write_text("import os\nos.environ['NCCL_ALGO'] = 'Tree'\n")
    (tmp_path / "extra" / "tune.pth").write_text("import os; os.environ.setdefault('NCCL_PROTO', 'LL')\n")
    # PYTHONPATH puts tmp_path first on the path, as a site directory earlier than the system's would be.
    out = subprocess.run([sys.executable, "-S", "-c", nccl_config.HOOK_PROBE, str(tmp_path / "extra")],
                         capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}).stdout
    import json
    files = json.loads(out)["files"]
    assert str(tmp_path / "sitecustomize.py") in files
    # Only the first sitecustomize on the path is imported; every .pth file is read.
    assert str(tmp_path / "extra" / "sitecustomize.py") not in files
    assert [(s["source"], s["values"]) for s in nccl_config.hook_sources(files)] == [
        ("python-default", {"NCCL_PROTO": "LL"}), ("python-hook", {"NCCL_P2P_DISABLE": "1"})]


def test_running_environment_names_workers_that_differ():
    environ = {"/proc/10/environ": b"NCCL_P2P_DISABLE=1\0HOME=/root\0",
               "/proc/11/environ": b"NCCL_P2P_DISABLE=1\0",
               "/proc/12/environ": b"NCCL_P2P_DISABLE=1\0NCCL_CUMEM_ENABLE=0\0"}
    tree = {10: [11], 11: [12], 12: []}
    running = nccl_config.running_environment(10, lambda p: environ.get(p, b""), lambda pid: tree[pid])
    assert running == {"main_pid": 10, "main": {"NCCL_P2P_DISABLE": "1"},
                       "workers_differing": {"12": {"NCCL_P2P_DISABLE": "1", "NCCL_CUMEM_ENABLE": "0"}}}
    doc = nccl_config.summary(sources(process_env={"NCCL_P2P_DISABLE": "0"}), running)
    assert doc["drift"] == [{"name": "NCCL_P2P_DISABLE", "declared": "0", "running": "1"}]
    assert nccl_config.running_environment("0", None, None) is None


def test_read_sources_for_a_container_unit_image_env_below_env_file_below_dash_e():
    image = "lmsysorg/sglang@sha256:" + "b" * 64
    unit = (f"[Service]\nExecStart=/usr/bin/docker run --rm --name sg --env-file /etc/nccl.env "
            f"-e NCCL_P2P_DISABLE=1 {image} python3 -m sglang.launch_server --tp-size 2\n")
    recipe = parse_recipe(parse_unit_text(unit), {"/etc/nccl.env": "NCCL_ALGO=Ring\nNCCL_P2P_DISABLE=0\n"})
    calls = []

    def run(argv):
        calls.append(argv)
        return 0, '["PATH=/usr/bin", "NCCL_CUMEM_ENABLE=0", "NCCL_P2P_DISABLE=0", "HF_TOKEN=hf_x"]', ""
    sources, notes = nccl_config.read_sources(recipe, None, lambda path: None, run)
    assert calls == [["docker", "image", "inspect", "--format", "{{json .Config.Env}}", recipe["image"]]]
    config = nccl_config.effective(sources)
    assert config["NCCL_P2P_DISABLE"]["source"] == "process-env"  # -e wins over the image's ENV
    assert config["NCCL_P2P_DISABLE"]["overrides"] == [{"source": "image-env", "path": f"image {recipe['image']}",
                                                         "value": "0"}]
    assert config["NCCL_ALGO"]["value"] == "Ring" and config["NCCL_CUMEM_ENABLE"]["source"] == "image-env"
    assert "HF_TOKEN" not in config  # only NCCL_* is ever kept
    assert "host /etc/nccl.conf and ~/.nccl.conf are not visible inside the container" in notes


def test_nccl_conf_file_replaces_the_users_nccl_conf():
    files = {"/opt/tuning/nccl.conf": "NCCL_PROTO=LL\n", "/home/svc/.nccl.conf": "NCCL_PROTO=Simple\n",
             "/etc/nccl.conf": "NCCL_PROTO=LL128\nNCCL_DEBUG=WARN\n"}
    recipe = {"runtime": "process", "env": {"NCCL_CONF_FILE": "/opt/tuning/nccl.conf"}, "argv": ["/bin/true"],
              "engine_command": ["/bin/true"]}
    sources, _ = nccl_config.read_sources(recipe, "/home/svc", files.get, lambda argv: (1, "", "no"))
    config = nccl_config.effective(sources)
    assert config["NCCL_PROTO"]["path"] == "/opt/tuning/nccl.conf"  # ~/.nccl.conf is not read at all
    assert [o["path"] for o in config["NCCL_PROTO"]["overrides"]] == ["/etc/nccl.conf"]
    assert config["NCCL_DEBUG"]["source"] == "nccl-conf-system"
