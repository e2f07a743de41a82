"""Peer-path worker: runs on the GPU host under a Python that has torch.

Executed as a script by p2p_check (its source is shipped by the module), one subcommand
per process, each printing one line `P2PCHECK_RESULT <json>`:

  preflight  {"gpus": [...]}                        GPUs, compute processes, link facts
  peer       {"gpus", "pairs", "ipc_pairs", "bytes", "iters", "ipc_bytes", "max_gpu_mem_mib", "seed"}
  allreduce  {"gpus", "sizes", "iters", "reps", "max_gpu_mem_mib"} (one process per rank;
             RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the environment): torch.distributed,
             called eagerly from Python (bound by host launch cost at decode sizes)
  allreduce_graph  the same arguments: NCCL's ncclAllReduce called directly (ctypes, on the
             libnccl the process's torch loaded) and captured in a CUDA graph of `iters` calls,
             replayed `reps` times and timed with CUDA events: no host launch cost in the
             timing, as an engine's CUDA-graph decode step sees it

Data patterns come from a seeded CPU generator and reach each GPU by host copies, so the
receiver's expected bytes never travel the peer path under test.
"""

import json
import os
import statistics
import sys
import time

MARK = "P2PCHECK_RESULT "


def emit(result):
    print(MARK + json.dumps(result), flush=True)


def pattern(torch, nbytes, seed):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (nbytes,), generator=generator, dtype=torch.uint8)


def cap_memory(torch, gpus, max_mib):
    for gpu in gpus:
        total = torch.cuda.get_device_properties(gpu).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, max_mib * 2**20 / total), gpu)


def sync(torch, *gpus):
    for gpu in gpus:
        torch.cuda.synchronize(gpu)


def timed(torch, gpus, fn, iters, reps=3):
    """Median over reps of the wall time of `iters` calls, devices synchronized around each rep."""
    samples = []
    for _ in range(reps):
        sync(torch, *gpus)
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        sync(torch, *gpus)
        samples.append((time.perf_counter() - start) / iters)
    return statistics.median(samples)


def _preflight_gpu(nvml, index, indices):
    """One GPU's bus id, compute processes, NVLink remotes and peers, PCIe link, as the preflight reports it."""
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    gpu = {"index": index, "bus_id": nvml.nvmlDeviceGetPciInfo(handle).busId}
    gpu["bus_id"] = gpu["bus_id"].decode() if isinstance(gpu["bus_id"], bytes) else gpu["bus_id"]
    procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
    gpu["compute_processes"] = [{"pid": p.pid, "used_memory": p.usedGpuMemory} for p in procs]
    links = []
    for link in range(18):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link):
                remote = nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId
                links.append(remote.decode() if isinstance(remote, bytes) else remote)
        except Exception:  # link absent or not supported
            continue
    gpu["nvlink_remotes"] = links
    gpu["nvlink_peers"] = []
    for peer in indices:
        if peer == index:
            continue
        try:
            other = nvml.nvmlDeviceGetHandleByIndex(peer)
            if nvml.nvmlDeviceGetP2PStatus(handle, other, 2) == 0:  # 2: NVLINK index
                gpu["nvlink_peers"].append(peer)
        except Exception:  # status unreadable: not counted as an NVLink peer
            continue
    for key, fn in (("pcie_gen", nvml.nvmlDeviceGetCurrPcieLinkGeneration),
                    ("pcie_width", nvml.nvmlDeviceGetCurrPcieLinkWidth)):
        try:
            gpu[key] = fn(handle)
        except Exception:
            gpu[key] = None
    return gpu


def preflight(args):
    out = {"gpus": [], "nvml": None}
    try:
        import pynvml as nvml

        nvml.nvmlInit()
    except Exception as exc:  # no binding or no driver: the caller decides what that means
        out["nvml"] = f"unavailable: {exc}"
        return out
    try:
        out["count"] = nvml.nvmlDeviceGetCount()
        out["missing"] = sorted(i for i in args["gpus"] if i >= out["count"])
        if out["missing"]:  # a GPU the host does not have: nothing is read, the caller refuses by name
            return out
        indices = args["gpus"] or list(range(out["count"]))
        out["gpus"] = [_preflight_gpu(nvml, index, indices) for index in indices]
        out["nvml"] = "ok"
    finally:
        nvml.nvmlShutdown()
    return out


def peer_pair(torch, src, dst, data, iters):
    """In-process peer copy src -> dst: verified bytes, uni/bi-directional bandwidth, latency."""
    nbytes = data.numel()
    result = {"src": src, "dst": dst, "can_access_peer": torch.cuda.can_device_access_peer(src, dst)}
    a = data.to(f"cuda:{src}")
    expected = data.to(f"cuda:{dst}")
    b = torch.zeros(nbytes, dtype=torch.uint8, device=f"cuda:{dst}")
    b.copy_(a)
    sync(torch, src, dst)
    result["verified"] = bool(torch.equal(b, expected))
    result["mismatched_bytes"] = int((b != expected).sum().item())
    result["bytes"] = nbytes
    seconds = timed(torch, (src, dst), lambda: b.copy_(a, non_blocking=True), iters)
    result["uni_gbps"] = nbytes / seconds / 1e9
    back_src = torch.empty_like(b)
    back_dst = torch.empty_like(a)
    s1 = torch.cuda.Stream(device=src)
    s2 = torch.cuda.Stream(device=dst)

    def both():
        with torch.cuda.stream(s1):
            b.copy_(a, non_blocking=True)
        with torch.cuda.stream(s2):
            back_dst.copy_(back_src, non_blocking=True)

    seconds = timed(torch, (src, dst), both, iters)
    result["bidir_gbps"] = 2 * nbytes / seconds / 1e9
    tiny_a = a[:4]
    tiny_b = b[:4]

    def tiny():
        tiny_b.copy_(tiny_a, non_blocking=True)

    result["latency_us"] = timed(torch, (src, dst), tiny, 200) * 1e6
    # Corruption under load counts too: check the receiver's bytes again after the loops.
    result["verified"] = result["verified"] and bool(torch.equal(b, expected))
    return result


def ipc_receiver(requests, responses, max_mib, seed):
    """Child process: map each tensor through CUDA IPC, copy it to our GPU, verify the bytes."""
    import torch

    while True:
        item = requests.get()
        if item is None:
            return
        src, dst, shared = item
        cap_memory(torch, [dst], max_mib)
        nbytes = shared.numel()
        expected = pattern(torch, nbytes, seed + 1000 * src + dst).to(f"cuda:{dst}")
        mine = torch.zeros(nbytes, dtype=torch.uint8, device=f"cuda:{dst}")
        mine.copy_(shared)
        sync(torch, src, dst)
        seconds = timed(torch, (src, dst),
                        lambda mine=mine, shared=shared: mine.copy_(shared, non_blocking=True), 5)
        responses.put({"src": src, "dst": dst, "bytes": nbytes,
                       "verified": bool(torch.equal(mine, expected)),
                       "mismatched_bytes": int((mine != expected).sum().item()),
                       "gbps": nbytes / seconds / 1e9})
        del shared, mine, expected
        torch.cuda.empty_cache()


def peer(args):
    import torch
    import torch.multiprocessing as mp

    gpus, pairs = args["gpus"], args["pairs"]
    cap_memory(torch, gpus, args["max_gpu_mem_mib"])
    out = {"in_process": [], "ipc": []}
    data = pattern(torch, args["bytes"], args["seed"])
    started = time.perf_counter()
    for src, dst in pairs:
        pair_started = time.perf_counter()
        out["in_process"].append(peer_pair(torch, src, dst, data, args["iters"]))
        out["in_process"][-1]["seconds"] = time.perf_counter() - pair_started
        torch.cuda.empty_cache()
    out["in_process_seconds"] = time.perf_counter() - started
    context = mp.get_context("spawn")
    requests, responses = context.Queue(), context.Queue()
    child = context.Process(target=ipc_receiver,
                            args=(requests, responses, args["max_gpu_mem_mib"], args["seed"]))
    started = time.perf_counter()
    child.start()
    for src, dst in args.get("ipc_pairs", pairs):
        pair_started = time.perf_counter()
        shared = pattern(torch, args["ipc_bytes"], args["seed"] + 1000 * src + dst).to(f"cuda:{src}")
        requests.put((src, dst, shared))
        out["ipc"].append(responses.get())  # keep `shared` alive until the child is done with it
        out["ipc"][-1]["seconds"] = time.perf_counter() - pair_started
        del shared
    requests.put(None)
    child.join()
    out["ipc_exit_code"] = child.exitcode
    out["ipc_seconds"] = time.perf_counter() - started  # the receiver's start (torch import, CUDA init) included
    return out


def size_record(nbytes, samples_us, world, correct):
    """One all-reduce size's result: median latency, algorithm and bus bandwidth (as nccl-tests)."""
    median_us = statistics.median(samples_us)
    algbw = nbytes / (median_us * 1e-6) / 1e9
    return {"bytes": nbytes, "median_us": median_us, "samples_us": samples_us, "algbw_gbps": algbw,
            "busbw_gbps": algbw * 2 * (world - 1) / world, "correct": correct}


def allreduce(args):
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    gpu = args["gpus"][rank]
    torch.cuda.set_device(gpu)
    cap_memory(torch, [gpu], args["max_gpu_mem_mib"])
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device(f"cuda:{gpu}"))
    expected_sum = world * (world + 1) / 2
    sizes = []
    for nbytes in args["sizes"]:
        numel = nbytes // 2  # bf16
        check = torch.full((numel,), float(rank + 1), dtype=torch.bfloat16, device=f"cuda:{gpu}")
        dist.all_reduce(check)
        correct = bool(torch.all(check == expected_sum).item())
        work = torch.zeros(numel, dtype=torch.bfloat16, device=f"cuda:{gpu}")
        for _ in range(20):
            dist.all_reduce(work)
        torch.cuda.synchronize()
        samples = []
        for _ in range(args["reps"]):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(args["iters"]):
                dist.all_reduce(work)
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / args["iters"] * 1000)  # us
        check.fill_(float(rank + 1))
        dist.all_reduce(check)
        correct = correct and bool(torch.all(check == expected_sum).item())
        sizes.append(size_record(nbytes, samples, world, correct))
        del check, work
    dist.destroy_process_group()
    return {"rank": rank, "world_size": world, "sizes": sizes}


NCCL_BFLOAT16, NCCL_SUM = 9, 0  # ncclDataType_t and ncclRedOp_t values (nccl.h, NCCL >= 2.10)


def load_nccl(torch):
    """The libnccl this process's torch already loaded (dlopen by soname returns it)."""
    import ctypes

    torch.cuda.init()
    lib = ctypes.CDLL("libnccl.so.2")
    lib.ncclGetErrorString.restype = ctypes.c_char_p
    return lib


def nccl_check(lib, status, what):
    if status != 0:
        raise RuntimeError(f"{what} failed: NCCL error {status} ({lib.ncclGetErrorString(status).decode()})")


class NcclComm:
    """One NCCL communicator through ctypes on the libnccl torch loaded, as engines' own NCCL
    wrappers (SGLang's and vLLM's pynccl) call it: graph-capturable, no torch.distributed
    process group. The unique id travels through a torch TCPStore that rank 0 serves."""

    def __init__(self, torch, rank, world, master_addr, master_port, timeout_s=120):
        import ctypes
        import datetime

        import torch.distributed as dist

        self.ctypes, self.torch = ctypes, torch
        self.lib = load_nccl(torch)

        class UniqueId(ctypes.Structure):
            _fields_ = [("internal", ctypes.c_byte * 128)]

        store = dist.TCPStore(master_addr, int(master_port), world, rank == 0,
                              timeout=datetime.timedelta(seconds=timeout_s))
        uid = UniqueId()
        if rank == 0:
            nccl_check(self.lib, self.lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
            store.set("nccl_uid", bytes(uid.internal))
        else:
            ctypes.memmove(uid.internal, store.get("nccl_uid"), 128)
        self.store = store  # rank 0 keeps serving it until every rank has read it
        self.comm = ctypes.c_void_p()
        nccl_check(self.lib, self.lib.ncclCommInitRank(ctypes.byref(self.comm), world, uid, rank), "ncclCommInitRank")
        version = ctypes.c_int()
        self.lib.ncclGetVersion(ctypes.byref(version))
        self.version = version.value

    def all_reduce(self, tensor, stream):
        """In-place sum of a bf16 tensor on `stream` (capturable in a CUDA graph)."""
        c = self.ctypes
        nccl_check(self.lib, self.lib.ncclAllReduce(c.c_void_p(tensor.data_ptr()), c.c_void_p(tensor.data_ptr()),
                                                    c.c_size_t(tensor.numel()), NCCL_BFLOAT16, NCCL_SUM, self.comm,
                                                    c.c_void_p(stream.cuda_stream)), "ncclAllReduce")

    def close(self):
        self.torch.cuda.synchronize()
        self.lib.ncclCommDestroy(self.comm)


def allreduce_graph(args):
    import torch

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    gpu = args["gpus"][rank]
    torch.cuda.set_device(gpu)
    cap_memory(torch, [gpu], args["max_gpu_mem_mib"])
    nccl = NcclComm(torch, rank, world, os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"])
    all_reduce = nccl.all_reduce

    stream = torch.cuda.Stream()
    tick = torch.zeros(1, dtype=torch.bfloat16, device=f"cuda:{gpu}")
    expected_sum = world * (world + 1) / 2
    sizes = []
    for nbytes in args["sizes"]:
        numel = nbytes // 2  # bf16
        with torch.cuda.stream(stream):
            check = torch.full((numel,), float(rank + 1), dtype=torch.bfloat16, device=f"cuda:{gpu}")
            all_reduce(check, stream)
            work = torch.zeros(numel, dtype=torch.bfloat16, device=f"cuda:{gpu}")
            for _ in range(10):
                all_reduce(work, stream)
        stream.synchronize()
        correct = bool(torch.all(check == expected_sum).item())
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(args["iters"]):
                all_reduce(work, torch.cuda.current_stream())
        graph.replay()  # warm-up replay
        torch.cuda.synchronize()
        samples = []
        for _ in range(args["reps"]):
            with torch.cuda.stream(stream):
                all_reduce(tick, stream)  # line the ranks up, outside the timed span
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record(stream)
                graph.replay()
                end.record(stream)
            end.synchronize()
            samples.append(start.elapsed_time(end) / args["iters"] * 1000)  # us per call
        with torch.cuda.stream(stream):
            check.fill_(float(rank + 1))
            all_reduce(check, stream)
        stream.synchronize()
        correct = correct and bool(torch.all(check == expected_sum).item())
        sizes.append(size_record(nbytes, samples, world, correct))
        del graph, check, work
    nccl.close()
    return {"rank": rank, "world_size": world, "sizes": sizes, "method": "nccl-cuda-graph",
            "nccl_loaded": nccl.version}


COMMANDS = {"preflight": preflight, "peer": peer, "allreduce": allreduce, "allreduce_graph": allreduce_graph}


def main():
    command, args = sys.argv[1], json.loads(sys.argv[2])
    try:
        emit({"status": "ok", **COMMANDS[command](args)})
    except Exception as exc:
        emit({"status": "error", "error": f"{type(exc).__name__}: {exc}"})
        sys.exit(1)


if __name__ == "__main__":
    main()
