"""How a module runs a command on the host: the binary found on the host's PATH (Ansible's get_bin_path,
required: a missing one fails the task naming it) and its output in the C locale (LC_ALL=C), so what a parser
reads is the output it was written against, whatever the host's language. Its words reach the command
untouched: AnsibleModule.run_command expands `$VAR` and `~` in list arguments by default, which would hand
systemd-run the module's own PATH for a unit's `Environment="PATH=/usr/local/cuda/bin:$PATH"`. Logic in
module_utils takes the runner as its `run` argument and never sees the module. A process that must run beside
others (the peer-path check's ranks) is started here too (start_process), so that no other file of module_utils
starts one."""

import os
import shutil
import subprocess

TimeoutExpired = subprocess.TimeoutExpired


class ModuleFailure(Exception):
    """A step's failure for its module to report (fail_json): the message, and what was read until then (detail)."""

    def __init__(self, message, **detail):
        super().__init__(message)
        self.detail = detail


def exit_with(module, step, *args):
    """A thin module's end: exit_json with step(*args)'s result, or fail_json with its ModuleFailure's message and
    detail."""
    try:
        result = step(*args)
    except ModuleFailure as exc:
        module.fail_json(msg=str(exc), **exc.detail)
    module.exit_json(**result)


def host_run(module, argv, **kwargs):
    """module.run_command with argv[0] resolved on the host's PATH and LC_ALL=C: (rc, stdout, stderr)."""
    binary = argv[0] if os.path.isabs(argv[0]) else module.get_bin_path(argv[0], required=True)
    env = {"LC_ALL": "C", **kwargs.pop("environ_update", {})}
    kwargs.setdefault("expand_user_and_vars", False)
    return module.run_command([binary, *argv[1:]], environ_update=env, **kwargs)


def runner(module):
    """host_run bound to one module: the `run` that module_utils functions take."""
    return lambda argv, **kwargs: host_run(module, argv, **kwargs)


def start_process(argv, env=None, which=shutil.which):
    """A process started in its own session (a group its caller can kill whole), argv[0] resolved with `which`
    (the module's get_bin_path on a host), LC_ALL=C, stdout and stderr together as text: the Popen."""
    binary = argv[0] if os.path.isabs(argv[0]) else which(argv[0])
    if not binary:
        raise FileNotFoundError(f"{argv[0]}: not found on PATH")
    return subprocess.Popen([binary, *argv[1:]], env={**(os.environ if env is None else env), "LC_ALL": "C"},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, text=True,
                            errors="replace")


def starter(module):
    """start_process bound to one module (a binary missing on the host fails the task naming it)."""
    return lambda argv, env=None: start_process(argv, env, lambda name: module.get_bin_path(name, required=True))
