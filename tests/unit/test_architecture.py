"""The house rule (docs/architecture.md) kept by a test, not by memory: a module runs commands only through
module_utils/host_commands.py; no task runs the project's Python as a command or delegates one of the project's
modules to the controller (that is an action plugin's job); filters hold no I/O."""

import re

import yaml
from conftest import REPO

TASK_FILES = [*REPO.glob("roles/*/tasks/*.yml"), *REPO.glob("playbooks/*.yml"), *REPO.glob("playbooks/tasks/*.yml")]
OURS = {p.stem for p in (REPO / "library").glob("*.py")}


def tasks(node):
    """Every task mapping in a task file or playbook, blocks and plays opened."""
    if isinstance(node, list):
        for item in node:
            yield from tasks(item)
    elif isinstance(node, dict):
        if "name" in node and not {"hosts", "block"} & set(node):
            yield node
        for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
            yield from tasks(node.get(key) or [])


def test_modules_run_commands_only_through_host_commands():
    direct = [p.name for p in (REPO / "library").glob("*.py") if re.search(r"module\.run_command\(", p.read_text())]
    assert direct == [], f"modules calling module.run_command themselves (use module_utils/host_commands.py): {direct}"


def test_no_task_runs_the_projects_python_or_delegates_a_project_module_to_the_controller():
    found = []
    for path in TASK_FILES:
        for task in tasks(yaml.safe_load(path.read_text())):
            text = str(task)
            if "serving_rollout" in text and "ansible_playbook_python" in text and path.name != "plan.yml":
                found.append(f"{path.relative_to(REPO)}: {task['name']} (runs the project's Python: an action's job)")
            if task.get("delegate_to") == "localhost" and OURS & set(task):
                found.append(f"{path.relative_to(REPO)}: {task['name']} (a project module delegated to localhost)")
    assert found == []


def test_filters_do_no_io():
    io = re.compile(r"\bopen\(|subprocess|os\.(?:remove|replace|makedirs|listdir)|Path\(")
    found = [p.name for p in (REPO / "filter_plugins").glob("*.py") if io.search(p.read_text())]
    assert found == [], f"filters that read or write (filters only reshape; I/O is an action's): {found}"
