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

import json
import os
import time

from ansible.module_utils import p2p_worker
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.decode_model import (
    ModelShapeError,
    config_candidates,
    decode_allreduce,
    predict,
    shape_from_config,
)
from ansible.module_utils.host_commands import starter
from ansible.module_utils.nccl_tests import command as nccl_tests_command
from ansible.module_utils.nccl_tests import parse_output as parse_nccl_tests
from ansible.module_utils.nccl_tests import wrong_total
from ansible.module_utils.p2p_orchestrator import (
    Budget,
    bracket_order,
    compare_brackets,
    cross_check,
    free_port,
    ipc_pairs,
    link_peak_gbps,
    ordered_pairs,
    overall_verdict,
    pair_verdict,
    run_processes,
    transport_of,
)


def validate(module):
    p = module.params
    for name in ("copy_bytes", "ipc_bytes", "copy_iters", "allreduce_iters", "allreduce_reps",
                 "test_timeout_s", "budget_s", "max_gpu_mem_mib"):
        if p[name] <= 0:
            module.fail_json(msg=f"{name} must be positive, got {p[name]}")
    if any(g < 0 for g in p["gpus"]) or len(set(p["gpus"])) != len(p["gpus"]):
        module.fail_json(msg=f"gpus must be distinct non-negative indices, got {p['gpus']}")
    if any(s <= 0 or s % 2 for s in p["allreduce_sizes"]):
        module.fail_json(msg=f"allreduce_sizes must be positive even byte counts, got {p['allreduce_sizes']}")
    need_mib = (3 * p["copy_bytes"] + 2 * p["ipc_bytes"] + 2 * max(p["allreduce_sizes"])) / 2**20
    if need_mib > p["max_gpu_mem_mib"]:
        module.fail_json(msg=f"copy_bytes/ipc_bytes/allreduce_sizes need {need_mib:.0f} MiB per GPU, "
                             f"over max_gpu_mem_mib={p['max_gpu_mem_mib']}")
    if len(p["env_sets"]) != 2 or not all(isinstance(v, dict) for v in p["env_sets"].values()):
        module.fail_json(msg=f"env_sets must name exactly two dicts of variables, got {p['env_sets']}")
    try:
        bracket_order(p["bracket"], list(p["env_sets"]))
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if bool(p["runtime"]) != bool(p["image"]):
        module.fail_json(msg="runtime and image go together")
    if p["image"] and "@sha256:" not in p["image"]:
        module.fail_json(msg=f"image must be pinned by digest, got {p['image']}")


def worker_command(params, worker_path, command, args, env):
    """The argv that runs one worker subcommand, on the host or in the serving image."""
    tail = [worker_path, command, json.dumps(args)]
    if not params["runtime"]:
        return [params["python"], *tail]
    workdir = os.path.dirname(worker_path)
    prefix = [params["runtime"], "run", "--rm", "--network=host", "--ipc=host",
              *params["runtime_args"], "-v", f"{workdir}:{workdir}:ro"]
    for key, value in sorted(env.items()):
        if key in params["base_env"] or key.startswith(("NCCL_", "RANK", "WORLD_SIZE", "MASTER_")):
            prefix += ["-e", f"{key}={value}"]
    return [*prefix, "--entrypoint", params["python"], params["image"], *tail]


def decode_sizes(params):
    """The model's shape and its decode all-reduce, from config.json on the host, else the given
    fallback shape; and which source decided (recorded in the result)."""
    def snapshots(base):
        return os.listdir(base) if os.path.isdir(base) else []
    paths = [params["model_config"]] if params["model_config"] else \
        config_candidates(params["model"], params["model_revision"], params["hf_homes"], snapshots)
    tried = []
    for path in paths:
        if not os.path.isfile(path):
            tried.append(path)
            continue
        try:
            with open(path) as handle:
                shape = shape_from_config(json.load(handle), path)
        except (OSError, ValueError) as exc:
            return {"source": "error", "reason": f"{path}: {exc}"}
        return {"source": f"config.json {path}", "shape": shape,
                "call": decode_allreduce(shape, params["tokens_per_step"])}
    if params["decode_shape"]:
        try:
            shape = shape_from_config({"num_hidden_layers": params["decode_shape"].get("layers"),
                                       "hidden_size": params["decode_shape"].get("hidden_size"),
                                       "torch_dtype": params["decode_shape"].get("dtype", "bfloat16")},
                                      "decode_shape")
        except ModelShapeError as exc:
            return {"source": "error", "reason": str(exc)}
        return {"source": "decode_shape (plan or inventory)", "shape": shape, "tried": tried,
                "call": decode_allreduce(shape, params["tokens_per_step"])}
    return {"source": "none", "tried": tried,
            "reason": "no config.json found and no decode_shape given: sizes are the defaults only"}


def run_nccl_tests(module, params, gpus, base_env, budget):
    """all_reduce_perf per arm (bracketed like the probe) and size, parsed; or why not."""
    binary = params["nccl_tests"]
    if not binary:
        return {"status": "skipped", "reason": "nccl_tests is empty"}
    if binary == "auto":
        binary = module.get_bin_path("all_reduce_perf")
        if not binary:
            return {"status": "not found", "reason": "all_reduce_perf is not on PATH"}
    if params["runtime"]:
        return {"status": "skipped", "reason": "the probe runs in the serving image; nccl-tests runs on the host only"}
    runs = []
    visible = ",".join(str(g) for g in gpus)
    for name in bracket_order(params["bracket"], list(params["env_sets"])):
        env = {**base_env, **{k: str(v) for k, v in params["env_sets"][name].items()}, "CUDA_VISIBLE_DEVICES": visible}
        sizes = []
        for size in params["allreduce_sizes"]:
            if budget.exhausted():
                sizes.append({"bytes": size, "status": "skipped"})
                continue
            # Like with like: the graph probe against all_reduce_perf's CUDA-graph mode (-G).
            shape = {"iters": 100, "graph_launches": 10} if params["allreduce_method"] == "graph" else {}
            argv = nccl_tests_command(binary, size, len(gpus), **shape)
            done = run_processes([argv], [env], budget.next_timeout(), start=starter(module))[0]
            parsed = parse_nccl_tests(done["output"])
            row = next((r for r in parsed["rows"] if r["bytes"] == size), None)
            sizes.append({"bytes": size, "status": "ok" if row and done["returncode"] == 0 else done["status"],
                          "time_us": row["out_of_place"]["time_us"] if row else None,
                          "in_place_time_us": row["in_place"]["time_us"] if row else None,
                          "wrong": wrong_total(parsed), "version": parsed["version"],
                          "errors": parsed["errors"] or ([done["output"][-400:]] if not row else [])})
        runs.append({"label": name, "sizes": sizes})
    return {"status": "ok", "binary": binary, "runs": runs}


def preflight_gpus(module, params, pre):
    """The GPUs to test (given, or all the preflight found), refused when fewer than two or busy."""
    preflight = (pre["result"] or {}) if pre["status"] == "ok" else {}
    if pre["status"] != "ok":  # nothing after it can be trusted: refused before any copy or collective
        module.fail_json(msg="refused before any GPU work: the preflight failed: " + pre["output"][-800:])
    if preflight.get("missing"):
        module.fail_json(msg=f"refused before any GPU work: GPU {', '.join(map(str, preflight['missing']))} named in "
                             f"gpus {params['gpus']} is not on this host (NVML counts {preflight.get('count')} "
                             f"GPU{'' if preflight.get('count') == 1 else 's'})", preflight=preflight)
    gpus = params["gpus"] or [g["index"] for g in preflight.get("gpus", [])]
    if len(gpus) < 2:
        module.fail_json(msg=f"refused before any GPU work: {'one GPU' if len(gpus) == 1 else 'no GPU'} "
                             f"({gpus}): no peer pair; the peer path does not apply", preflight=preflight)
    busy = {g["index"]: g["compute_processes"] for g in preflight.get("gpus", [])
            if g.get("compute_processes") and g["index"] in gpus}
    if busy and not params["force"]:
        module.fail_json(msg=f"GPUs hold compute processes {busy}; stop them or set force", busy=busy)
    return preflight, gpus


def pair_rows_of(params, gpus, pairs, preflight, peer):
    """One row per ordered GPU pair: its in-process and IPC copies, verdict and link peak."""
    peer_result = peer["result"] or {}
    in_process = {(r["src"], r["dst"]): r for r in peer_result.get("in_process", [])}
    ipc = {(r["src"], r["dst"]): r for r in peer_result.get("ipc", [])}
    chosen = {tuple(p) for p in ipc_pairs(gpus, params["ipc_pairs"])}
    rows = []
    for src, dst in pairs:
        row = {"src": src, "dst": dst, "in_process": in_process.get((src, dst)), "ipc": ipc.get((src, dst))}
        if row["ipc"] is None and (src, dst) not in ipc and peer["status"] == "ok" and (src, dst) not in chosen:
            row["ipc"] = {"skipped": f"ipc_pairs={params['ipc_pairs']}"}
        row["verdict"] = peer["status"] if peer["status"] in ("hung", "skipped") else \
            pair_verdict(row["in_process"], row["ipc"])
        link = link_peak_gbps(src, dst, preflight.get("gpus", []), params["nvlink_gbps_per_link"])
        row["link"] = link
        if link and row["in_process"]:
            row["uni_fraction_of_peak"] = row["in_process"]["uni_gbps"] / link["peak_gbps"]
            row["bidir_fraction_of_peak"] = row["in_process"]["bidir_gbps"] / (2 * link["peak_gbps"])
        rows.append(row)
    return rows


def allreduce_run(params, name, gpus, base_env, launch):
    """One bracket arm: every rank's all-reduce under the arm's env set, with its transport and errors."""
    port = free_port()
    envs = [{**base_env, **{k: str(v) for k, v in params["env_sets"][name].items()},
             "NCCL_DEBUG": "INFO", "RANK": str(rank), "WORLD_SIZE": str(len(gpus)),
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)} for rank in range(len(gpus))]
    worker = "allreduce_graph" if params["allreduce_method"] == "graph" else "allreduce"
    ranks = launch(worker, {"gpus": gpus, "sizes": params["allreduce_sizes"], "iters": params["allreduce_iters"],
                            "reps": params["allreduce_reps"], "max_gpu_mem_mib": params["max_gpu_mem_mib"]}, envs)
    statuses = {r["status"] for r in ranks}
    status = "hung" if "hung" in statuses else ("ok" if statuses == {"ok"} else "error")
    rank0 = ranks[0]["result"] or {}
    return {"label": name, "env": params["env_sets"][name], "status": status,
            "seconds": ranks[0]["seconds"], "sizes": rank0.get("sizes", []),
            "transport": transport_of([r["output"] for r in ranks]),
            "errors": [r["output"][-600:] for r in ranks if r["status"] != "ok"]}


def decode_prediction(decode, params, comparison):
    """The decode model's predicted effect from the two arms' measured all-reduce times, or why there is none."""
    names = list(params["env_sets"])
    measured = {name: {c["bytes"]: c[name]["median_us"] for c in comparison if c.get(name, {}).get("median_us")}
                for name in names}
    try:
        decode["prediction"] = predict(decode["shape"], measured[names[0]], measured[names[1]],
                                       params["tokens_per_step"], accepted_per_step=params["accepted_per_step"])
        decode["arms"] = {"baseline": names[0], "candidate": names[1]}
    except (ModelShapeError, KeyError) as exc:
        decode["prediction"] = None
        decode["reason"] = f"no prediction: {exc}"


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
    validate(module)
    if module.check_mode:
        module.exit_json(changed=False, p2p={"verdict": "skipped", "reason": "check mode: nothing run"})
    params = module.params
    started = time.monotonic()
    budget = Budget(params["budget_s"], params["test_timeout_s"])
    worker_path = os.path.join(module.tmpdir, "p2p_worker.py")
    with open(worker_path, "w") as handle:
        handle.write(p2p_worker.__loader__.get_source(p2p_worker.__name__))
    base_env = {**os.environ, **{k: str(v) for k, v in params["base_env"].items()}}

    def launch(command, args, envs):
        return run_processes([worker_command(params, worker_path, command, args, env) for env in envs],
                             envs, budget.next_timeout(), start=starter(module))

    pre = launch("preflight", {"gpus": params["gpus"]}, [base_env])[0]
    preflight, gpus = preflight_gpus(module, params, pre)
    decode = decode_sizes(params)
    if decode.get("call") and decode["call"]["bytes"] not in params["allreduce_sizes"]:
        params["allreduce_sizes"] = sorted(params["allreduce_sizes"] + [decode["call"]["bytes"]])

    pairs = ordered_pairs(gpus)
    peer = {"status": "skipped", "result": None, "output": ""}
    if not budget.exhausted():
        peer = launch("peer", {"gpus": gpus, "pairs": pairs, "ipc_pairs": ipc_pairs(gpus, params["ipc_pairs"]),
                               "bytes": params["copy_bytes"],
                               "iters": params["copy_iters"], "ipc_bytes": params["ipc_bytes"],
                               "max_gpu_mem_mib": params["max_gpu_mem_mib"], "seed": 7}, [base_env])[0]
    peer_result = peer["result"] or {}
    pair_rows = pair_rows_of(params, gpus, pairs, preflight, peer)
    runs = [{"label": name, "status": "skipped", "sizes": []} if budget.exhausted()
            else allreduce_run(params, name, gpus, base_env, launch)
            for name in bracket_order(params["bracket"], list(params["env_sets"]))]
    reference = run_nccl_tests(module, params, gpus, base_env, budget)

    result = {
        "gpus": gpus,
        "preflight": preflight,
        "pairs": pair_rows,
        "peer_status": peer["status"],
        "peer_timing": {"phase_s": peer.get("seconds"), "in_process_s": peer_result.get("in_process_seconds"),
                        "ipc_s": peer_result.get("ipc_seconds"), "ipc_policy": params["ipc_pairs"]},
        "peer_errors": peer["output"][-800:] if peer["status"] != "ok" else None,
        "allreduce": {"order": params["bracket"], "env_sets": params["env_sets"], "runs": runs,
                      "method": params["allreduce_method"],
                      "comparison": compare_brackets(runs, params["allreduce_sizes"])},
        "nccl_tests": reference,
        "cross_check": cross_check(runs, reference["runs"]) if reference.get("runs") else None,
        "elapsed_s": time.monotonic() - started,
    }
    result["verdict"] = overall_verdict(pair_rows, runs)
    if decode.get("shape"):
        decode_prediction(decode, params, result["allreduce"]["comparison"])
    result["decode"] = decode
    module.exit_json(changed=False, p2p=result)


if __name__ == "__main__":
    main()
