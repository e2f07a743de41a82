"""Each molecule scenario (molecule/<name>/), run as molecule runs it: its own fresh lab
container, converge, (idempotence), verify, destroy. A test each, so that bin/test's two
workers can run one beside the lab tests."""

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

SCENARIOS = sorted(path.name for path in (REPO / "molecule").iterdir() if (path / "molecule.yml").is_file())


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_molecule_scenario_passes(scenario):
    molecule = Path(sys.executable).parent / "molecule"
    result = subprocess.run([str(molecule), "test", "-s", scenario], cwd=REPO, capture_output=True, text=True,
                            timeout=1200)
    assert result.returncode == 0, f"molecule test -s {scenario}: rc {result.returncode}\n" + \
        (result.stdout + result.stderr)[-6000:]


def test_every_scenario_is_found():
    assert {"lab_serving_host", "rollout", "serving_recipe", "serving_unit"} <= set(SCENARIOS), SCENARIOS
