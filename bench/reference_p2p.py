#!/usr/bin/env python3
"""Reference loops for the peer-path figures, run in the same session as p2p_check:

- a plain cudaMemcpyPeer loop (CuPy) per ordered pair, timed like p2p_check (device sync,
  wall clock, median of 3 samples of `iters` copies);
- a plain torch.distributed all_reduce loop timed with CUDA events, per size and env set.

Compares with a peer-path observation JSON:  reference_p2p.py OBSERVATION.json
"""

import json
import os
import statistics
import sys
import time


def memcpy_peer_gbps(src, dst, nbytes, iters=20, reps=3):
    import cupy

    # Without peer access cudaMemcpyPeer stages through the host; torch enables it too.
    for this, other in ((src, dst), (dst, src)):
        with cupy.cuda.Device(this):
            try:
                cupy.cuda.runtime.deviceEnablePeerAccess(other)
            except cupy.cuda.runtime.CUDARuntimeError:
                pass  # already enabled
    with cupy.cuda.Device(src):
        a = cupy.empty(nbytes, dtype=cupy.uint8)
    with cupy.cuda.Device(dst):
        b = cupy.empty(nbytes, dtype=cupy.uint8)
    samples = []
    for _ in range(reps + 1):  # first rep warms up
        for dev in (src, dst):
            cupy.cuda.Device(dev).synchronize()
        start = time.perf_counter()
        for _ in range(iters):
            cupy.cuda.runtime.memcpyPeer(b.data.ptr, dst, a.data.ptr, src, nbytes)
        for dev in (src, dst):
            cupy.cuda.Device(dev).synchronize()
        samples.append((time.perf_counter() - start) / iters)
    return nbytes / statistics.median(samples[1:]) / 1e9


def allreduce_rank(rank, world, sizes, port, queue):
    import torch
    import torch.distributed as dist

    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device(f"cuda:{rank}"))
    out = {}
    for nbytes in sizes:
        x = torch.zeros(nbytes // 2, dtype=torch.bfloat16, device="cuda")
        for _ in range(20):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        samples = []
        for _ in range(5):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(100):
                dist.all_reduce(x)
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 100 * 1000)
        out[nbytes] = statistics.median(samples)
    dist.destroy_process_group()
    if rank == 0:
        queue.put(out)


def allreduce_us(world, sizes, env):
    import socket

    import torch.multiprocessing as mp

    os.environ.update(env)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=allreduce_rank, args=(r, world, sizes, port, queue)) for r in range(world)]
    for p in procs:
        p.start()
    result = queue.get(timeout=300)
    for p in procs:
        p.join()
    return result


def main():
    observation = json.load(open(sys.argv[1]))
    peer = observation["peer_path"]
    report = {"copies": [], "allreduce": []}
    for pair in peer["pairs"]:
        ours = pair["in_process"]["uni_gbps"]
        ref = memcpy_peer_gbps(pair["src"], pair["dst"], pair["in_process"]["bytes"])
        report["copies"].append({"src": pair["src"], "dst": pair["dst"], "p2p_check_gbps": ours,
                                 "memcpy_peer_gbps": ref, "ratio": ours / ref})
    sizes = [row["bytes"] for row in peer["allreduce"]["comparison"]]
    for name, env in peer["allreduce"]["env_sets"].items():
        ref = allreduce_us(len(peer["gpus"]), sizes, {k: str(v) for k, v in env.items()})
        for row in peer["allreduce"]["comparison"]:
            ours = row[name]["median_us"]
            plain = ref[row["bytes"]]
            report["allreduce"].append({"env_set": name, "bytes": row["bytes"], "p2p_check_us": ours,
                                        "plain_loop_us": plain, "difference": (ours - plain) / plain})
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
