"""The one way a test runs a module of library/ in-process, as AnsiballZ runs it: its arguments patched in
(check mode too), the commands it runs on the host answered by a scripted runner where the test gives one, and its
exit_json or fail_json document returned. ScriptedCommands is a TEST DOUBLE of the host's commands (each argv
recorded); without one the module's commands run for real here, through module_utils/host_commands.py."""

import importlib.util
import json
from pathlib import Path

import pytest
from ansible.module_utils import basic
from ansible.module_utils.common.text.converters import to_bytes

from serving_rollout.module_utils import host_commands

LIBRARY = Path(__file__).resolve().parent.parent / "library"


def modules():
    """The names of library/'s modules: those that run on a host (an action's documentation exits if run)."""
    return sorted(p.stem for p in LIBRARY.glob("*.py") if "AnsibleModule(" in p.read_text())


ANY = object()  # a word of a scripted prefix that matches any word


class Clock:  # TEST DOUBLE of time: a monotonic clock that sleep() moves, never the machine's
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


class ScriptedCommands:  # TEST DOUBLE of the host's commands
    """Answers host_run by the first (argv prefix, (rc, out, err)) whose prefix the command starts with (the
    binary as given, before the host's PATH would resolve it; ANY matches any word); an unscripted command
    answers rc 127."""

    def __init__(self, answers=()):
        self.answers, self.calls = list(answers), []

    def __call__(self, module, argv, **kwargs):
        self.calls.append(list(argv))
        return next((answer for prefix, answer in self.answers if len(argv) >= len(prefix)
                     and all(want is ANY or want == got for want, got in zip(prefix, argv, strict=False))),
                    (127, "", f"not scripted: {argv[0]}"))


def load(name):
    spec = importlib.util.spec_from_file_location(f"library_{name}", LIBRARY / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_module(name, args, monkeypatch, capsys, commands=None, check_mode=False):
    """library/<name>.py's main with `args`: its result document (failed and msg where it failed)."""
    loaded = load(name)
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", to_bytes(json.dumps(
        {"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": check_mode}})))
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy", raising=False)  # what AnsiballZ sets before main
    if commands is not None:
        monkeypatch.setattr(host_commands, "host_run", commands)
        if hasattr(loaded, "host_run"):
            monkeypatch.setattr(loaded, "host_run", commands)
    capsys.readouterr()
    with pytest.raises(SystemExit):
        loaded.main()
    return json.loads(capsys.readouterr().out)
