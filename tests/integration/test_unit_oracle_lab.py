"""Every shape of tests/fixtures/systemd/adoption-shapes.yml on the lab host, adopted by the
serving_recipe module against real systemd (its busctl reading, load warnings and probe): facts
as systemd runs the unit, findings where its file reads otherwise, launchers refused with where
the control lives, candidates refused with systemd's reason - and one accepted candidate of a
malformed original written from systemd's reading and proven one control apart by unit_oracle."""

import json
import re
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml
from conftest import FIXTURES, LAB_HOST, run_playbook

LAB = LAB_HOST  # this test worker's lab host (conftest)
SHAPES = yaml.safe_load((FIXTURES / "systemd" / "adoption-shapes.yml").read_text())
ACCEPTED = next(s for s in SHAPES if s["id"] == "blank after a continuation backslash")
# bin/test's workers run this file on one of them: one run over every shape (module fixture) serves every test here.
pytestmark = pytest.mark.xdist_group("test_unit_oracle_lab")


def lab(script, stdin=None):
    return subprocess.run(["podman", "exec", "-i", LAB, "sh", "-c", script], capture_output=True, text=True,
                          input=stdin, check=True)


SECRET = "lab-secret-6f1d0c9e2b7a4e58"  # the lab original's API key (lab/provision)
RUNNING = ("[Service]\nEnvironmentFile=/etc/sglang/engine-double.env\nExecStart=/usr/bin/python3 "
           "/opt/engine-double/engine_double.py --model-path m --revision " + "a" * 40 +
           " --tp-size {tp} --context-length 8192 --host 127.0.0.1 --port 30045\n")


def original_state():
    """The lab's own serving unit: its files and its invocation (no shape's refusal may touch it)."""
    return (lab("sha256sum /etc/systemd/system/sglang.service /etc/sglang/sglang.env").stdout,
            lab("systemctl show -p InvocationID,ActiveState,NRestarts sglang.service").stdout)


@pytest.fixture(scope="module")
def adopted():
    before = original_state()
    # A running unit whose file was edited (and reloaded) after it started: what runs is not what
    # systemd would start now.
    lab("cat > /etc/systemd/system/shape-running.service && systemctl daemon-reload && "
        "systemctl start shape-running.service", stdin=RUNNING.format(tp=2))
    lab("cat > /etc/systemd/system/shape-running.service && systemctl daemon-reload", stdin=RUNNING.format(tp=4))
    for shape in SHAPES:
        for path, text in (shape.get("files") or {}).items():
            lab(f"mkdir -p $(dirname {path}) && cat > {path}", stdin=text)
        lab(f"cat > /etc/systemd/system/{shape['unit']}", stdin=shape["text"])
    lab("systemctl daemon-reload")
    results = Path(tempfile.mkdtemp(prefix="adopt-shapes-")) / "results.json"
    try:
        run = run_playbook("../tests/integration/playbooks/adopt_shapes.yml",
                           {"shapes": SHAPES, "results_file": str(results),
                            "accepted": {"unit": ACCEPTED["unit"], "change": ACCEPTED["change"]},
                            "running_units": ["sglang.service", "shape-running.service"]},
                           inventory="inventory/lab", local=False)
        assert run.returncode == 0, run.stdout[-3000:]
        saved = json.loads(results.read_text())
        by_id = {shape["id"]: result for shape, result in zip(SHAPES, saved["shapes"], strict=True)}
        yield (by_id, json.loads(Path(f"{results}.proof").read_text()), re.sub(r"\s+", " ", run.stdout + run.stderr),
               {r["item"]: r for r in saved["running"]}, results.read_text(), before)
    finally:
        files = " ".join(p for s in SHAPES for p in (s.get("files") or {}))
        units = " ".join(f"/etc/systemd/system/{s['unit']}" for s in SHAPES)
        lab(f"systemctl stop shape-running.service; rm -f {units} {files} /etc/systemd/system/shape-running.service; "
            "rm -rf /etc/shapes; systemctl daemon-reload")


def fact(recipe, dotted):
    head, _, rest = dotted.partition(".")
    value = recipe.get(head)
    return value.get(rest) if rest else value


@pytest.mark.parametrize("shape", SHAPES, ids=[s["id"] for s in SHAPES])
def test_each_shape_is_adopted_as_systemd_runs_it_or_refused_with_the_true_reason(adopted, shape):
    result = adopted[0][shape["id"]]
    if "refuse" in shape:
        assert shape["refuse"] in result.get("msg", ""), result.get("msg")
        assert "recipe" not in result  # refused before anything was read as a recipe
        return
    recipe = result["recipe"]
    assert recipe["systemd"]["read"] and recipe["systemd"]["probed"]
    for dotted, value in shape["expect"].items():
        if dotted == "argv":  # shown through the allow-list; these words are all public
            assert recipe["argv"] == value
            continue
        assert fact(recipe, dotted) == value, (dotted, fact(recipe, dotted))
    found = [f["what"] for f in recipe["systemd"]["findings"]]
    assert all(any(fragment in what for what in found) for fragment in shape["findings"]), found
    assert bool(found) == bool(shape["findings"]), found
    if found:  # each finding is also a warning on the console
        assert f"[WARNING]: {shape['unit']}: {found[0]}" in adopted[2], adopted[2][-2000:]
    if "refuse_change" in shape:
        assert shape["refuse_change"] in result.get("msg", ""), result.get("msg")


def test_an_accepted_malformed_original_gets_a_candidate_systemd_proves_one_control_apart(adopted):
    proof = adopted[1]["proof"]
    assert proof["ok"] and proof["unexplained"] == [] and proof["control"] == "arg --max-num-batched-tokens", proof
    check = subprocess.run(["podman", "exec", LAB, "test", "-e", "/etc/systemd/system/shape-trail-candidate.service"])
    assert check.returncode == 1


def test_the_running_process_is_read_beside_systemds_reading(adopted):
    running, text = adopted[3], adopted[4]
    original = running["sglang.service"]["recipe"]["systemd"]["running"]
    assert original["matches"] and original["edits"] == [] and "--api-key" in original["argv"]
    edited = running["shape-running.service"]["recipe"]["systemd"]["running"]
    assert not edited["matches"]
    assert {(e["side"], e["word"]) for e in edited["edits"]} == {("before", "4"), ("after", "2")}
    assert "shape-running.service: the running main process" in adopted[2]
    assert SECRET not in text + adopted[2]


def test_no_refusal_touched_the_serving_original_or_left_a_candidate(adopted):
    assert original_state() == adopted[5]
    left = lab("ls /etc/systemd/system").stdout.split()
    assert [name for name in left if name.startswith("shape-") and "-candidate" in name] == []


@pytest.mark.parametrize("shape", [s for s in SHAPES if "managed" in s], ids=lambda s: s["id"])
def test_adopt_to_managed_of_each_shape_is_proven_equal_by_systemd_or_says_why_not(adopted, shape, tmp_path):
    result = run_playbook("adopt-managed.yml", {"serving_recipe_unit": shape["unit"],
                                                "serving_unit_adopt_dir": str(tmp_path)},
                          inventory="inventory/lab", local=False)
    said = re.sub(r"\s+", " ", result.stdout)
    if shape["managed"] == "converts":
        assert result.returncode == 0, result.stdout[-3000:]
        assert f"EQUAL: the recipe renders {shape['unit']} as systemd runs it" in said, said[-3000:]
    elif "the image is held in" in shape["managed"]:
        # A recipe pins the image: systemd's reading of the render differs in that word, and says so.
        assert result.returncode != 0 and "NOT EQUAL" in said and shape["managed"] in said, said[-3000:]
        assert "ExecStart[0] argv" in said, said[-3000:]
    else:
        assert result.returncode != 0, said[-3000:]
        assert f"{shape['unit']} does not convert to a serving recipe: " in said and shape["managed"] in said, \
            said[-3000:]
    check = shape["unit"].replace(".service", "-managed-check.service")
    assert lab(f"test -e /etc/systemd/system/{check} && echo left || echo gone").stdout.strip() == "gone"
