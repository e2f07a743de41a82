"""module_utils/host_commands.py in-process, with a real AnsibleModule: the binary resolved on the host's PATH
(a missing one fails naming it) and LC_ALL=C for every command, so parsed output is the C locale's."""

import json
import sys

import pytest
from ansible.module_utils import basic
from ansible.module_utils.common.text.converters import to_bytes

from serving_rollout.module_utils.host_commands import host_run, runner


@pytest.fixture
def module(monkeypatch):
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", to_bytes(json.dumps({"ANSIBLE_MODULE_ARGS": {}})))
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy", raising=False)  # what AnsiballZ sets before main
    return basic.AnsibleModule(argument_spec={})


def test_a_command_runs_in_the_c_locale_from_the_hosts_path(module, monkeypatch):
    monkeypatch.setenv("LC_ALL", "de_DE.UTF-8")
    rc, out, _ = host_run(module, ["env"])
    assert rc == 0 and "LC_ALL=C" in out.splitlines()
    rc, out, _ = runner(module)([sys.executable, "-c", "import os; print(os.environ['LC_ALL'])"])
    assert (rc, out.strip()) == (0, "C")  # an absolute path runs as given


def test_a_commands_words_reach_it_untouched(module, monkeypatch):
    """A unit's `$PATH`, `${HOME}`, `~` and `%%` are systemd's to read, never the module's to expand."""
    monkeypatch.setenv("HOME", "/root-of-the-module")
    words = ["PATH=/usr/local/cuda/bin:$PATH", "${HOME}/x", "~", "100%%"]
    rc, out, _ = host_run(module, [sys.executable, "-c", "import sys; print(chr(10).join(sys.argv[1:]))", *words])
    assert rc == 0 and out.splitlines() == words, out


def test_a_missing_binary_fails_the_task_naming_it(module, capsys):
    with pytest.raises(SystemExit):
        host_run(module, ["no-such-systemctl-here", "show"])
    failed = json.loads(capsys.readouterr().out)
    assert failed["failed"] and "no-such-systemctl-here" in failed["msg"]


def test_a_module_given_no_engine_fails_naming_what_it_needs(module, capsys):
    from serving_rollout.module_utils.engine_client import connect_module

    module.params.update({"base_url": None, "model": None, "api_key_var": None, "env_files": [],
                          "connection": {"model": "tiny"}})
    with pytest.raises(SystemExit):
        connect_module(module)
    failed = json.loads(capsys.readouterr().out)
    assert failed["msg"] == "no engine to talk to: base_url (or connection.base_url) is required, got none"
    module.params["connection"] = {"base_url": "http://127.0.0.1:30000", "model": "tiny", "api_key_var": ""}
    connect_module(module)
    assert (module.params["base_url"], module.params["model"], module.params["api_key_var"]) == \
        ("http://127.0.0.1:30000", "tiny", None)
