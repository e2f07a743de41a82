"""Every module's documentation renders (ansible-doc) and matches its code: DOCUMENTATION options
are exactly the argument_spec, RETURN parses with a description and type per key; and every
role entry point used through tasks_from has its argument spec (Ansible validates only those)."""

import ast
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


def argument_specs(name, monkeypatch):
    """The action's arguments and the module's, each that exists (rollout_lock has both)."""
    action = (REPO / "action_plugins" / f"{name}.py").exists()
    module = "AnsibleModule(" in (REPO / "library" / f"{name}.py").read_text()
    return [argument_spec(name, monkeypatch, action=kind) for kind, exists in ((True, action), (False, module))
            if exists]


def argument_spec(name, monkeypatch, action=True):
    """The module's argument_spec, taken from its own AnsibleModule(...) call; for an action that runs on
    the controller (action_plugins/<name>.py, its documentation in library/), the arguments its base reads from
    that documentation (fragments merged as ansible-doc merges them)."""
    if action:
        spec = importlib.util.spec_from_file_location(f"action_{name}", REPO / "action_plugins" / f"{name}.py")
        plugin = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(plugin)
        return plugin.ActionModule.argument_spec()
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
    specs = argument_specs(name, monkeypatch)
    assert specs and all(set(options) == set(spec) for spec in specs), name
    returns = rendered.get("return") or {}
    assert returns, f"{name} has no RETURN"
    for key, entry in returns.items():
        assert isinstance(entry, dict) and entry.get("description") and entry.get("type"), (name, key, entry)
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", key), (name, key)  # no keys made of description text
        # community.general's skeleton: a reader sees the shape of every value (issue 47)
        assert "sample" in entry or "contains" in entry, f"{name} RETURN {key} has neither a sample nor contains"


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


# What in a module's own code can change its host: a changed result, or a write to a file.
CHANGES = re.compile(r"changed\"?\]?\s*[=:]\s*True|changed=changed|\bwrite_atomic\(|os\.replace\(|os\.rename\(|"
                     r"shutil\.copy|\.write_text\(|\.write_bytes\(|os\.unlink\(|os\.remove\(|open\([^)]*['\"][wax]")


def description(name):
    doc = yaml.safe_load(re.search(r'DOCUMENTATION = r?"""(.*?)"""', (REPO / "library" / f"{name}.py").read_text(),
                                   re.S).group(1))
    text = doc.get("description")
    return " ".join(text) if isinstance(text, list) else str(text)


def module_code(name):
    """A module's own code, without its documentation, and the functions it imports from module_utils/ (a thin
    module's changes are made there)."""
    code = (REPO / "library" / f"{name}.py").read_text().split('RETURN = r"""')[-1].split('"""', 1)[-1]
    for helper, names in re.findall(r"from ansible\.module_utils\.(\w+) import ([\w, ]+)", code):
        path = REPO / "module_utils" / f"{helper}.py"
        if path.exists():
            tree = ast.parse(path.read_text())
            code += "".join(ast.get_source_segment(path.read_text(), node) for node in tree.body
                            if isinstance(node, ast.FunctionDef) and node.name in {n.strip() for n in names.split(",")})
    return code


@pytest.mark.parametrize("name", MODULES)
def test_module_docs_say_what_the_module_changes(name):
    """A module that can change its host says what it writes and that check mode writes nothing;
    one that cannot says it is read-only; never "Read-only" on a module that writes."""
    code = module_code(name)
    action = REPO / "action_plugins" / f"{name}.py"
    runs_a_writer = False
    if action.exists():  # an action's code is on the controller; its modules' changes are its own
        action_code = action.read_text()
        code += action_code
        runs_a_writer = any(f'"{other}"' in action_code and CHANGES.search(module_code(other))
                            for other in MODULES if other != name)
        # a controller tool it drives (serving_rollout.<tool>): that tool's writes are the action's
        runs_a_writer |= any(CHANGES.search((REPO / "serving_rollout" / f"{tool}.py").read_text())
                             for tool in re.findall(r"^from serving_rollout import (\w+)$", action_code, re.M))
    text = description(name)
    if CHANGES.search(code) or runs_a_writer:
        assert "Read-only;" not in text and "Read-only." not in text, f"{name} writes but is documented read-only"
        assert re.search(r"\b(Writes|writes|Changes|changes)\b", text), f"{name} writes but its doc names no change"
        assert "check mode" in text, f"{name} writes but its doc does not say what check mode does"
    else:
        assert re.search(r"read-only|changes nothing", text, re.I), f"{name} changes nothing; its doc should say so"


def test_the_change_check_sees_a_write():
    assert CHANGES.search('write_atomic(dest, content, 0o644)') and CHANGES.search('result["changed"] = True')
    assert not CHANGES.search('module.exit_json(changed=False, cells=verdicts)')
