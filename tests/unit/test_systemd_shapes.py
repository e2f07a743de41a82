"""Units whose text and systemd's reading part ways, and launchers, adopted against systemd's own
reading of each (recorded from real systemd 252 in the lab: tests/fixtures/systemd/
record_readings.py). Every expectation is what systemd does, not what a parser of the text says."""

import json

import pytest
import yaml
from conftest import FIXTURES

from serving_rollout import recipe as serving_recipe
from serving_rollout.module_utils import controls, nccl_config, recipe_adopt, unit_recipe, unit_shapes

SHAPES = yaml.safe_load((FIXTURES / "systemd" / "adoption-shapes.yml").read_text())
READINGS = json.loads((FIXTURES / "systemd" / "adoption-readings.json").read_text())["readings"]


def adopt(shape):
    path = f"/etc/systemd/system/{shape['unit']}"
    files = {**(shape.get("files") or {}), path: shape["text"]}
    return unit_shapes.adopt(shape["unit"], path, files.get, systemd=READINGS[shape["id"]])


def fact(recipe, dotted):
    head, _, rest = dotted.partition(".")
    value = recipe.get(head)
    return value.get(rest) if rest else value


@pytest.mark.parametrize("shape", SHAPES, ids=[s["id"] for s in SHAPES])
def test_adopted_as_systemd_reads_it_or_refused_with_the_true_reason(shape):
    assert shape["id"] in READINGS, "record systemd's reading: tests/fixtures/systemd/record_readings.py"
    if "refuse" in shape:
        with pytest.raises(unit_shapes.ShapeError) as error:
            adopt(shape)
        assert shape["refuse"] in str(error.value)
        return
    recipe = adopt(shape)
    for dotted, value in shape["expect"].items():
        assert fact(recipe, dotted) == value, (dotted, fact(recipe, dotted))
    found = [f["what"] for f in recipe["systemd"]["findings"]]
    for fragment in shape["findings"]:
        assert any(fragment in what for what in found), (fragment, found)
    if not shape["findings"]:
        assert found == []


@pytest.mark.parametrize("shape", [s for s in SHAPES if "refuse_change" in s], ids=lambda s: s["id"])
def test_a_candidate_is_refused_with_the_reason_systemd_gives(shape):
    recipe = adopt(shape)
    problem = unit_shapes.candidate_refusal(shape["unit"], recipe, shape["change"])
    if problem is None:  # refused when the change is applied (a flag systemd brings in from a $VAR)
        with pytest.raises(unit_recipe.RecipeError) as error:
            unit_recipe.apply_change(recipe["sections"], recipe, shape["change"])
        problem = str(error.value)
    assert shape["refuse_change"] in problem


def test_secret_values_never_reach_the_findings():
    shape = next(s for s in SHAPES if s["id"] == "export lines and inline comments in an EnvironmentFile")
    reading = json.loads(json.dumps(READINGS[shape["id"]]))
    reading["env"]["HF_TOKEN"] = "hf_secret_9d1"
    reading["env"]["ZX_INTERNAL_BLOB"] = "blob-7f3e-unusual"  # no secret-looking word in its name
    text = shape["text"]
    recipe = unit_shapes.adopt(shape["unit"], "/x.service", {**shape["files"], "/x.service": text}.get,
                               systemd=reading)
    findings = recipe["systemd"]["findings"]
    assert any(f["what"] == "environment HF_TOKEN" for f in findings)
    assert "hf_secret_9d1" not in json.dumps(findings) and "blob-7f3e-unusual" not in json.dumps(findings)
    assert any(f["what"] == "environment ZX_INTERNAL_BLOB" for f in findings)
    # NCCL_* is on the allow-list: both readings are shown (systemd keeps the '#' and what follows)
    algo = next(f for f in findings if f["what"] == "environment NCCL_ALGO")
    assert algo["systemd"] == "Ring# tuned" and algo["file"] != algo["systemd"]


def test_accepted_systemd_reading_renders_the_candidate_from_what_systemd_runs():
    shape = next(s for s in SHAPES if s["id"] == "blank after a continuation backslash")
    recipe = adopt(shape)
    assert unit_shapes.candidate_refusal(shape["unit"], recipe, shape["change"], accept_systemd_reading=True) is None
    text = unit_recipe.render_sections(unit_recipe.apply_change(recipe["sections"], recipe, shape["change"]))
    exec_line = next(line for line in text.splitlines() if line.startswith("ExecStart="))
    # systemd's argv (its lone backslash word kept), plus the one flag; the lines it ignored stay out.
    assert unit_recipe.split_command(exec_line[10:])[1] == READINGS[shape["id"]]["exec_start"][0][1] + \
        ["--max-num-batched-tokens", "128"]
    assert "--tensor-parallel-size" not in text


def test_the_running_command_line_against_systemds_shows_no_secret():
    from serving_rollout.module_utils.unit_oracle import running_reading
    expected = ["/usr/bin/python3", "x.py", "--tp-size", "4", "--api-key", "k-new-51"]
    ran = ["/usr/bin/python3", "x.py", "--tp-size", "2", "--api-key", "k-old-17"]
    blob = b"\0".join(w.encode() for w in ran) + b"\0"
    seen = running_reading(blob, expected, unit_recipe.redact_argv)
    assert not seen["matches"] and seen["argv"][-1] == "<redacted>"
    assert {(e["side"], e["word"]) for e in seen["edits"]} >= {("before", "4"), ("after", "2")}
    assert "k-new-51" not in json.dumps(seen) and "k-old-17" not in json.dumps(seen)
    assert running_reading(b"\0".join(w.encode() for w in expected) + b"\0", expected)["matches"]


@pytest.mark.parametrize("shape", [s for s in SHAPES if "managed" in s], ids=lambda s: s["id"])
def test_adopt_to_managed_converts_a_shape_to_what_systemd_runs_or_names_why_not(shape):
    recipe = adopt(shape)
    sections = recipe.pop("sections")
    managed, problems = recipe_adopt.managed_recipe(shape["unit"], recipe, sections)
    if shape["managed"] != "converts":
        assert any(shape["managed"] in problem for problem in problems), problems
        return
    assert problems == [] and serving_recipe.recipe_errors(managed) == [], (problems, managed)
    # The render's ExecStart words are the words systemd read in the original (specifiers expanded, $VARs
    # as written). The lab proves it in systemd's own reading (tests/integration/test_unit_oracle_lab.py).
    text = serving_recipe.recipe_files(managed)[f"/etc/systemd/system/{shape['unit']}"]
    rendered = unit_recipe.parse_recipe(unit_recipe.parse_unit_text(text))["argv"]
    assert rendered == READINGS[shape["id"]]["exec_start"][0][1]


def test_no_recipe_is_made_from_a_unit_whose_words_systemd_reads_otherwise():
    refused = [s for s in SHAPES if "managed" in s and s["managed"].startswith("systemd does not read")]
    for shape in refused:
        recipe = adopt(shape)
        assert recipe_adopt.managed_recipe(shape["unit"], recipe, recipe.pop("sections"))[0] is None, shape["id"]
    assert len(refused) == 6


def test_a_failed_environment_probe_names_its_exit_code_and_what_it_said_secrets_redacted():
    from serving_rollout.module_utils.systemd_reading import ReadingError, probe

    def failing(stderr):
        return lambda argv: (1, "", stderr)

    with pytest.raises(ReadingError, match=r"failed with exit code 1: systemd says: nothing on stderr or in its "
                                           r"journal$"):
        probe(failing(""), "/usr/bin/python3", [], [], [])
    with pytest.raises(ReadingError) as raised:
        probe(failing("Failed to load environment files: HF_TOKEN=hf_abc123 rejected\n"), "/usr/bin/python3",
              [], [["/etc/x.env", False]], [])
    assert "exit code 1: systemd says: Failed to load environment files" in str(raised.value)
    assert "hf_abc123" not in str(raised.value), raised.value


def test_a_probe_that_fails_silently_is_explained_by_its_journal_and_an_empty_specifier_named():
    """systemd 252 writes why a transient unit did not start to its journal, not to systemd-run's stderr: the
    refusal reads it (the unit named by the probe), and a path a template's %i left empty is named first."""
    from serving_rollout.module_utils.systemd_reading import ReadingError, probe

    calls = []

    def run(argv):
        calls.append(argv)
        if argv[0] == "journalctl":
            return 0, "vllm-probe.service: Failed to load environment files: No such file or directory\n" \
                      "vllm-probe.service: Failed to run 'start' task: No such file or directory\n", ""
        return 1, "", ""

    with pytest.raises(ReadingError) as raised:
        probe(run, "/usr/bin/python3", [], [["/etc/vllm/.env", False]], [])
    text = str(raised.value)
    assert "EnvironmentFile /etc/vllm/.env has an empty part: a specifier (%i, the instance name) expanded" in text
    assert "systemd says: vllm-probe.service: Failed to load environment files: No such file or directory" in text
    unit = next(a for a in calls[0] if a.startswith("--unit="))[len("--unit="):]
    assert calls[1][:3] == ["journalctl", "-u", unit]


def test_a_p2p_candidate_over_an_export_line_systemd_ignores_is_a_no_op_refused_with_the_truth():
    """Issue 49: `export NCCL_P2P_DISABLE=1` in an EnvironmentFile - systemd 252 ignored it in the lab (the recorded
    reading has no NCCL_P2P_DISABLE) - was read as 1, and a p2p candidate was written as 1 -> 0 while the engine
    saw unset -> 0: the same P2P. Now the variable reads as systemd's unset, NCCL's own default decides that the
    candidate changes nothing (nccl_config, the one source of NCCL's defaults), and the refusal says why first."""
    shape = next(s for s in SHAPES if s["id"] == "export lines and inline comments in an EnvironmentFile")
    assert "NCCL_P2P_DISABLE" not in READINGS[shape["id"]]["env"]
    recipe = adopt(shape)
    assert "NCCL_P2P_DISABLE" not in recipe["env"]
    sources = [{"source": "process-env", "path": "unit", "values": nccl_config.nccl_only(recipe["env"])}]
    problem = nccl_config.change_problem(sources, "NCCL_P2P_DISABLE", "0")
    assert problem.startswith("the candidate does not change the effective NCCL_P2P_DISABLE: '0' before (from "
                              "NCCL's default), '0' after"), problem
    assert unit_shapes.ignored_note(recipe["env_file_texts"], "NCCL_P2P_DISABLE") == (
        "systemd ignores `export NCCL_P2P_DISABLE=1` in /etc/shapes/export.env (an EnvironmentFile is not a shell "
        "script); ")
    assert unit_shapes.ignored_note(recipe["env_file_texts"], "NCCL_ALGO") == ""


def test_docker_passes_an_env_files_quotes_so_the_value_is_not_the_one_it_looks_like():
    """Issue 49: docker's --env-file keeps quotes (docker/for-linux#1208): NCCL_P2P_DISABLE="1" reaches the
    container as "1" with its quotes, which NCCL does not read as 1. Read literally, and refused by name."""
    unit = ("[Service]\nExecStart=/usr/bin/docker run --rm --name sglang --gpus all --env-file /etc/sglang/docker.env "
            "lmsysorg/sglang@sha256:" + "a" * 64 + " python3 -m sglang.launch_server --model-path /m --tp-size 2\n")
    env = {"/etc/sglang/docker.env": 'NCCL_P2P_DISABLE="1"\nHF_TOKEN="hf_secret_0a1"\n'}
    recipe = unit_recipe.parse_recipe(unit_recipe.parse_unit_text(unit), env)
    assert recipe["env"]["NCCL_P2P_DISABLE"] == '"1"'
    refusal = unit_shapes.docker_quotes(recipe, controls.change_for("p2p", "sglang"))
    assert refusal.startswith('docker passes the quotes of NCCL_P2P_DISABLE="1"'), refusal
    assert unit_shapes.docker_quotes(recipe, {"kind": "env", "name": "HF_TOKEN", "value": "x"}).count("hf_secret") == 0
