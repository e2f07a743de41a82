"""p2p_check's run on the host: its workers started through host_commands (LC_ALL=C, the binary found on the
host), refusals before any GPU work, and the result per pair and arm. library/p2p_check.py is its wrapper."""

import json
import os
import time

from . import p2p_worker
from .decode_model import (
    ModelShapeError,
    config_candidates,
    decode_allreduce,
    predict,
    shape_from_config,
)
from .host_commands import ModuleFailure
from .nccl_tests import command as nccl_tests_command
from .nccl_tests import parse_output as parse_nccl_tests
from .nccl_tests import wrong_total
from .p2p_orchestrator import (
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


def validate(p):
    """The arguments refused, naming the bad value, before anything runs on a GPU."""
    for name in ("copy_bytes", "ipc_bytes", "copy_iters", "allreduce_iters", "allreduce_reps",
                 "test_timeout_s", "budget_s", "max_gpu_mem_mib"):
        if p[name] <= 0:
            raise ModuleFailure(f"{name} must be positive, got {p[name]}")
    if any(g < 0 for g in p["gpus"]) or len(set(p["gpus"])) != len(p["gpus"]):
        raise ModuleFailure(f"gpus must be distinct non-negative indices, got {p['gpus']}")
    if any(s <= 0 or s % 2 for s in p["allreduce_sizes"]):
        raise ModuleFailure(f"allreduce_sizes must be positive even byte counts, got {p['allreduce_sizes']}")
    need_mib = (3 * p["copy_bytes"] + 2 * p["ipc_bytes"] + 2 * max(p["allreduce_sizes"])) / 2**20
    if need_mib > p["max_gpu_mem_mib"]:
        raise ModuleFailure(f"copy_bytes/ipc_bytes/allreduce_sizes need {need_mib:.0f} MiB per GPU, "
                             f"over max_gpu_mem_mib={p['max_gpu_mem_mib']}")
    if len(p["env_sets"]) != 2 or not all(isinstance(v, dict) for v in p["env_sets"].values()):
        raise ModuleFailure(f"env_sets must name exactly two dicts of variables, got {p['env_sets']}")
    try:
        bracket_order(p["bracket"], list(p["env_sets"]))
    except ValueError as exc:
        raise ModuleFailure(str(exc)) from exc
    if bool(p["runtime"]) != bool(p["image"]):
        raise ModuleFailure("runtime and image go together")
    if p["image"] and "@sha256:" not in p["image"]:
        raise ModuleFailure(f"image must be pinned by digest, got {p['image']}")


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


def run_nccl_tests(host, params, gpus, base_env, budget):
    """all_reduce_perf per arm (bracketed like the probe) and size, parsed; or why not."""
    binary = params["nccl_tests"]
    if not binary:
        return {"status": "skipped", "reason": "nccl_tests is empty"}
    if binary == "auto":
        binary = host.which("all_reduce_perf")
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
            done = run_processes([argv], [env], budget.next_timeout(), start=host.start)[0]
            parsed = parse_nccl_tests(done["output"])
            row = next((r for r in parsed["rows"] if r["bytes"] == size), None)
            sizes.append({"bytes": size, "status": "ok" if row and done["returncode"] == 0 else done["status"],
                          "time_us": row["out_of_place"]["time_us"] if row else None,
                          "in_place_time_us": row["in_place"]["time_us"] if row else None,
                          "wrong": wrong_total(parsed), "version": parsed["version"],
                          "errors": parsed["errors"] or ([done["output"][-400:]] if not row else [])})
        runs.append({"label": name, "sizes": sizes})
    return {"status": "ok", "binary": binary, "runs": runs}


def preflight_gpus(params, pre):
    """The GPUs to test (given, or all the preflight found), refused when fewer than two or busy."""
    preflight = (pre["result"] or {}) if pre["status"] == "ok" else {}
    if pre["status"] != "ok":  # nothing after it can be trusted: refused before any copy or collective
        raise ModuleFailure("refused before any GPU work: the preflight failed: " + pre["output"][-800:])
    if preflight.get("missing"):
        named = ", ".join(map(str, params["gpus"]))
        raise ModuleFailure(f"refused before any GPU work: GPU {', '.join(map(str, preflight['missing']))} named in "
                             f"gpus {named} is not on this host (NVML counts {preflight.get('count')} "
                             f"GPU{'' if preflight.get('count') == 1 else 's'})", preflight=preflight)
    gpus = params["gpus"] or [g["index"] for g in preflight.get("gpus", [])]
    if len(gpus) < 2:
        raise ModuleFailure(f"refused before any GPU work: {f'one GPU (GPU {gpus[0]})' if gpus else 'no GPU'}: "
                             "no peer pair; the peer path does not apply", preflight=preflight)
    busy = {g["index"]: g["compute_processes"] for g in preflight.get("gpus", [])
            if g.get("compute_processes") and g["index"] in gpus}
    if busy and not params["force"]:
        raise ModuleFailure(f"GPUs hold compute processes {busy}; stop them or set force", busy=busy)
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


def run_check(host, params):
    """p2p_check's run (its arguments as params, validated): the preflight, the peer copies per ordered pair, the
    bracketed all-reduce arms, nccl-tests beside them and the decode prediction; the result, or ModuleFailure before any
    GPU work. `host`: start (host_commands' starter), which (the host's PATH, not required), tmpdir."""
    started = time.monotonic()
    budget = Budget(params["budget_s"], params["test_timeout_s"])
    worker_path = os.path.join(host.tmpdir, "p2p_worker.py")
    with open(worker_path, "w") as handle:
        handle.write(p2p_worker.__loader__.get_source(p2p_worker.__name__))
    base_env = {**os.environ, **{k: str(v) for k, v in params["base_env"].items()}}

    def launch(command, args, envs):
        return run_processes([worker_command(params, worker_path, command, args, env) for env in envs],
                             envs, budget.next_timeout(), start=host.start)

    pre = launch("preflight", {"gpus": params["gpus"]}, [base_env])[0]
    preflight, gpus = preflight_gpus(params, pre)
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
    reference = run_nccl_tests(host, params, gpus, base_env, budget)

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
    return result
