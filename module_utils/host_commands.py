"""How a module runs a command on the host: the binary found on the host's PATH (Ansible's get_bin_path,
required: a missing one fails the task naming it) and its output in the C locale (LC_ALL=C), so what a parser
reads is the output it was written against, whatever the host's language. Its words reach the command
untouched: AnsibleModule.run_command expands `$VAR` and `~` in list arguments by default, which would hand
systemd-run the module's own PATH for a unit's `Environment="PATH=/usr/local/cuda/bin:$PATH"`. Logic in
module_utils takes the runner as its `run` argument and never sees the module."""

import os


def host_run(module, argv, **kwargs):
    """module.run_command with argv[0] resolved on the host's PATH and LC_ALL=C: (rc, stdout, stderr)."""
    binary = argv[0] if os.path.isabs(argv[0]) else module.get_bin_path(argv[0], required=True)
    env = {"LC_ALL": "C", **kwargs.pop("environ_update", {})}
    kwargs.setdefault("expand_user_and_vars", False)
    return module.run_command([binary, *argv[1:]], environ_update=env, **kwargs)


def runner(module):
    """host_run bound to one module: the `run` that module_utils functions take."""
    return lambda argv, **kwargs: host_run(module, argv, **kwargs)
