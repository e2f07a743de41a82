"""The rollout role's own figures, as its README's table shows them in the column "now": task files, the include
depth inside the role, its internal names (a `rollout_*` name in tasks/, vars/ or templates/ that is neither a
public default, an output fact its meta/argument_specs.yml names, nor a module's name; the output facts and the
private ones, `_rollout_*` set and `__rollout_*` registered, counted apart) and the lines of YAML in tasks/.

    .venv/bin/python -m bench.bench_role_figures            # print them; exit 1 when the README says otherwise
    .venv/bin/python -m bench.bench_role_figures --write    # refresh the README's column "now"

tests/unit/test_architecture.py holds the README to them."""

import re
import sys
from pathlib import Path

ROLE = Path(__file__).resolve().parents[1] / "roles" / "rollout"
README = ROLE / "README.md"
NAME = re.compile(r"\brollout_[a-z0-9_]+")
PRIVATE = re.compile(r"(?<![A-Za-z0-9])(_{1,2})rollout_[a-z0-9_]+")
INCLUDED = re.compile(r"ansible\.builtin\.(?:import|include)_tasks:\s*(\S+\.yml)")
MODULE_NAMES = {"rollout_lock", "rollout_phase", "rollout_watchdog"}  # modules the role calls, not variables
OUTPUTS = re.compile(r'"Output facts: ([^"]*)"')
ROWS = {"task files": "task_files", "include depth in the role (rollback path)": "include_depth",
        "internal names": "internal_names", "output facts (argument_specs)": "output_facts",
        "private names (_rollout_*, __rollout_*)": "private_names",
        "lines of YAML in tasks/": "task_lines"}


def _texts(role, *folders):
    return [p.read_text() for folder in folders for p in sorted((role / folder).rglob("*")) if p.is_file()]


def include_depth(tasks):
    """The longest chain of task files importing or including one another inside the role."""
    edges = {p.name: INCLUDED.findall(p.read_text()) for p in tasks.glob("*.yml")}

    def depth(name, seen):
        children = [c for c in edges.get(name, []) if c not in seen]
        return max((1 + depth(c, seen | {c}) for c in children), default=0)

    return max(depth(name, {name}) for name in edges)


def figures(role=ROLE):
    tasks = role / "tasks"
    texts = _texts(role, "tasks", "vars", "templates")
    public = set(re.findall(r"^(rollout_[a-z0-9_]+):", (role / "defaults" / "main.yml").read_text(), re.M))
    used = {name for text in texts for name in NAME.findall(text)}
    outputs = {name for said in OUTPUTS.findall((role / "meta" / "argument_specs.yml").read_text())
               for name in NAME.findall(said)}
    private = {m.group(0) for text in texts for m in PRIVATE.finditer(text)}
    return {"task_files": len(list(tasks.glob("*.yml"))), "include_depth": include_depth(tasks),
            "internal_names": len(used - public - MODULE_NAMES - outputs), "output_facts": len(outputs & used),
            "private_names": len(private),
            "task_lines": sum(len(p.read_text().splitlines()) for p in tasks.glob("*.yml"))}


def _row(line):
    """A table row of one of the figures: its cells, else None."""
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    return cells if line.startswith("|") and cells[0] in ROWS else None


def readme_now(text):
    """{figure: the README table's last column} for the rows it holds."""
    return {ROWS[cells[0]]: cells[-1] for line in text.splitlines() if (cells := _row(line))}


def refreshed(text, now):
    """The README with each known row's last column set to `now`'s figure."""
    out = []
    for line in text.splitlines():
        if cells := _row(line):
            line = "| " + " | ".join(cells[:-1] + [str(now[ROWS[cells[0]]])]) + " |"
        out.append(line)
    return "\n".join(out) + "\n"


def main(argv):
    now = figures()
    for row, key in ROWS.items():
        print(f"{row}: {now[key]}")
    text = README.read_text()
    if "--write" in argv:
        README.write_text(refreshed(text, now))
        return 0
    stale = {k: v for k, v in readme_now(text).items() if v != str(now[k])}
    if stale:
        print(f"roles/rollout/README.md says otherwise: {stale} (run with --write)")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
