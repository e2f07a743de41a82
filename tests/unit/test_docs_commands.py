"""Every command the README and docs/ show runs as written from a fresh clone after bin/setup, with .venv/bin on
PATH as the README says: the program exists, and every option and subcommand it is given is accepted. Each program
is asked its own way, never changing a host: bin/serving-rollout's parser (and its usage checks for a fenced
command), ansible-playbook --syntax-check, ansible-doc itself, bin/evidence on a real run's folder, bin/test's stage
names, a bench module found. Placeholders (inventory/yours, RUN_ID, DIR, ...) stand for the repository's own
example of each."""

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from serving_rollout import cli
from serving_rollout import plan as plan_executor

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
PROGRAMS = r"(?:bin/[a-z-]+|\.venv/bin/[a-z0-9-]+|ansible-playbook|ansible-doc|serving-rollout)"
FENCED = re.compile(r"```(\w*)\n(.*?)```", re.S)  # every block (its language, its text): a shell block holds commands
SHELL = ("", "sh", "bash", "shell", "console")
INLINE = re.compile(rf"`({PROGRAMS}(?: [^`]*)?)`")
RUN_DIR = REPO / "tests" / "fixtures" / "h200x2-gpu-ab" / "rollout-20261130T093248Z"
# What each placeholder of the docs stands for here.
PLACEHOLDERS = [
    (r"inventory/(?:yours|\.\.\.)", "inventory/example"), (r"\bINVENTORY\b", "inventory/example"),
    (r"\bRUN_ID\b", "20261201T000000Z"), (r"plans/yours\.json|\bplan\.json\b|\bPLAN\.json\b",
                                           "plans/candidate-plan-example.json"),
    (r"\bDIR\b", str(RUN_DIR)), (r"<role>", "rollout"), (r"\[(--[^\]]+)\]", r"\1"),
]


def commands():
    """(doc, command, fenced) for every command shown: fenced lines (continuations joined, comments dropped) and
    inline code spans that start with a program."""
    found = []
    for doc in DOCS:
        text = doc.read_text()
        for language, block in FENCED.findall(text):
            if language not in SHELL:
                continue
            joined = re.sub(r"\\\n\s*", " ", block)
            for line in joined.splitlines():
                line = re.sub(r"\s+#.*$", "", line).strip()
                if re.match(PROGRAMS, line):
                    found.append((doc.name, line, True))
        for span in INLINE.findall(FENCED.sub("", text)):
            found.append((doc.name, span.strip(), False))
    return sorted(set(found))


def substituted(command):
    for pattern, value in PLACEHOLDERS:
        command = re.sub(pattern, value, command)
    return command


def serving_rollout(words, fenced):
    """The CLI's own parser (and, for a full command, its usage checks) accept the words, or why not."""
    parser = cli.parser_of()
    sub = parser._subparsers._group_actions[0].choices  # noqa: SLF001 - argparse keeps its subparsers here
    if not words or words[0] not in sub:
        return f"no such command: {words[:1]} (commands: {', '.join(sub)})"
    if not fenced:  # an inline mention names a command and options, not always every required argument
        known = {opt for action in sub[words[0]]._actions for opt in action.option_strings}  # noqa: SLF001
        unknown = [w for w in words[1:] if w.startswith("-") and w.split("=")[0] not in known]
        return f"options not accepted: {unknown}" if unknown else None
    try:
        args = parser.parse_args(words)
    except SystemExit:
        return "rejected by the parser"
    if args.command == "status":
        return None
    problem = cli.usage_problem(args, cli.parse_extra_vars(args.extra_vars))
    if problem is None and args.command == "plan":  # the plan itself, as the plan command reads it first
        try:
            plan_executor.load_plan(args.plan_file)
        except plan_executor.PlanError as exc:
            return str(exc)
    return problem


def run(argv):
    env = {**os.environ, "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ.get('PATH', '')}", "ANSIBLE_NOCOLOR": "1"}
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    return None if done.returncode == 0 else f"exit {done.returncode}: {(done.stderr or done.stdout)[-600:]}"


def problem_of(command, fenced):
    words = shlex.split(substituted(command))
    if "..." in words:  # a command named, its arguments left to the reader
        return None
    program, rest = words[0], words[1:]
    if not rest and not fenced:  # a program named in a sentence: it exists
        return None if program in ("serving-rollout", "ansible-playbook", "ansible-doc") or os.access(
            REPO / program, os.X_OK) else f"{program} does not exist or cannot run"
    if program in ("bin/serving-rollout", "serving-rollout"):
        return serving_rollout(rest, fenced)
    if program == "ansible-playbook":
        inventory = [] if "-i" in rest else ["-i", "inventory/example"]
        return run(["ansible-playbook", "--syntax-check", *inventory, *rest])
    if program == "ansible-doc":
        return run(["ansible-doc", *rest])
    if program == "bin/evidence":
        return run([str(REPO / "bin" / "evidence"), "card", str(RUN_DIR)]) if rest[:1] in (["card"], ["verify"],
                                                                                           ["trust"], []) else \
            f"bin/evidence has no command {rest[:1]}"
    if program == "bin/test":
        unknown = [stage for stage in rest if stage not in ("lint", "unit", "molecule", "integration")]
        return f"bin/test has no stage {unknown}" if unknown else None
    if program == ".venv/bin/python" and rest[:1] == ["-m"]:  # a module of this repository (bench.*)
        return None if (REPO / (rest[1].replace(".", "/") + ".py")).is_file() else f"no module {rest[1]}"
    if program == ".venv/bin/python":
        return None if (REPO / rest[0]).is_file() else f"no file {rest[0]}"
    path = REPO / program
    return None if path.is_file() and os.access(path, os.X_OK) else f"{program} does not exist or cannot run"


@pytest.mark.parametrize("doc, command, fenced", commands(), ids=lambda value: str(value)[:60])
def test_every_documented_command_runs_as_written(doc, command, fenced):
    assert problem_of(command, fenced) is None, f"{doc}: `{command}`: {problem_of(command, fenced)}"


def test_the_extraction_finds_the_commands_the_docs_hold_and_a_broken_one_fails():
    found = {command for _, command, _ in commands()}
    assert "bin/lab-run" in found and any(c.startswith("bin/serving-rollout plan ") for c in found)
    assert any(c.startswith("ansible-playbook ") for c in found) and any(c.startswith("ansible-doc ") for c in found)
    assert problem_of("bin/serving-rollout propose --frobnicate -i inventory/yours", True) == "rejected by the parser"
    assert problem_of("bin/serving-rollout peer-paths -i inventory/yours", True).startswith("no such command")
    assert problem_of("bin/nothing-here", True) == "bin/nothing-here does not exist or cannot run"


@pytest.mark.parametrize("plan", sorted((REPO / "plans").glob("*.json")), ids=lambda path: path.name)
def test_every_plan_in_plans_is_taken_by_the_plan_command(plan):
    assert serving_rollout(["plan", str(plan.relative_to(REPO)), "-i", "inventory/example"], True) is None
