#!/usr/bin/python
"""Ansible module: prove from the kernel and systemd which process serves on the engine's port."""

DOCUMENTATION = r"""
---
module: port_owner
short_description: Prove that the process listening on the engine's port is the unit's own
description:
  - Reads the listening sockets on C(port) (or C(base_url)'s port) from /proc/net/tcp and tcp6, the processes
    holding them, and each one's control group; compares with systemd's ControlGroup of C(unit).
  - A listener outside the unit's control group is foreign - the answer on the port is not the unit's - and is
    named with its pid, its command (values redacted by the allow-list), its cgroup and the next step.
  - A container runtime's port forwarder (docker-proxy, rootlessport, conmon, pasta, slirp4netns) on the port is
    not foreign, but the container behind it is not judged by the port (said in C(reason), C(judged=false)).
  - Read-only; supports check mode.
options:
  unit:
    description: The systemd unit that should serve.
    type: str
    required: true
  port:
    description: The engine's TCP port.
    type: int
  base_url:
    description: The engine's URL, read for its port when C(port) is not given.
    type: str
  refuse_foreign:
    description: >-
      Fail when a listener on the port is foreign to the unit, naming it and the next step. Nothing listening in the
      host's namespace is returned, not refused (a container's port can be forwarded by the kernel).
    type: bool
    default: true
author: serving-rollout
"""

EXAMPLES = r"""
- name: Prove the original serves on its own port
  port_owner:
    unit: sglang.service
    base_url: http://127.0.0.1:30000
"""

RETURN = r"""
owner:
  description: The verdict on who serves.
  returned: always
  type: dict
  contains:
    serving:
      description: A listener is in the unit's control group and none is foreign.
      type: bool
    owners:
      description: Listeners of the unit (pid, command redacted, program, cgroup).
      type: list
      elements: dict
    foreign:
      description: Listeners outside the unit's control group.
      type: list
      elements: dict
    reason:
      description: Why the unit does not serve, with the next step (or a note when not judged).
      type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host_commands import runner
from ansible.module_utils.port_owner import port_of, who_serves


def main():
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str", "required": True},
            "port": {"type": "int"},
            "base_url": {"type": "str"},
            "refuse_foreign": {"type": "bool", "default": True},
        },
        required_one_of=[("port", "base_url")],
        supports_check_mode=True,
    )
    p = module.params
    port = p["port"] or port_of(p["base_url"])
    owner = who_serves(runner(module), p["unit"], port)
    if p["refuse_foreign"] and owner["foreign"]:
        module.fail_json(msg=owner["reason"], owner=owner)
    module.exit_json(changed=False, owner=owner)


if __name__ == "__main__":
    main()
