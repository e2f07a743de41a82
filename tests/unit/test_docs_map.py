"""The README is a map and the docs are true to the tree: the README stays within 200 lines, and every path
or role variable the README or a doc names in backticks exists (a file or folder of the repository; a
variable some role, playbook or inventory defines or registers, or a role's argument spec names)."""

import re

import pytest
from conftest import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if p.is_dir())
TOP = {p.name for p in REPO.iterdir()}
# A repository path: starts at a top-level entry, plain characters only (no placeholders, globs or host paths).
PATH = re.compile(r"^(?:\./)?([A-Za-z0-9_.-]+)(/[A-Za-z0-9_.-]+)*/?$")
VARIABLE = re.compile(r"^(?:" + "|".join(ROLES) + r")_[a-z0-9_]+$")


def spans(doc):
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)  # shell examples are not claims about the tree
    return re.findall(r"`([^`\n]+)`", text)


def defined_variables():
    names = set()
    for path in [*REPO.glob("roles/**/*.yml"), *REPO.glob("playbooks/**/*.yml"), *REPO.glob("inventory/**/*.yml"),
                 *REPO.glob("molecule/**/*.yml")]:
        text = path.read_text()
        names |= set(re.findall(r"^\s*([a-z][a-z0-9_]*):", text, re.M))
        names |= set(re.findall(r"register: ([a-z][a-z0-9_]*)", text))
    for spec in REPO.glob("roles/*/meta/argument_specs.yml"):  # outputs and play variables, named in its text
        names |= set(re.findall(r"\b[a-z][a-z0-9_]*\b", spec.read_text()))
    return names


def test_the_readme_is_a_map_of_at_most_200_lines():
    lines = (REPO / "README.md").read_text().count("\n")
    assert lines <= 200, f"README.md has {lines} lines: move the detail into docs/ beside what it describes"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_path_a_doc_names_exists(doc):
    missing = []
    for span in spans(doc):
        match = PATH.match(span)
        if match and "/" in span and match.group(1) in TOP and not (REPO / span.removeprefix("./")).exists():
            missing.append(span)
    assert missing == [], f"{doc.name} names paths that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_role_variable_a_doc_names_is_defined(doc):
    known = defined_variables()
    missing = sorted({span for span in spans(doc) if VARIABLE.match(span) and span not in known})
    assert missing == [], f"{doc.name} names role variables no role, playbook or inventory defines: {missing}"
