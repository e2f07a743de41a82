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
from conftest import FIXTURES, run_playbook

LAB = "serving-lab-gpu-1"
SHAPES = yaml.safe_load((FIXTURES / "systemd" / "adoption-shapes.yml").read_text())
ACCEPTED = next(s for s in SHAPES if s["id"] == "blank after a continuation backslash")


def lab(script, stdin=None):
    return subprocess.run(["podman", "exec", "-i", LAB, "sh", "-c", script], capture_output=True, text=True,
                          input=stdin, check=True)


@pytest.fixture(scope="module")
def adopted():
    for shape in SHAPES:
        for path, text in (shape.get("files") or {}).items():
            lab(f"mkdir -p $(dirname {path}) && cat > {path}", stdin=text)
        lab(f"cat > /etc/systemd/system/{shape['unit']}", stdin=shape["text"])
    lab("systemctl daemon-reload")
    results = Path(tempfile.mkdtemp(prefix="adopt-shapes-")) / "results.json"
    try:
        run = run_playbook("../tests/integration/playbooks/adopt_shapes.yml",
                           {"shapes": SHAPES, "results_file": str(results),
                            "accepted": {"unit": ACCEPTED["unit"], "change": ACCEPTED["change"]}},
                           inventory="inventory/lab", local=False)
        assert run.returncode == 0, run.stdout[-3000:]
        by_id = {shape["id"]: result for shape, result in zip(SHAPES, json.loads(results.read_text()), strict=True)}
        yield by_id, json.loads(Path(f"{results}.proof").read_text()), re.sub(r"\s+", " ", run.stdout + run.stderr)
    finally:
        files = " ".join(p for s in SHAPES for p in (s.get("files") or {}))
        units = " ".join(f"/etc/systemd/system/{s['unit']}" for s in SHAPES)
        lab(f"rm -f {units} {files}; rm -rf /etc/shapes; systemctl daemon-reload")


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
