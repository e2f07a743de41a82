"""The house rule (docs/architecture.md) kept by a test, not by memory: a module runs commands only through
module_utils/host_commands.py; no task runs the project's Python as a command or delegates one of the project's
modules to the controller (that is an action plugin's job); filters hold no I/O."""

import importlib.util
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


def test_every_action_takes_the_one_base_and_its_documented_arguments():
    from test_host_steps import action_class

    from serving_rollout.play.actions import PlayAction

    other = [p.stem for p in (REPO / "action_plugins").glob("*.py") if not issubclass(action_class(p.stem), PlayAction)]
    assert other == [], f"actions not on serving_rollout/play/actions.py's PlayAction: {other}"
    # an action keeps no argument list of its own: its documentation is the one source
    kept = [p.stem for p in (REPO / "action_plugins").glob("*.py")
            if re.search(r"\b(ARGUMENT_SPEC|_VALID_ARGS|REQUIRED|OPTIONAL)\s*=", p.read_text())]
    assert kept == [], f"actions with a hand-kept argument list beside their documentation: {kept}"


def imported_module_utils(text):
    """The module_utils names a file imports: ansible.module_utils.X (a module), .X (module_utils itself)."""
    names = re.findall(r"ansible\.module_utils\.(\w+)|from ansible\.module_utils import ([\w, ]+)|from \.(\w+) import"
                       r"|from \. import ([\w, ]+)", text)
    return {name.strip() for found in names for group in found if group for name in group.split(",")}


def test_every_module_utils_file_ships_to_a_host_through_a_module():
    """module_utils/ is what Ansible ships with a module: a file no module reaches is controller code
    (serving_rollout/play/, or serving_rollout/ outside a play)."""
    ours = {p.stem for p in (REPO / "module_utils").glob("*.py")} - {"__init__"}
    reached, todo = set(), [n for p in (REPO / "library").glob("*.py") for n in imported_module_utils(p.read_text())]
    while todo:
        name = todo.pop()
        if name in ours and name not in reached:
            reached.add(name)
            todo += imported_module_utils((REPO / "module_utils" / f"{name}.py").read_text())
    assert sorted(ours - reached) == [], "module_utils files no module ships (controller code: serving_rollout/play/)"


def test_no_module_utils_file_starts_a_process_but_the_command_runner_and_the_watchdog():
    starts = [p.name for p in (REPO / "module_utils").glob("*.py")
              if re.search(r"^\s*(import subprocess|from subprocess import)", p.read_text(), re.M)
              and p.stem not in ("host_commands", "watchdog")]
    assert starts == [], f"module_utils files starting processes outside host_commands.py/watchdog.py: {starts}"


# Modules whose own steps still wait to move into module_utils/ (docs/architecture.md, "Weight"): the list only
# shrinks - a module thinned leaves it, and a new module defines only main.
NOT_YET_THIN = set()


def test_a_module_is_its_documentation_and_a_main_that_calls_module_utils():
    fat = {p.stem for p in (REPO / "library").glob("*.py")
           if len(re.findall(r"^(?:def|class) ", p.read_text(), re.M)) > 1}
    assert fat - NOT_YET_THIN == set(), "modules with steps of their own: move them into module_utils/"
    assert NOT_YET_THIN - fat == set(), "thinned: take them off NOT_YET_THIN"


def test_the_rollout_roles_readme_figures_are_its_own_commands_and_no_internal_name_is_public():
    spec = importlib.util.spec_from_file_location("bench_role_figures", REPO / "bench" / "bench_role_figures.py")
    bench_role_figures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_role_figures)
    now = bench_role_figures.figures()
    said = bench_role_figures.readme_now(bench_role_figures.README.read_text())
    assert said == {key: str(value) for key, value in now.items()}, \
        "roles/rollout/README.md is stale: run .venv/bin/python -m bench.bench_role_figures --write"
    assert now["internal_names"] == 0, "a rollout_* name that is neither a default nor an output fact: make it private"
