"""snapshot_read (library/snapshot_read.py), run by ansible itself on this machine: a snapshot whose manifest is
not JSON, or not a manifest, is named by its path before anything reads systemd (rollback.yml stops there, and
the lab test in test_trust.py shows the original untouched)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO


def snapshot_read(state_dir):
    command = [str(Path(sys.executable).parent / "ansible"), "localhost", "-c", "local", "-m", "snapshot_read",
               "-a", json.dumps({"unit": "sglang.service", "candidate_unit": "sglang-candidate.service",
                                 "state_dir": str(state_dir)}), "-e", f"ansible_python_interpreter={sys.executable}"]
    env = {**os.environ, "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1", "ANSIBLE_STDOUT_CALLBACK": "json",
           "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1"}
    out = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    return json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


@pytest.mark.parametrize("text, says", [
    ('{"unit": "sglang.service", "files": [', "cannot read the snapshot {path}: Expecting value"),
    ('{"unit": "sglang.service"}', "{path} is not a snapshot manifest (no files list): "),
    ("[]", "{path} is not a snapshot manifest (no files list): []"),
])
def test_a_manifest_that_is_not_one_is_named_by_its_path(tmp_path, text, says):
    (tmp_path / "sglang.service").mkdir()
    manifest = tmp_path / "sglang.service" / "manifest.json"
    manifest.write_text(text)
    result = snapshot_read(tmp_path)
    assert result["failed"] and result["msg"].startswith(says.format(path=manifest)), result
    assert not result.get("changed") and "found" not in result


def test_a_readable_manifest_is_the_restore_recipe(tmp_path):
    (tmp_path / "sglang.service").mkdir()
    manifest = {"unit": "sglang.service", "files": [{"path": "/etc/systemd/system/sglang.service", "sha256": "ab"}]}
    (tmp_path / "sglang.service" / "manifest.json").write_text(json.dumps(manifest))
    result = snapshot_read(tmp_path)
    assert not result.get("failed") and result["found"] and not result["promoted"], result
    assert result["manifest"] == manifest
