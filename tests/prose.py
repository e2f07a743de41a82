"""What a person reads (the card, the reports, the CLI's closing lines) is prose: no Python repr, no bare None,
no quoted list or dict, no sentence over 300 characters. One checker, shared by the unit and lab tests."""

import re

LONGEST_SENTENCE = 300
REPRS = {
    "a bare None": re.compile(r"\bNone\b"),
    "a Python bool": re.compile(r"(?<![\w-])(True|False)\b"),
    "a quoted list": re.compile(r"\[\s*['\"]|\[\]"),
    "a dict": re.compile(r"\{\s*['\"]|\{\}"),
}
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)  # a command or a file's text is quoted, not prose


def sentences(text):
    """The text's sentences: table cells and lines split at '. ', '; ' and '? ' (a clause list reads as sentences)."""
    for line in CODE.sub("", text).splitlines():
        for cell in line.split("|"):
            yield from (part.strip() for part in re.split(r"(?<=[.;?!])\s+", cell) if part.strip())


def prose_problems(text):
    """Each place the text is not prose for a person, named with what was found."""
    problems = []
    plain = CODE.sub("", text)
    for what, pattern in REPRS.items():
        problems += [f"{what}: ...{plain[max(0, m.start() - 60):m.end() + 40]}..." for m in pattern.finditer(plain)]
    problems += [f"a sentence of {len(s)} characters: {s[:120]}..." for s in sentences(text)
                 if len(s) > LONGEST_SENTENCE]
    return problems
