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
        play_vars = {"rollout_hosts", "rollout_canary", "rollout_batch_size", "peer_path_hosts"}
        missing += [f"{role}: {name}" for name in outputs - play_vars
                    if not re.search(rf"(register: {name}\b|^\s+{name}:)", tasks, re.M)]
    assert missing == []
