"""Every module's documentation renders (ansible-doc) and matches its code: DOCUMENTATION options
are exactly the argument_spec, RETURN parses with a description and type per key; and every
role entry point used through tasks_from has its argument spec (Ansible validates only those)."""

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.module_utils import basic
from conftest import REPO

MODULES = sorted(p.stem for p in (REPO / "library").glob("*.py"))


class SpecCaptured(Exception):
    pass


def argument_spec(name, monkeypatch):
    """The module's argument_spec, taken from its own AnsibleModule(...) call."""
    captured = {}

    def fake_module(*args, **kwargs):
        captured.update(kwargs.get("argument_spec") or args[0])
        raise SpecCaptured

    spec = importlib.util.spec_from_file_location(f"module_{name}", REPO / "library" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setattr(basic, "AnsibleModule", fake_module)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "AnsibleModule", fake_module)
    with pytest.raises(SpecCaptured):
        module.main()
    return captured


@pytest.mark.parametrize("name", MODULES)
def test_module_docs_render_and_match_the_argument_spec(name, monkeypatch):
    doc = subprocess.run([str(Path(sys.executable).parent / "ansible-doc"), "-M", str(REPO / "library"), "--json",
                          name], capture_output=True, text=True, cwd=REPO)
    assert doc.returncode == 0, doc.stderr
    rendered = json.loads(doc.stdout)[name]
    options = rendered["doc"].get("options") or {}
    assert set(options) == set(argument_spec(name, monkeypatch)), name
    returns = rendered.get("return") or {}
    assert returns, f"{name} has no RETURN"
    for key, entry in returns.items():
        assert isinstance(entry, dict) and entry.get("description") and entry.get("type"), (name, key, entry)
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", key), (name, key)  # no keys made of description text


def test_every_tasks_from_entry_point_has_an_argument_spec():
    used = set()
    for path in list((REPO / "playbooks").glob("*.yml")) + list((REPO / "roles").rglob("tasks/*.yml")):
        for role, entry in re.findall(r"name: (\w+)\s*\n\s*tasks_from: (\w+)", path.read_text()):
            used.add((role, entry))
    assert used, "no tasks_from found"
    missing = []
    for role, entry in sorted(used):
        specs = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
        if entry not in specs:
            missing.append(f"{role}:{entry}")
    assert missing == []
