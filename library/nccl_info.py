#!/usr/bin/python
"""Ansible module: NCCL version a process would load, in an image, and what a NCCL log says."""

DOCUMENTATION = r"""
---
module: nccl_info
short_description: Read the NCCL version a process loads and parse NCCL_DEBUG=INFO logs
description:
  - Calls ncclGetVersion through ctypes on C(library) and decodes the code (old and new forms).
  - With C(runtime) and C(image), asks the serving image which NCCL its python loads
    (a throw-away container with no network; nothing on the host changes).
  - With C(log_path) or C(log_text), parses the NCCL version line and the per-channel
    transport per direction, summarized per rank pair.
  - Read-only; supports check mode. A missing library is a named reason, not a failure.
options:
  library:
    description: Library name or path to load.
    type: str
    default: libnccl.so.2
  runtime:
    description: Container runtime for I(image) (docker or podman).
    type: str
    choices: [docker, podman]
  image:
    description: Serving image, pinned by digest.
    type: str
  log_path:
    description: A file holding NCCL_DEBUG=INFO output to parse.
    type: path
  log_text:
    description: NCCL_DEBUG=INFO output to parse.
    type: str
author: serving-rollout
"""

EXAMPLES = r"""
- name: Version of the host's libnccl
  nccl_info:

- name: Transport of the running engine, from its journal
  nccl_info:
    log_text: "{{ journal.stdout }}"
"""

RETURN = r"""
nccl:
  description: The NCCL observation.
  returned: always
  type: dict
  contains:
    library:
      description: Loaded library result (found, version, code, path, reason).
      type: dict
    image:
      description: Per library path in the image, its version or error.
      type: dict
    log:
      description: Parsed log (versions, channels, pairs, summary, warnings).
      type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host_commands import runner
from ansible.module_utils.nccl_facts import (
    image_versions,
    loaded_version,
    p2p_in_effect,
    parse_log,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "library": {"type": "str", "default": "libnccl.so.2"},
            "runtime": {"type": "str", "choices": ["docker", "podman"]},
            "image": {"type": "str"},
            "log_path": {"type": "path"},
            "log_text": {"type": "str"},
        },
        required_together=[("runtime", "image")],
        mutually_exclusive=[("log_path", "log_text")],
        supports_check_mode=True,
    )
    params = module.params
    result = {"library": loaded_version(params["library"])}
    if params["image"]:
        result["image"] = image_versions(runner(module), params["runtime"], params["image"])
    text = params["log_text"]
    if params["log_path"]:
        try:
            with open(params["log_path"], errors="replace") as handle:
                text = handle.read()
        except OSError as exc:
            result["log"] = {"reason": f"cannot read log_path {params['log_path']}: {exc.strerror}"}
    if text is not None:
        result["log"] = parse_log(text)
        result["log"]["p2p_in_effect"] = p2p_in_effect(result["log"])
    module.exit_json(changed=False, nccl=result)


if __name__ == "__main__":
    main()
