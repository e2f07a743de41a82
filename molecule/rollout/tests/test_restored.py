"""Molecule verifier (testinfra): the original restored byte for byte and the run's records."""

import json
import os
from pathlib import Path

from restored import restored_problems  # tests/restored.py, on pytest's pythonpath (pyproject.toml)

EVIDENCE = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "evidence"


def run_dir():
    runs = sorted(EVIDENCE.rglob("rollout-*"))
    assert runs, f"no rollout evidence under {EVIDENCE}"
    return runs[-1]


def test_the_original_is_restored_byte_exact_with_nothing_of_the_candidate_left(host):
    recipes = json.loads((run_dir() / "recipes.json").read_text())
    assert restored_problems(host, "sglang.service", recipes["original_files"]) == []


def test_every_candidate_and_restored_gate_passed():
    gates = json.loads((run_dir() / "gates.json").read_text())
    assert [g["gate"] for g in gates["candidate"]] == ["smoke", "json", "needle", "tool_call", "contract"]
    assert {g["verdict"] for g in gates["candidate"]} == {"pass"}
    assert {g["verdict"] for g in gates["restored"]} == {"pass"}
