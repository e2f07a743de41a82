#!/usr/bin/env python3
"""gpu_engine_double: a TEST DOUBLE of a tensor-parallel SGLang server on real GPUs.

Not SGLang and never counted as the real engine: a minimal tensor-parallel decoder with
random weights, one process per GPU, whose timing comes from real GPU work and real NCCL:

- Megatron-style layers (Llama-shaped by default: hidden 4096, 32 layers, SwiGLU MLP 14336):
  a column-parallel QKV projection, a row-parallel output projection and an all-reduce; a
  column-parallel gate/up projection, a row-parallel down projection and an all-reduce. Two
  all-reduces per layer, as real TP models run. Attention over a KV cache is left out: the
  step is weight-bound GEMVs plus the all-reduces the p2p candidate is about.
- Collectives through NCCL called directly (ctypes on the libnccl torch loaded, as SGLang's and
  vLLM's pynccl do), so NCCL_DEBUG=INFO lines in its log are NCCL's own, and the transport
  proof reads real lines. Prefill runs eagerly, in chunks; each decode step replays a CUDA
  graph, as SGLang and vLLM run decode.
- The HTTP surface, arguments, contract answers and ready line are the CPU double's
  (engine_double.py beside this file); only the time to each token is real work here.

Shape and seed (environment): GPU_DOUBLE_HIDDEN (4096), GPU_DOUBLE_LAYERS (32),
GPU_DOUBLE_FFN (14336), GPU_DOUBLE_QKV (6144: q 4096 + k, v 1024), GPU_DOUBLE_CHUNK (8192
prefill tokens per chunk), GPU_DOUBLE_SEED (0). MASTER_PORT for the ranks' rendezvous is
picked free unless set.

  python3 gpu_engine_double.py --model-path test/gpu-double --tp-size 2 --port 30000
"""

import json
import math
import multiprocessing
import os
import queue
import signal
import socket
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

import engine_double as cpu  # the shared HTTP surface of the doubles (beside this file: a script's own folder)

HERE = Path(__file__).resolve().parent

SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def shape_from_env(env):
    return {"hidden": int(env.get("GPU_DOUBLE_HIDDEN", "4096")), "layers": int(env.get("GPU_DOUBLE_LAYERS", "32")),
            "ffn": int(env.get("GPU_DOUBLE_FFN", "14336")), "qkv": int(env.get("GPU_DOUBLE_QKV", "6144")),
            "chunk": int(env.get("GPU_DOUBLE_CHUNK", "8192")), "seed": int(env.get("GPU_DOUBLE_SEED", "0"))}


def make_weights(torch, shape, rank, world, device, layers=None):
    """This rank's shard of every layer: column-parallel QKV and gate/up, row-parallel O and down.
    Full weights are drawn on the GPU from one seeded generator, in the same order on every
    rank, and sliced, so the shards of any TP size add up to the same model (the one-GPU
    reference in tests/gpu checks exactly that)."""
    h, f, q = shape["hidden"], shape["ffn"], shape["qkv"]
    if (q - h) % world or f % world or h % world or q <= h:
        raise ValueError(f"hidden {h}, qkv {q} (> hidden) and ffn {f} must divide by the TP size {world}")
    generator = torch.Generator(device=device).manual_seed(shape["seed"])

    def draw(rows, cols):
        return (torch.randn(rows, cols, generator=generator, device=device) / math.sqrt(rows)).to(torch.bfloat16)

    hs, ks, fs = h // world, (q - h) // world, f // world
    out = []
    for _ in range(layers or shape["layers"]):
        # Q is h wide (its per-rank heads stand in for attention's output), K and V the rest.
        wq, wkv, o = draw(h, h), draw(h, q - h), draw(h, h)
        gate, up, down = draw(h, f), draw(h, f), draw(f, h)
        out.append({
            "qkv": torch.cat([wq[:, rank * hs:(rank + 1) * hs], wkv[:, rank * ks:(rank + 1) * ks]], 1),
            "o": o[rank * hs:(rank + 1) * hs, :].contiguous(),
            "gate_up": torch.cat([gate[:, rank * fs:(rank + 1) * fs], up[:, rank * fs:(rank + 1) * fs]], 1),
            "down": down[rank * fs:(rank + 1) * fs, :].contiguous()})
        del wq, wkv, o, gate, up, down
    return out


def forward(torch, layers, x, all_reduce):
    """One pass over [tokens, hidden]: per layer two row-parallel outputs, each all-reduced."""
    for layer in layers:
        normed = x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype)
        qkv = normed @ layer["qkv"]
        width = layer["o"].shape[0]
        attn = qkv[:, :width]  # this rank's Q heads stand in for attention's output
        partial = attn @ layer["o"]
        all_reduce(partial)
        x = x + partial
        normed = x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype)
        gate_up = normed @ layer["gate_up"]
        gate, up = gate_up.chunk(2, dim=-1)
        partial = (torch.nn.functional.silu(gate) * up) @ layer["down"]
        all_reduce(partial)
        x = x + partial
    return x


def worker(rank, world, env, commands, results):
    """One TP rank: NCCL communicator, weights, a captured decode step; then serve commands."""
    os.environ.update(env)
    import torch

    from serving_rollout.module_utils.p2p_worker import NcclComm

    torch.cuda.set_device(rank)
    device = f"cuda:{rank}"
    shape = shape_from_env(env)
    nccl = NcclComm(torch, rank, world, "127.0.0.1", env["MASTER_PORT"])
    stream = torch.cuda.Stream()
    layers = make_weights(torch, shape, rank, world, device)

    def all_reduce(tensor):
        nccl.all_reduce(tensor, torch.cuda.current_stream())

    with torch.cuda.stream(stream):
        static_x = torch.randn(1, shape["hidden"], device=device).to(torch.bfloat16)
        for _ in range(3):  # warm-up, eagerly, on the capture stream
            forward(torch, layers, static_x, all_reduce)
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        static_out = forward(torch, layers, static_x, all_reduce)
    torch.cuda.synchronize()
    results.put(("ready", rank, nccl.version))
    while True:
        command = commands.get()
        if command is None:
            break
        _, prompt_tokens, count = command
        with torch.cuda.stream(stream):
            x = None
            for start in range(0, max(prompt_tokens, 1), shape["chunk"]):
                size = min(shape["chunk"], max(prompt_tokens, 1) - start)
                x = forward(torch, layers, torch.ones(size, shape["hidden"], device=device, dtype=torch.bfloat16),
                            all_reduce)
            static_x.copy_(x[-1:])
            first = float(x[-1, 0].item())  # the first token needs the prefill's last row on the host
        if rank == 0:
            results.put(("token", 0, time.monotonic(), first))
        for index in range(1, count):
            with torch.cuda.stream(stream):
                graph.replay()
                static_x.copy_(static_out)
                value = float(static_out[0, 0].item())  # sampling waits for the step, as engines do
            if rank == 0:
                results.put(("token", index, time.monotonic(), value))
    nccl.close()


class GpuEngine:
    """The engine interface engine_double's HTTP handler needs, backed by TP ranks on GPUs."""

    def __init__(self, args, env):
        self.args, self.env = args, env
        self.faults = {}
        self.ready = threading.Event()
        self.completed = 0
        self.count_lock = threading.Lock()
        self.request_lock = threading.Lock()  # one request at a time: latency cells run at concurrency 1
        self.model_id = args.served_model_name or args.model_path
        self.p2p = env.get("NCCL_P2P_DISABLE", "0") != "1"
        self.shape = shape_from_env(env)
        self.ranks = []

    def log(self, line):
        print(line, flush=True)

    def server_info(self):
        a = self.args
        return {"engine": "gpu_engine_double", "version": "0.0-double", "model_path": a.model_path,
                "revision": a.revision, "served_model_name": self.model_id, "tp_size": a.tp_size,
                "context_length": a.context_length, "disable_custom_all_reduce": a.disable_custom_all_reduce,
                "double_shape": self.shape}

    def start(self):
        self.log("gpu_engine_double (TEST DOUBLE for SGLang; real GPUs and NCCL, random weights) starting")
        self.log(f"server_args={json.dumps(self.server_info())}")
        context = multiprocessing.get_context("spawn")
        port = self.env.get("MASTER_PORT") or str(cpu_free_port())
        env = {**{k: v for k, v in self.env.items() if k.startswith(("NCCL_", "CUDA_", "GPU_DOUBLE_"))},
               **SAFE_ENV, "MASTER_PORT": port}
        self.results = context.Queue()
        for rank in range(self.args.tp_size):
            commands = context.Queue()
            proc = context.Process(target=worker, args=(rank, self.args.tp_size, env, commands, self.results),
                                   daemon=True)
            proc.start()
            self.ranks.append((proc, commands))
        ready = []
        while len(ready) < len(self.ranks):
            try:
                ready.append(self.results.get(timeout=5))
            except queue.Empty:
                dead = [rank for rank, (proc, _) in enumerate(self.ranks) if not proc.is_alive()]
                if dead:
                    self.log(f"Traceback (most recent call last):\nRuntimeError: TP ranks {dead} exited before ready")
                    os._exit(1)
        self.log(f"{len(ready)} TP ranks ready (NCCL {ready[0][2]}), decode step captured in a CUDA graph")
        reason = "--disable-custom-all-reduce is set" if self.args.disable_custom_all_reduce else "the double has none"
        self.log(f"Custom allreduce is disabled because {reason}")
        self.ready.set()
        self.log(cpu.READY_LINE)

    def token_times(self, started, prompt_tokens, count):
        """Yields as each of `count` tokens is produced by the ranks (prefill, then decode steps)."""
        with self.request_lock:
            for _, commands in self.ranks:
                commands.put(("generate", prompt_tokens, count))
            for index in range(count):
                kind, got, at, _ = self.results.get()
                if kind != "token" or got != index:
                    raise RuntimeError(f"rank 0 reported {kind} {got}, expected token {index}")
                yield index

    def request_done(self):
        with self.count_lock:
            self.completed += 1

    def stop(self):
        for _proc, commands in self.ranks:
            commands.put(None)
        for proc, _ in self.ranks:
            proc.join(timeout=30)


def cpu_free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main(argv=None):
    args = cpu.parse_engine_args(sys.argv[1:] if argv is None else argv)
    engine = GpuEngine(args, dict(os.environ))
    server = ThreadingHTTPServer((args.host, args.port), cpu.make_handler(engine))
    server.daemon_threads = True

    def on_term(signum, frame):
        engine.log(f"received signal {signum}, shutting down")
        engine.ready.clear()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    threading.Thread(target=engine.start, daemon=True).start()
    server.serve_forever()
    engine.stop()
    engine.log("gpu_engine_double stopped")


if __name__ == "__main__":
    main()
