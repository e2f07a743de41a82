#!/usr/bin/python
"""Ansible module: a container as its runtime runs it, and the one-control proof between two."""

DOCUMENTATION = r"""
---
module: container_reading
short_description: Read a running container as docker/podman runs it; prove a candidate's differs in one control
description:
  - Runs C(<runtime> inspect <name>) and returns what decides the engine's behaviour - image (digest and id),
    the environment the container got (its --env-file files, -e, the image's ENV, the runtime's defaults),
    entrypoint and command, user, working directory, mounts, every HostConfig setting (shm size, IPC, network,
    devices, limits), labels - without the container's identity (id, name, times, state, storage paths,
    hostname, PODMAN_SYSTEMD_UNIT, the raw create command).
  - Values of variables and labels off the allow-list, and command words off the flag allow-list, are HMAC
    digests under C(key), so two readings made with the same key compare and no secret is returned.
  - With C(compare_with) (an earlier reading of the original's container, same key) and C(change), fails
    naming every other difference unless the two differ in exactly that control.
  - Changes nothing; supports check mode (it reads in check mode too).
options:
  runtime:
    description: The container runtime.
    type: str
    choices: [docker, podman]
    required: true
  name:
    description: The container's name.
    type: str
    required: true
  key:
    description: The run's digest key (any secret string; the same for both readings).
    type: str
    required: true
    no_log: true
  compare_with:
    description: The original container's reading (this module's C(reading)) to prove against.
    type: dict
  change:
    description: The one control (kind env, arg, speculative or image; name; value); needed with C(compare_with).
    type: dict
author: serving-rollout
"""

EXAMPLES = r"""
- name: Read the original's container before it stops
  container_reading:
    runtime: podman
    name: sglang
    key: "{{ run_token }}"
  register: original_container

- name: Prove the candidate's container differs in the one control
  container_reading:
    runtime: podman
    name: sglang-candidate
    key: "{{ run_token }}"
    compare_with: "{{ original_container.reading }}"
    change: {kind: env, name: NCCL_P2P_DISABLE, value: "0"}
"""

RETURN = r"""
reading:
  description: image, image_id, env, labels, entrypoint, cmd, user, workdir, stop_signal, mounts, host (values allow-listed or digests).
  type: dict
  sample: {image: 'vllm/vllm-openai@sha256:ab...', env: {NCCL_P2P_DISABLE: '1'}}
  returned: always
proof:
  description: >-
    ok, control, seen, unexplained (every other difference), with compare_with. For an image change
    the image, its id and the variables either image's own ENV sets are the control's.
  type: dict
  sample: {ok: true, control: env NCCL_P2P_DISABLE, unexplained: []}
  returned: with compare_with
"""

import json

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.container_truth import proof, view
from ansible.module_utils.host_commands import host_run
from ansible.module_utils.unit_oracle import proof_reason


def main():
    module = AnsibleModule(
        argument_spec={
            "runtime": {"type": "str", "choices": ["docker", "podman"], "required": True},
            "name": {"type": "str", "required": True},
            "key": {"type": "str", "required": True, "no_log": True},
            "compare_with": {"type": "dict"},
            "change": {"type": "dict"},
        },
        required_together=[["compare_with", "change"]],
        supports_check_mode=True,
    )
    p = module.params
    rc, out, err = host_run(module, [p["runtime"], "inspect", "--type", "container", p["name"]])
    if rc != 0:
        module.fail_json(msg=f"{p['runtime']} cannot inspect container {p['name']!r}: {err.strip()[-300:]}")
    found = json.loads(out or "[]")
    if len(found) != 1:
        module.fail_json(msg=f"{p['runtime']} inspect {p['name']!r} found {len(found)} containers")
    reading = view(found[0], p["key"].encode())
    if p["compare_with"] is None:
        module.exit_json(changed=False, reading=reading)
    image_env = None
    if p["change"].get("kind") == "image":
        # An image upgrade brings the new image's own ENV (its engine, NCCL, CUDA versions): those names
        # differ because the image does, which is the control. Read from both images, never from the unit.
        image_env = set()
        for image in (p["compare_with"].get("image_id"), found[0].get("Image")):
            rc, out, err = host_run(module, [p["runtime"], "image", "inspect", "--format", "{{json .Config.Env}}",
                                               image or ""])
            if rc == 0 and out.strip():
                image_env |= {e.split("=", 1)[0] for e in json.loads(out) or []}
    result = proof(p["compare_with"], reading, p["change"], image_env)
    if not result["ok"]:
        module.fail_json(msg=f"container {p['name']} is not the original's with one control changed, as {p['runtime']} "
                             f"runs both ({result['control']}): {proof_reason(result, 'the runtime')}",
                         reading=reading, proof=result)
    module.exit_json(changed=False, reading=reading, proof=result)


if __name__ == "__main__":
    main()
