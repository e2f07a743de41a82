#!/usr/bin/python
"""Ansible module: prove the GPU peer path with bounded, byte-checked copies and collectives."""

DOCUMENTATION = r"""
---
module: p2p_check
short_description: Bounded, byte-checked GPU peer copies and an NCCL all-reduce A/B
description:
  - For every ordered GPU pair - can-access-peer, an in-process peer copy and a copy across
    two processes through CUDA IPC, each verified byte for byte on the receiver against a
    pattern that reached it by host copy; uni- and bi-directional bandwidth; latency.
  - An NCCL all-reduce over the selected GPUs at each size, its sum checked, median latency
    and bus bandwidth, run under two environment sets in a bracketed order (ABA), with the
    transport NCCL reported in its NCCL_DEBUG=INFO log.
  - Every worker runs in its own process group under a per-test time-out and a total
    budget; an overrun kills the group and is reported as C(hung); wrong bytes as C(corrupt).
  - Refuses when the GPUs hold compute processes, unless C(force).
  - Changes no host configuration. In check mode nothing is run.
options:
  python:
    description: Interpreter with torch (and nvidia-ml-py for the preflight) on the host.
    type: str
    default: python3
  runtime:
    description: Run the worker in the serving image through this runtime instead.
    type: str
    choices: [docker, podman]
  image:
    description: Serving image (pinned by digest) whose python runs the worker.
    type: str
  runtime_args:
    description: Extra arguments for the runtime's run, e.g. C(--gpus all).
    type: list
    elements: str
    default: ["--gpus", "all"]
  gpus:
    description: GPU indices to check; empty means every GPU.
    type: list
    elements: int
    default: []
  copy_bytes:
    description: Bytes per in-process peer copy.
    type: int
    default: 268435456
  ipc_bytes:
    description: Bytes per cross-process (CUDA IPC) copy.
    type: int
    default: 67108864
  copy_iters:
    description: Copies per bandwidth sample.
    type: int
    default: 20
  allreduce_sizes:
    description: All-reduce message sizes in bytes (bf16); 43008 is a [3,7168] bf16 tensor.
    type: list
    elements: int
    default: [43008, 33554432]
  allreduce_method:
    description: >-
      C(graph) - NCCL called directly and captured in a CUDA graph, timed with CUDA events (no host
      launch cost; what a CUDA-graph decode step sees, and what nccl-tests reports); C(eager) - a
      Python loop of torch.distributed.all_reduce (bound by host launch cost at decode sizes).
    type: str
    choices: [graph, eager]
    default: graph
  nccl_tests:
    description: >-
      NVIDIA nccl-tests' all_reduce_perf as a cross-check beside the probe, run with each arm's
      environment at each size - C(auto) finds it on PATH, a path names it, empty skips it.
    type: str
    default: auto
  ipc_pairs:
    description: >-
      Ordered pairs that also get the cross-process (CUDA IPC) copy - C(all), C(ring) (each GPU
      to its two ring neighbours, both directions), or C(auto) (all up to 4 GPUs, ring above);
      in-process copies always cover every ordered pair.
    type: str
    choices: [all, ring, auto]
    default: auto
  model:
    description: >-
      The served model (a local path or a Hugging Face id): its config.json, found at the path or
      in the Hugging Face cache of C(hf_homes), gives the decode all-reduce size (tokens x hidden x
      dtype), which is added to C(allreduce_sizes), and the all-reduces per step (layers x 2).
    type: str
  model_revision:
    description: The model revision (the HF cache snapshot to read).
    type: str
  model_config:
    description: An explicit config.json path on the host (wins over C(model)).
    type: path
  hf_homes:
    description: Hugging Face homes to search (the service user's, e.g. /root/.cache/huggingface).
    type: list
    elements: path
    default: []
  decode_shape:
    description: Fallback when no config.json is found - layers and hidden_size (e.g. from the plan).
    type: dict
  tokens_per_step:
    description: Tokens per decode step - 1, or k+1 for a speculative verify of k drafts.
    type: int
    default: 1
  accepted_per_step:
    description: Output tokens per step (mean accepted length with speculation); default tokens_per_step.
    type: float
  allreduce_iters:
    description: All-reduces per timing sample.
    type: int
    default: 100
  allreduce_reps:
    description: Timing samples per size.
    type: int
    default: 5
  env_sets:
    description: Two named environment sets for the collective A/B (A is the first).
    type: dict
    default: {no_p2p: {NCCL_P2P_DISABLE: "1"}, p2p: {NCCL_P2P_DISABLE: "0"}}
  bracket:
    description: Order of the env sets, letters A and B, e.g. ABA or ABBA.
    type: str
    default: ABA
  base_env:
    description: Environment for every worker (multicast off by default).
    type: dict
    default: {NCCL_NVLS_ENABLE: "0", TORCH_SYMM_MEM_DISABLE_MULTICAST: "1", NVSHMEM_DISABLE_NVLS: "1"}
  test_timeout_s:
    description: Hard limit of one test (one worker launch); overrun kills its process group.
    type: int
    default: 120
  budget_s:
    description: Total time budget; tests that do not fit are reported as skipped.
    type: int
    default: 600
  max_gpu_mem_mib:
    description: Cap of the worker's GPU memory per GPU.
    type: int
    default: 4096
  nvlink_gbps_per_link:
    description: NVLink rate per link and direction, for the fraction of link peak.
    type: float
    default: 26.5625
  force:
    description: Run even when the GPUs hold compute processes.
    type: bool
    default: false
author: serving-rollout
"""

EXAMPLES = r"""
- name: Prove the peer path of GPUs 0 and 1 with the host's torch venv
  p2p_check:
    python: /opt/torch/.venv/bin/python3
    gpus: [0, 1]
  register: peer_path
"""

RETURN = r"""
p2p:
  description: The peer-path observation.
  returned: always
  type: dict
  contains:
    verdict:
      description: ok, corrupt, hung, error, no_peer_access or skipped (the worst seen).
      type: str
    pairs:
      description: Per ordered pair copies, bandwidth, latency, link peak and verdict.
      type: list
      elements: dict
    allreduce:
      description: Bracketed runs, per-size comparison and the transport NCCL used.
      type: dict
    elapsed_s:
      description: Wall time of the whole check.
      type: float
"""

from types import SimpleNamespace

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host_commands import ModuleFailure, starter
from ansible.module_utils.p2p_run import run_check, validate


def main():
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "str", "default": "python3"},
            "runtime": {"type": "str", "choices": ["docker", "podman"]},
            "image": {"type": "str"},
            "runtime_args": {"type": "list", "elements": "str", "default": ["--gpus", "all"]},
            "gpus": {"type": "list", "elements": "int", "default": []},
            "copy_bytes": {"type": "int", "default": 256 * 2**20},
            "ipc_bytes": {"type": "int", "default": 64 * 2**20},
            "copy_iters": {"type": "int", "default": 20},
            "allreduce_sizes": {"type": "list", "elements": "int", "default": [43008, 32 * 2**20]},
            "allreduce_iters": {"type": "int", "default": 100},
            "allreduce_method": {"type": "str", "choices": ["graph", "eager"], "default": "graph"},
            "nccl_tests": {"type": "str", "default": "auto"},
            "ipc_pairs": {"type": "str", "choices": ["all", "ring", "auto"], "default": "auto"},
            "model": {"type": "str"},
            "model_revision": {"type": "str"},
            "model_config": {"type": "path"},
            "hf_homes": {"type": "list", "elements": "path", "default": []},
            "decode_shape": {"type": "dict"},
            "tokens_per_step": {"type": "int", "default": 1},
            "accepted_per_step": {"type": "float"},
            "allreduce_reps": {"type": "int", "default": 5},
            "env_sets": {"type": "dict", "default": {"no_p2p": {"NCCL_P2P_DISABLE": "1"},
                                                     "p2p": {"NCCL_P2P_DISABLE": "0"}}},
            "bracket": {"type": "str", "default": "ABA"},
            "base_env": {"type": "dict", "default": {"NCCL_NVLS_ENABLE": "0",
                                                     "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                                                     "NVSHMEM_DISABLE_NVLS": "1"}},
            "test_timeout_s": {"type": "int", "default": 120},
            "budget_s": {"type": "int", "default": 600},
            "max_gpu_mem_mib": {"type": "int", "default": 4096},
            "nvlink_gbps_per_link": {"type": "float", "default": 26.5625},
            "force": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    try:
        validate(module.params)
        if module.check_mode:
            module.exit_json(changed=False, p2p={"verdict": "skipped", "reason": "check mode: nothing run"})
        host = SimpleNamespace(start=starter(module), which=module.get_bin_path, tmpdir=module.tmpdir)
        module.exit_json(changed=False, p2p=run_check(host, module.params))
    except ModuleFailure as exc:
        module.fail_json(msg=str(exc), **exc.detail)


if __name__ == "__main__":
    main()
