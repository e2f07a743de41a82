"""Roles talk to each other only through documented variables: what one role reads of another
(a `<role>_` name in another role, a playbook or a molecule scenario) is that role's input
(an argument-spec option), one of its documented output facts ("Output facts: ..." in its
argument spec), or a play variable a playbook reads (hosts, serial)."""

import re

import yaml
from conftest import REPO

ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "meta" / "argument_specs.yml").exists())


def contract(role):
    specs = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    inputs, outputs = set(), set()
    for spec in specs.values():
        inputs |= set(spec.get("options", {}))
        text = " ".join(spec.get("description", []) if isinstance(spec.get("description"), list)
                        else [spec.get("description", "")])
        for listed in re.findall(r"(?:Output facts?|Play variables \([^)]*\)): ((?:\([^)]*\)|[^.(])*)", text):
            outputs |= {name.strip() for name in re.sub(r"\([^)]*\)", "", listed).split(",")}
    return inputs, outputs


def readers(role):
    """(file, name) of every `<role>_...` name used outside the role."""
    pattern = re.compile(rf"\b{role}_[a-z0-9_]+\b")
    files = [p for p in (REPO / "roles").rglob("*.yml") if p.parts[len(REPO.parts) + 1] != role]
    files += list((REPO / "playbooks").rglob("*.yml")) + list((REPO / "molecule").rglob("*.yml"))
    for path in files:
        for name in set(pattern.findall(path.read_text())):
            yield path.relative_to(REPO), name


def test_every_role_has_a_contract():
    assert {"rollout", "serving_recipe", "serving_preflight", "fleet"} <= set(ROLES)


def test_roles_read_each_other_only_through_documented_inputs_and_outputs():
    undocumented = []
    for role in ROLES:
        inputs, outputs = contract(role)
        undocumented += [f"{path}: {name}" for path, name in readers(role) if name not in inputs | outputs]
    assert undocumented == []


def test_every_documented_output_fact_is_set_by_its_role():
    missing = []
    for role in ROLES:
        _, outputs = contract(role)
        tasks = "".join(p.read_text() for p in (REPO / "roles" / role / "tasks").glob("*.yml"))
        # a module of the project that returns the fact (rollout_phase: rollout_progress) sets it too
        tasks += "".join(re.sub(r'"(\w+)": \{', r"\n  \1:", p.read_text()) for p in (REPO / "library").glob("*.py")
                         if "ansible_facts=" in p.read_text())
        play_vars = {"rollout_hosts", "rollout_canary", "rollout_batch_size", "peer_path_hosts"}
        missing += [f"{role}: {name}" for name in outputs - play_vars
                    if not re.search(rf"(register: {name}\b|^\s+{name}:)", tasks, re.M)]
    assert missing == []


# Ansible's own connection and privilege variables an inventory may set.
CONNECTION_VARS = re.compile(r"^ansible_(host|port|user|connection|become|become_user|become_method|python_interpreter"
                             r"|ssh_private_key_file|ssh_common_args|ssh_extra_args|password|become_password)$")


def inventory_variables(inventory):
    """(file, name) of every variable an inventory folder sets: group_vars, host_vars, hosts.yml vars."""
    def walk(node, path):
        if not isinstance(node, dict):
            return
        for key, value in node.items():
            if key in ("vars",) and isinstance(value, dict):
                yield from ((path, name) for name in value)
            elif key == "hosts" and isinstance(value, dict):
                for host_vars in value.values():
                    yield from ((path, name) for name in (host_vars or {}))
            elif key == "children" and isinstance(value, dict):
                for child in value.values():
                    yield from walk(child, path)
            elif key == "all":
                yield from walk(value, path)

    for path in sorted(inventory.rglob("*.yml")):
        data = yaml.safe_load(path.read_text()) or {}
        rel = path.relative_to(REPO)
        if "group_vars" in path.parts or "host_vars" in path.parts:
            yield from ((rel, name) for name in data)
        else:
            yield from walk(data, rel)


def known_inputs():
    """Every role's argument-spec options, and the shared variables that role defaults and playbooks read."""
    known = set()
    for role in ROLES:
        known |= contract(role)[0]
    readers = list((REPO / "roles").glob("*/defaults/main.yml")) + list((REPO / "playbooks").rglob("*.yml"))
    for path in readers:
        known |= set(re.findall(r"\b([a-z][a-z0-9_]+)\b", " ".join(re.findall(r"{{(.*?)}}", path.read_text(), re.S))))
    return known


def test_every_variable_an_inventory_sets_is_an_input_of_a_role_or_playbook():
    """An operator copies inventory/example/: a variable that nothing reads is a setting silently ignored."""
    known = known_inputs()
    unknown = [f"{path}: {name}" for inventory in sorted((REPO / "inventory").iterdir()) if inventory.is_dir()
               for path, name in inventory_variables(inventory)
               if name not in known and not CONNECTION_VARS.match(name)]
    assert unknown == []


def test_the_inventory_check_sees_an_unknown_variable():
    names = [name for _, name in inventory_variables(REPO / "inventory" / "example")]
    assert "serving_recipe_unit" in names and "ansible_host" in names  # group_vars and hosts.yml both read
    assert "serving_unit_name" not in known_inputs()  # the old, unread name would be refused


def test_every_argument_spec_default_is_the_roles_default():
    """An option with a value in defaults/main.yml documents that value as its default: (ansible-doc shows it),
    and the two never drift apart; a required option has no default."""
    drift, undocumented = [], []
    for spec in sorted(REPO.glob("roles/*/meta/argument_specs.yml")):
        defaults_file = spec.parent.parent / "defaults" / "main.yml"
        defaults = (yaml.safe_load(defaults_file.read_text()) if defaults_file.exists() else None) or {}
        role = spec.parent.parent.name
        for entry, doc in yaml.safe_load(spec.read_text())["argument_specs"].items():
            for name, option in (doc.get("options") or {}).items():
                if name not in defaults or option.get("required"):
                    continue
                if "default" not in option:
                    undocumented.append(f"{role}:{entry}:{name}")
                elif option["default"] != defaults[name]:
                    drift.append(f"{role}:{entry}:{name}: {option['default']!r} != {defaults[name]!r}")
    assert drift == [] and undocumented == [], {"differ from defaults/main.yml": drift, "no default:": undocumented}


def test_the_lab_double_gets_the_engine_adapters_and_everything_they_import():
    """roles/lab_serving_host copies these files beside the double: engine_adapters.py's own imports, no more."""
    defaults = yaml.safe_load((REPO / "roles" / "lab_serving_host" / "defaults" / "main.yml").read_text())
    needed, todo = {"__init__.py"}, ["engine_adapters.py"]
    while todo:
        name = todo.pop()
        needed.add(name)
        text = (REPO / "module_utils" / name).read_text()
        todo += [f"{m}.py" for m in re.findall(r"^from \.(\w+) import", text, re.MULTILINE) if f"{m}.py" not in needed]
    assert set(defaults["lab_serving_host_adapter_modules"]) == needed, needed
