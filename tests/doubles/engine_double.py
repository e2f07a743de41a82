#!/usr/bin/env python3
"""engine_double: a TEST DOUBLE standing in for an SGLang server where no GPU exists.

It is not SGLang and never counts as the real engine. It parses SGLang's arguments,
prints NCCL-style start-up lines derived from its environment (as a real TP engine
does), serves SGLang's HTTP endpoints, and answers with latencies drawn from a
configured model, so that an A/B against it has a known true answer.

Configuration (environment, all optional):
  DOUBLE_STARTUP_S            seconds from start to ready (default 1.0)
  DOUBLE_BASE_TTFT_MS         fixed part of time to first token (default 2.0)
  DOUBLE_PREFILL_MS_PER_1K    prefill time per 1000 prompt tokens (default 20.0)
  DOUBLE_DECODE_MS_PER_TOKEN  decode time per output token (default 5.0)
  DOUBLE_NOISE                relative sigma of multiplicative gaussian noise per step (default 0)
  DOUBLE_REQUEST_NOISE        relative sigma of one gaussian factor per request (default 0)
  DOUBLE_SEED                 seed of the noise (default 0)
  DOUBLE_EFFECT_<CONTROL>     effect of a control when it is ON, as
                              "prefill=0.05,decode=0.02" (fractions faster; negative
                              is slower). CONTROL is P2P (NCCL_P2P_DISABLE not 1),
                              CUMEM (NCCL_CUMEM_ENABLE=1), CUSTOM_AR (custom all-reduce on).
  DOUBLE_NCCL_VERSION         NCCL version printed (default 2.28.9); CUDA in DOUBLE_CUDA (13.0)
  DOUBLE_NCCL_CHANNELS        channels printed per ring edge (default 2)
  DOUBLE_NCCL_TOPOLOGY        "two-roots": the GPUs sit on two PCIe root complexes, so with P2P
                              allowed the pairs across them print SHM (a mixed log)
  DOUBLE_VERSION              engine version reported by /server_info (default 0.5.5)
  DOUBLE_KV_TOKENS            KV-cache size logged at start (default 500000)
  DOUBLE_SHAPE                the engine whose log shapes it prints: sglang (default) or vllm, each line
                              from that engine's adapter (module_utils/engine_adapters.py), which the
                              real-log corpus checks
  DOUBLE_FAULT                comma-separated faults:
      fail_at_start           exit 1 with a Traceback before ready
      worker_died_at_start    a crash under a living process, never ready: vLLM's "Worker proc VllmWorker-1
                              died unexpectedly" (DOUBLE_SHAPE=vllm), else torch's NCCL watchdog time-out line
      warn_at_start           log an NCCL WARN line at start (the shape of a real cudawrap warning)
      ignore_sigterm          ignore SIGTERM, as a vLLM API server with an open client stream does
      hang_before_ready       never become ready
      crash_after:N           exit 1 after N completed requests
      extra_word              one extra word in every exact-length answer
      drift:F                 latencies grow by fraction F per minute since ready
      straggler[:S]           on stop, leave a child process alive S seconds (default 600)
      ignore_p2p              print SHM transport even when P2P is allowed (no effect)
      drop_env:NAME           the engine's own start-up removes NAME from its environment before NCCL reads
                              it (as vLLM's env override does with NCCL_CUMEM_ENABLE): the control does nothing
      capture_fails_on:NAME=V CUDA-graph capture fails with NCCL's "invalid usage" when the environment has
                              NAME=V (the 8-GPU PCIe host of domain-notes.md: NCCL_ALGO=Tree)
      fail_requests           answer every completion with HTTP 500
      fail_rate:F             answer a fraction F (0-1) of completions with HTTP 500 (counted as aborted in
                              /metrics, as the engine it plays counts a failed request)
      startup:S               take S seconds to become ready (overrides DOUBLE_STARTUP_S)
      ready_after_removed:PATH  not ready while PATH exists (a test holds a run in its
                              candidate-starting phase for as long as it needs, whatever the load)
      speedup:F               every latency of this process F (0-1) shorter: an effect far outside
                              any noise, for tests that need a verdict on a loaded machine
      slowdown:F              every latency of this process F longer (0.5: 1.5x): a sure reject
      kv_loss:F               the KV cache holds F (0-1) fewer tokens (its start-up report says so,
                              and the concurrency it states falls with it)
      corrupt_tokens:R        silent corruption (zeroed peer copies under the IOMMU): each token of a free-text
                              answer is a wrong one with probability R, the gates' structured answers stay
                              right and every latency is unchanged
      numerics:D              other rounding (another reduction order or kernels): each chosen token's logprob
                              moves by up to D, the tokens stay the same
      stall_after:N           after N completed requests every new request hangs: no token, ever (a hang under
                              load that only an endurance cell meets)
      spec_accept:L           with --speculative-algorithm: the accept length L (tokens per verify step, bonus
                              included; default DOUBLE_SPEC_ACCEPT_LENGTH, 2.0); each step costs
                              DOUBLE_SPEC_STEP_MS (default 2.5 decode steps), so a token takes step / L and
                              speculation pays only above L = 2.5 (the handoff: 2.46 at a 30 ms verify)
      burst:S:F               for S seconds after ready a noisy neighbour: two busy processes
                              on the host's CPUs and every latency F longer (interference
                              that hits one arm only)
      burst_cells:N:F         the same neighbour from this process's first cell request (X-Request-Id
                              serving-rollout-cell-*) for N cell requests, whatever the machine's
                              speed (the gates before the cells never meet it)
  DOUBLE_FAULT_DIR            lab hook (default /etc/engine-double/faults): a file there named
                              after this process's systemd unit (from /proc/self/cgroup)
                              adds its faults, so one unit of two sharing an
                              EnvironmentFile can be made to fail; a file
                              <unit>+p2p applies only when P2P is allowed,
                              <unit>+custom_ar only with custom all-reduce on
"""

import argparse
import hashlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

try:
    from double_module_utils import engine_adapters  # beside the double on the lab host (roles/lab_serving_host)
except ImportError:  # run from the checkout: the installed package
    from serving_rollout.module_utils import engine_adapters

# SGLang's ready line, without its "[time] " prefix
READY_LINE = engine_adapters.example("sglang", "ready", time="").split("] ", 1)[1]
STRAGGLER_NAME = "engine-double-straggler"
# NCCL parameters whose "set by environment" line NCCL_DEBUG=INFO prints.
NCCL_PARAMS = {"NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_BUFFSIZE",
               "NCCL_NTHREADS", "NCCL_P2P_LEVEL", "NCCL_P2P_DISABLE", "NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE",
               "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE"}
WORKER_TAG = "engine-double-worker"  # in a straggler's argv, so a process scan can find it


def parse_engine_args(argv):
    parser = argparse.ArgumentParser(prog="engine_double", allow_abbrev=False)
    parser.add_argument("--model-path", "--model", dest="model_path", required=True)
    parser.add_argument("--revision", default=None)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    parser.add_argument("--context-length", "--max-model-len", dest="context_length", type=int, default=32768)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--disable-custom-all-reduce", action="store_true")
    parser.add_argument("--chunked-prefill-size", type=int, default=None)
    parser.add_argument("--speculative-algorithm", default=None)
    parser.add_argument("--speculative-num-steps", type=int, default=None)
    parser.add_argument("--speculative-eagle-topk", type=int, default=None)
    parser.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    parser.add_argument("--api-key", default=None)
    args, unknown = parser.parse_known_args(argv)
    args.unknown_args = unknown
    return args


# Each engine's own histogram bounds (seconds): SGLang's metrics/collector.py and vLLM's v1 metrics/loggers.py.
BUCKETS = {
    "sglang": {"ttft": [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                        15.0, 20.0, 25.0, 30.0],
               "e2e": [0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0,
                       400.0, 800.0]},
    "vllm": {"ttft": [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                      20.0, 40.0, 80.0, 160.0, 640.0, 2560.0],
             "e2e": [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                     480.0, 960.0, 1920.0, 7680.0]},
}


def parse_faults(text):
    faults = {}
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        name, _, value = item.partition(":")
        faults[name] = value
    return faults


def own_unit():
    """This process's systemd unit, from its cgroup path; None outside systemd."""
    try:
        with open("/proc/self/cgroup") as handle:
            for line in handle:
                name = line.strip().rsplit("/", 1)[-1]
                if name.endswith(".service"):
                    return name
    except OSError:
        pass
    return None


def faults_for(env, unit=None, custom_ar=False):
    """DOUBLE_FAULT plus the faults in DOUBLE_FAULT_DIR/<own unit>, if that file exists, and
    in DOUBLE_FAULT_DIR/<own unit>+p2p when this process runs with P2P allowed (so a unit
    promoted to P2P can fail where the original, same name, P2P disabled, does not), and in
    <own unit>+custom_ar when custom all-reduce is on (one candidate unit name, many controls)."""
    text = env.get("DOUBLE_FAULT", "")
    unit = unit or own_unit()
    if unit:
        names = [unit] + ([unit + "+p2p"] if env.get("NCCL_P2P_DISABLE", "0") != "1" else []) \
            + ([unit + "+custom_ar"] if custom_ar else [])
        for name in names:
            path = os.path.join(env.get("DOUBLE_FAULT_DIR", "/etc/engine-double/faults"), name)
            try:
                with open(path) as handle:
                    text = ",".join(filter(None, [text, handle.read().strip()]))
            except OSError:
                pass
    return parse_faults(text)


def parse_effect(text):
    effect = {"prefill": 0.0, "decode": 0.0}
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        key, _, value = item.partition("=")
        if key not in effect:
            raise ValueError(f"unknown effect key {key!r} in {text!r}")
        effect[key] = float(value)
    return effect


class LatencyModel:
    """Time to first token and per-token decode time, with control effects and noise."""

    def __init__(self, env, controls):
        self.base_ttft = float(env.get("DOUBLE_BASE_TTFT_MS", "2.0")) / 1000
        self.prefill_per_1k = float(env.get("DOUBLE_PREFILL_MS_PER_1K", "20.0")) / 1000
        self.decode_per_token = float(env.get("DOUBLE_DECODE_MS_PER_TOKEN", "5.0")) / 1000
        self.noise = float(env.get("DOUBLE_NOISE", "0"))
        self.request_noise = float(env.get("DOUBLE_REQUEST_NOISE", "0"))
        self.rng = random.Random(int(env.get("DOUBLE_SEED", "0")))
        self.lock = threading.Lock()
        self.prefill_factor = 1.0
        self.decode_factor = 1.0
        for control, on in controls.items():
            if on:
                effect = parse_effect(env.get(f"DOUBLE_EFFECT_{control.upper()}", ""))
                self.prefill_factor *= 1.0 - effect["prefill"]
                self.decode_factor *= 1.0 - effect["decode"]
        self.drift_per_min = 0.0
        self.ready_at = None

    def _jitter(self):
        if not self.noise:
            return 1.0
        with self.lock:
            return max(0.0, self.rng.gauss(1.0, self.noise))

    def request_factor(self):
        """One factor for all of a request's timings: request-to-request variation."""
        if not self.request_noise:
            return 1.0
        with self.lock:
            return max(0.0, self.rng.gauss(1.0, self.request_noise))

    def _drift(self):
        if not self.drift_per_min or self.ready_at is None:
            return 1.0
        return 1.0 + self.drift_per_min * (time.monotonic() - self.ready_at) / 60

    def ttft(self, prompt_tokens):
        prefill = self.prefill_per_1k * prompt_tokens / 1000 * self.prefill_factor
        return (self.base_ttft + prefill) * self._jitter() * self._drift()

    def decode(self):
        return self.decode_per_token * self.decode_factor * self._jitter() * self._drift()


def count_tokens(text):
    return len(text.split())


def message_text(messages):
    parts = []
    for message in messages:
        content = message.get("content") or ""
        if isinstance(content, list):
            content = " ".join(c.get("text", "") for c in content if isinstance(c, dict))
        parts.append(str(content))
    return "\n".join(parts)


def example_for_schema(schema, prompt):
    """A value matching a small JSON schema; string fields take `name: value` from the prompt."""
    kind = schema.get("type", "object")
    if kind == "object":
        out = {}
        for name, sub in schema.get("properties", {}).items():
            if sub.get("type", "string") == "string":
                found = re.search(rf"\b{re.escape(name)}\s*[:=]\s*([^\s,;]+)", prompt)
                out[name] = found.group(1) if found else f"{name}-value"
            else:
                out[name] = example_for_schema(sub, prompt)
        return out
    if kind == "array":
        return [example_for_schema(schema.get("items", {"type": "string"}), prompt)]
    if kind in ("integer", "number"):
        return 1
    if kind == "boolean":
        return True
    return "value"


def answer_words(prompt, max_tokens, faults):
    """The words the double answers with, understanding the gates' task phrasings."""
    exact = re.search(r"exactly (\d+) (?:code )?words", prompt)
    needle_question = re.search(r"What is the secret code\?", prompt)
    if needle_question:
        needle = re.search(r"The secret code is (\S+?)\.", prompt)
        return [needle.group(1) if needle else "unknown"]
    if exact:
        count = int(exact.group(1)) + (1 if "extra_word" in faults else 0)
        return [f"CODE{i:03d}" for i in range(count)][: max(max_tokens, count)]
    return [f"word{i}" for i in range(max_tokens)]


def _digest(prompt, position):
    return hashlib.sha256(f"{prompt}\0{position}".encode()).digest()


def corrupt(words, prompt, rate, rng):
    """A wrong token in place of each word with probability `rate` (the corruption fault)."""
    return [f"garbled{_digest(prompt, j)[5] % 97}" if rate and rng.random() < rate else word
            for j, word in enumerate(words)]


def token_logprobs(prompt, words, faults):
    """OpenAI chat logprobs of greedy choices: each position's logprob and runner-up from a hash of the
    prompt and position (so every arm of the same model reports the same numbers), a confident choice
    (it leads its runner-up by 0.6-4.6 nats); numerics:D moves each chosen logprob by up to D."""
    shift = float(faults.get("numerics") or 0.0)
    content = []
    for j, word in enumerate(words):
        d = _digest(prompt, j)
        chosen = -(0.001 + d[0] / 255 * 0.05) + shift * (d[3] / 255 * 2 - 1)
        chosen = min(chosen, 0.0)
        if word.startswith("garbled"):  # garbage logits: a wrong token, chosen with little confidence
            chosen = -(1.0 + d[2] / 255 * 2)
        runner_up = chosen - (0.6 + d[1] / 255 * 4)
        content.append({"token": word, "logprob": round(chosen, 6), "bytes": list(word.encode()), "top_logprobs": [
            {"token": word, "logprob": round(chosen, 6)},
            {"token": f"alt{d[4] % 50}", "logprob": round(runner_up, 6)}]})
    return {"content": content}


class Engine:
    def __init__(self, args, env):
        self.args = args
        self.env = env
        self.p2p = env.get("NCCL_P2P_DISABLE", "0") != "1"
        self.cumem = env.get("NCCL_CUMEM_ENABLE", "0") == "1"
        self.custom_ar = not args.disable_custom_all_reduce
        self.faults = faults_for(env, custom_ar=self.custom_ar)
        self.corruption = random.Random()  # fresh entropy: the detection rate is measured over many runs
        self.model = LatencyModel(
            env, {"p2p": self.p2p, "cumem": self.cumem, "custom_ar": self.custom_ar}
        )
        # Speculative decoding: a token costs one verify step over the accept length.
        self.accept_length = None
        if args.speculative_algorithm:
            self.accept_length = float(self.faults.get("spec_accept") or env.get("DOUBLE_SPEC_ACCEPT_LENGTH", "2.0"))
            step_s = float(env.get("DOUBLE_SPEC_STEP_MS", 0) or 0) / 1000 or 2.5 * self.model.decode_per_token
            self.model.decode_per_token = step_s / self.accept_length
        if "drift" in self.faults:
            self.model.drift_per_min = float(self.faults["drift"] or "0.1")
        self.ready = threading.Event()
        self.completed = 0
        self.count_lock = threading.Lock()
        self.served = {"requests": 0, "ttft_sum": 0.0, "e2e_sum": 0.0, "generated": 0, "errors": 0, "running": 0,
                       "ttft_buckets": [0] * len(BUCKETS[env.get("DOUBLE_SHAPE", "sglang")]["ttft"]),
                       "e2e_buckets": [0] * len(BUCKETS[env.get("DOUBLE_SHAPE", "sglang")]["e2e"])}
        self.kv_tokens = int(env.get("DOUBLE_KV_TOKENS", "500000"))
        self.failures = random.Random(int(env.get("DOUBLE_SEED", "0")))
        self.model_id = args.served_model_name or args.model_path

    def log(self, line):
        print(line, flush=True)

    def transport(self, src, dst):
        """The 'via' text NCCL would print for one connection, from the environment."""
        version = tuple(int(x) for x in self.env.get("DOUBLE_NCCL_VERSION", "2.28.9").split("."))
        shm = "SHM/direct" if version >= (2, 30, 7) else "SHM/direct/direct"
        if not self.p2p or "ignore_p2p" in self.faults:
            return shm
        half = max(self.args.tp_size // 2, 1)
        if self.env.get("DOUBLE_NCCL_TOPOLOGY") == "two-roots" and (src < half) != (dst < half):
            return shm  # across PCIe root complexes NCCL falls back to SHM
        return "P2P/CUMEM" if self.cumem else "P2P/IPC"

    def nccl_say(self, rank, text):
        self.log(f"{socket.gethostname()}:{os.getpid() + rank}:{os.getpid() + rank} [{rank}] NCCL INFO {text}")

    def nccl_connect(self, channel, src, dst):
        via = self.transport(src, dst)
        # Real NCCL 2.28 prints "Channel 00/0 :" for P2P and "Channel 00 :" for SHM.
        label = f"{channel:02d}/0" if via.startswith("P2P") else f"{channel:02d}"
        self.nccl_say(src, f"Channel {label} : {src}[{src}] -> {dst}[{dst}] via {via}")

    def nccl_lines(self):
        """Start-up lines shaped like a real single-node NCCL_DEBUG=INFO log: one process per
        rank, a communicator line per rank, the ring order per channel, one-direction ring
        connections per channel, "Connected all rings", tree chains, "Connected all trees"."""
        version = self.env.get("DOUBLE_NCCL_VERSION", "2.28.9")
        cuda = self.env.get("DOUBLE_CUDA", "13.0")
        ranks = self.args.tp_size
        for rank in range(ranks):
            self.nccl_say(rank, f"NCCL version {version}+cuda{cuda}")
            # NCCL_DEBUG=INFO's ENV lines: each parameter NCCL read from the environment (real H200 shape)
            for name in sorted(NCCL_PARAMS & set(self.env) - {self.faults.get("drop_env")}):
                self.nccl_say(rank, f"{name} set by environment to {self.env[name]}")
        if ranks >= 2:
            self.nccl_topology(ranks, int(self.env.get("DOUBLE_NCCL_CHANNELS", "2")))

    def nccl_topology(self, ranks, channels):
        """The communicator, its rings and trees, rank by rank and channel by channel."""
        for rank in range(ranks):
            self.nccl_say(rank, f"comm 0x{0x7f000 + rank:x} rank {rank} nRanks {ranks} nNodes 1 localRanks {ranks} "
                                f"localRank {rank} MNNVL 0")
        for channel in range(channels):
            self.nccl_say(0, f"Channel {channel:02d}/{channels} : " + " ".join(str(r) for r in range(ranks)))
        for channel in range(channels):
            for rank in range(ranks):
                self.nccl_connect(channel, rank, (rank + 1) % ranks)
        for rank in range(ranks):
            self.nccl_say(rank, "Connected all rings")
        for channel in range(channels):
            for rank in range(1, ranks):
                self.nccl_connect(channel, rank, rank - 1)
        for rank in range(ranks):
            self.nccl_say(rank, "Connected all trees")

    def say(self, key, **values):
        """One line in the real shape of the engine this double plays (its adapter's example)."""
        shape = self.env.get("DOUBLE_SHAPE", "sglang")
        stamp = time.strftime("%Y-%m-%d %H:%M:%S" if shape == "sglang" else "%m-%d %H:%M:%S")
        self.log(engine_adapters.example(shape, key, time=stamp, pid=os.getpid(), model=self.args.model_path,
                                         tp=self.args.tp_size, port=self.args.port,
                                         version=self.server_info()["version"], **values))

    def start(self):
        shape = self.env.get("DOUBLE_SHAPE", "sglang")
        self.log(f"engine_double (TEST DOUBLE for {'SGLang' if shape == 'sglang' else 'vLLM'} "
                 f"{self.server_info()['version']}) starting")
        if shape == "vllm":
            self.say("starting")
            self.say("engine-init", car_off=not self.custom_ar)
        else:
            self.log(f"server_args={json.dumps(self.server_info())}")
        if "fail_at_start" in self.faults:
            self.log("Traceback (most recent call last):")
            self.log("RuntimeError: injected fault: fail_at_start")
            os._exit(1)
        self.say("distributed-init", nccl=self.env.get("DOUBLE_NCCL_VERSION", "2.28.9"))
        self.nccl_lines()
        if "warn_at_start" in self.faults:
            self.log(f"{socket.gethostname()}:{os.getpid()}:{os.getpid()} [0] misc/cudawrap.cc:179 NCCL WARN "
                     "Failed to find CUDA library libcuda.so (NCCL_CUDA_PATH='') :")
        if "worker_died_at_start" in self.faults:
            self.worker_died(shape)
            return
        self.all_reduce_lines()
        if "hang_before_ready" in self.faults:
            self.log("waiting for workers (injected fault: hang_before_ready)")
            return
        self.capture_graphs()
        self.load_weights()
        self.serve(shape)

    def worker_died(self, shape):
        if shape == "vllm":
            self.log(f"ERROR {time.strftime('%m-%d %H:%M:%S')} [multiproc_executor.py:135] Worker proc "
                     "VllmWorker-1 died unexpectedly, shutting down executor.")
        else:
            self.log("[rank1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught collective operation timeout: "
                     "WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=134217728, NumelOut=134217728, "
                     "Timeout(ms)=600000) ran for 600059 milliseconds before timing out.")

    def all_reduce_lines(self):
        if self.custom_ar and self.p2p:
            # the engine using its custom all-reduce: it registers its CUDA-graph buffers
            self.say("custom-all-reduce-enabled", n=4 * max(self.args.tp_size, 1) * 67)
        else:
            reason = "--disable-custom-all-reduce is set" if not self.custom_ar else "P2P is disabled"
            self.say("custom-all-reduce-disabled", reason=reason)

    def capture_graphs(self):
        name, _, value = (self.faults.get("capture_fails_on") or "").partition("=")
        if name and self.env.get(name) == value and name != self.faults.get("drop_env"):
            # NCCL refuses the collective captured into the graph; the engine dies before it serves
            self.say("cuda-graph-capture")
            self.say("cuda-graph-failed", cause="NCCL error: invalid usage (run with NCCL_DEBUG=WARN for details)")
            os._exit(1)

    def load_weights(self):
        # A start-up that takes long logs its progress as a real engine's weight loading does (a line a
        # second), so a slow start is told from a hang (hang_before_ready: one line, then nothing).
        startup = float(self.faults.get("startup") or self.env.get("DOUBLE_STARTUP_S", "1.0"))
        shards = max(1, int(startup))
        for shard in range(shards):
            if startup > 2:
                self.log(f"Loading safetensors checkpoint shards: {shard + 1}/{shards}")
            time.sleep(startup / shards)
        while self.faults.get("ready_after_removed") and os.path.exists(self.faults["ready_after_removed"]):
            time.sleep(0.2)

    def serve(self, shape):
        self.model.ready_at = time.monotonic()
        if "burst" in self.faults:
            seconds = float((self.faults["burst"] or "30").split(":")[0])
            for _ in range(2):  # real CPU load, as a neighbour's job would put on the host
                subprocess.Popen([sys.executable, "-c", f"import time\nend = time.time() + {seconds}\n"
                                  "while time.time() < end: pass"], start_new_session=True)
        # A KV-loss fault: fewer tokens fit (as cuMem or all-reduce buffers take memory), so fewer requests at once.
        kv_tokens = int(int(self.env.get("DOUBLE_KV_TOKENS", "500000")) * (1 - float(self.faults.get("kv_loss") or 0)))
        self.say("kv-cache", kv_tokens=kv_tokens)
        stated = min(4096, kv_tokens // 128) if shape == "sglang" else f"{kv_tokens / self.args.context_length:.2f}"
        self.say("capacity", kv_tokens=kv_tokens, max_concurrency=stated, context=self.args.context_length)
        self.say("http-starting")
        self.ready.set()
        self.say("ready")

    def server_info(self):
        a = self.args
        return {
            "engine": "engine_double",
            "version": self.env.get("DOUBLE_VERSION", "0.5.5"),
            "model_path": a.model_path,
            "revision": a.revision,
            "served_model_name": self.model_id,
            "tp_size": a.tp_size,
            "context_length": a.context_length,
            "disable_custom_all_reduce": a.disable_custom_all_reduce,
            "chunked_prefill_size": a.chunked_prefill_size,
            "speculative_algorithm": a.speculative_algorithm,
            "speculative_num_steps": a.speculative_num_steps,
            "speculative_eagle_topk": a.speculative_eagle_topk,
            "speculative_num_draft_tokens": a.speculative_num_draft_tokens,
            "port": a.port,
        }

    def token_times(self, started, prompt_tokens, count, extra=1.0):
        """Yields as each of `count` tokens is due: the first after the time to first token, the
        rest one decode step apart, all scaled by this request's noise factor (and `extra`); the
        request is counted in /metrics when its last token is out."""
        factor = self.model.request_factor() * (1.0 - float(self.faults.get("speedup") or 0.0)) \
            * (1.0 + float(self.faults.get("slowdown") or 0.0)) * self.burst_factor() * extra
        due = started + self.model.ttft(prompt_tokens) * factor
        first = None
        for index in range(count):
            if index:
                due += self.model.decode() * factor
            time.sleep(max(0.0, due - time.monotonic()))
            first = first if first is not None else time.monotonic() - started
            yield index
        with self.count_lock:
            e2e = time.monotonic() - started
            self.served["requests"] += 1
            self.served["ttft_sum"] += first or 0.0
            self.served["e2e_sum"] += e2e
            self.served["generated"] += count
            shape = BUCKETS[self.env.get("DOUBLE_SHAPE", "sglang")]
            for role, value in (("ttft", first or 0.0), ("e2e", e2e)):
                index = next((n for n, bound in enumerate(shape[role]) if value <= bound), None)
                if index is not None:  # above the last bound: counted in +Inf (the _count) only
                    self.served[f"{role}_buckets"][index] += 1
        if self.accept_length and self.env.get("DOUBLE_SHAPE", "sglang") == "sglang":
            # SGLang logs speculation's accept length in its decode lines, with or without --enable-metrics
            self.say("decode-batch", tokens=count, accept=self.accept_length,
                     tps=count / max(time.monotonic() - started, 1e-6))

    def metrics_text(self):
        """Prometheus /metrics in the shape of the engine it plays (the names its adapter reads)."""
        shape = self.env.get("DOUBLE_SHAPE", "sglang")
        names = engine_adapters.adapter(shape)["metrics"]
        label = f'{{model_name="{self.model_id}"}}'
        with self.count_lock:
            served = dict(self.served)
        lines = []
        for role in ("ttft", "e2e"):
            lines += [f"# TYPE {names[role]} histogram", f"{names[role]}_sum{label} {served[f'{role}_sum']}",
                      f"{names[role]}_count{label} {float(served['requests'])}"]
            total = 0
            for bound, count in zip(BUCKETS[shape][role], served[f"{role}_buckets"], strict=True):
                total += count
                lines.append(f'{names[role]}_bucket{{le="{bound}",model_name="{self.model_id}"}} {float(total)}')
            lines.append(f'{names[role]}_bucket{{le="+Inf",model_name="{self.model_id}"}} {float(served["requests"])}')
        lines += [f"# TYPE {names['generated']} counter", f"{names['generated']}{label} {float(served['generated'])}",
                  f"# TYPE {names['kv_usage']} gauge",
                  f"{names['kv_usage']}{label} {min(1.0, served['running'] * 1000 / max(self.kv_tokens, 1))}"]
        if shape == "sglang":  # every request received, and the aborted ones
            lines += [f"{names['requests']}{label} {float(served['requests'] + served['errors'])}",
                      f"{names['errors']}{label} {float(served['errors'])}"]
        else:  # vLLM: finished requests by finished_reason
            lines += [f'{names["requests"]}{{finished_reason="stop",model_name="{self.model_id}"}} '
                      f'{float(served["requests"])}',
                      f'{names["requests"]}{{finished_reason="abort",model_name="{self.model_id}"}} '
                      f'{float(served["errors"])}']
        # no_spec_metrics: a server whose /metrics say nothing of speculation (SGLang without --enable-metrics)
        speculating = self.accept_length and "no_spec_metrics" not in self.faults
        if speculating and names.get("accept_length"):  # SGLang: a gauge
            lines += [f"# TYPE {names['accept_length']} gauge", f"{names['accept_length']}{label} {self.accept_length}"]
        elif speculating:  # vLLM: counters, accept length = 1 + accepted / drafts
            drafts = served["generated"] / self.accept_length
            accepted = drafts * (self.accept_length - 1)
            lines += [f"{names['drafts']}{label} {drafts}", f"{names['accepted']}{label} {accepted}"]
        return "\n".join(lines) + "\n"

    def cell_burst(self, is_cell):
        """1 + F for the first N cell requests of a burst_cells:N:F fault (its busy neighbours start with
        the first and are stopped after the last), else 1."""
        if "burst_cells" not in self.faults or not is_cell:
            return 1.0
        count, _, extra = (self.faults["burst_cells"] or "8:0.3").partition(":")
        with self.count_lock:
            self.cell_requests = getattr(self, "cell_requests", 0) + 1
            seen = self.cell_requests
            if seen == 1:
                self.neighbours = [subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 600\n"
                                                     "while time.time() < end: pass"], start_new_session=True)
                                   for _ in range(2)]
            if seen > int(count):
                for neighbour in getattr(self, "neighbours", []):
                    neighbour.kill()
                return 1.0
        return 1.0 + float(extra or "0.3")

    def burst_factor(self):
        """1 + F while a burst:S:F fault's S seconds after ready last, else 1."""
        if "burst" not in self.faults or self.model.ready_at is None:
            return 1.0
        seconds, _, extra = (self.faults["burst"] or "30:0.1").partition(":")
        within = time.monotonic() - self.model.ready_at < float(seconds)
        return 1.0 + float(extra or "0.1") if within else 1.0

    def request_done(self):
        with self.count_lock:
            self.completed += 1
            done = self.completed
        limit = self.faults.get("crash_after")
        if limit is not None and done >= int(limit or "1"):
            self.log("Traceback (most recent call last):")
            self.log(f"RuntimeError: injected fault: crash_after:{limit}")
            os._exit(1)

    def leave_straggler(self):
        seconds = self.faults.get("straggler") or "600"
        code = f"import time; time.sleep({float(seconds)})"
        command = [sys.executable, "-c", code, WORKER_TAG]
        # Outside the unit's cgroup, like a container worker that outlives `docker run`: a
        # transient unit that systemd itself starts. systemd is stopping this unit and signals
        # every process that appears in its cgroup while it does, so a systemd-run started right
        # after our SIGTERM can be killed in that race: try again a moment later.
        if os.path.exists("/run/systemd/system"):
            problem = None
            for attempt in range(5):
                name = f"{STRAGGLER_NAME}-{os.getpid()}-{attempt}"
                try:
                    done = subprocess.run(["systemd-run", "--quiet", "--no-block", "--collect", f"--unit={name}",
                                           "--property=Description=engine double straggler"] + command,
                                          capture_output=True, text=True, timeout=30, check=False)
                except subprocess.TimeoutExpired:
                    problem = "systemd-run did not answer in 30 s"
                    continue
                if done.returncode == 0:
                    problem = None
                    break
                problem = f"systemd-run exited {done.returncode}: {done.stderr.strip()[:200]}"
                time.sleep(0.2)
            if problem:
                self.log(f"could not leave a straggler: {problem}")
                return
        else:
            subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        self.log(f"left a straggler process ({STRAGGLER_NAME})")


class Handler(BaseHTTPRequestHandler):
    """The engine's HTTP API: health, metrics, server info, models and chat completions (the engine is set by
    make_handler)."""

    protocol_version = "HTTP/1.1"
    engine = None

    def log_message(self, *args):  # keep the journal for engine lines
        pass

    def send_json(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def authorized(self):
        key = self.engine.args.api_key
        if key and self.headers.get("Authorization") != f"Bearer {key}":
            self.send_json(401, {"error": "unauthorized"})
            return False
        return True

    def do_GET(self):
        path = self.path.split("?")[0]
        if path in ("/health", "/health_generate"):
            if self.engine.ready.is_set():
                self.send_json(200, {})
            else:
                self.send_json(503, {"error": "server is starting"})
        elif not self.engine.ready.is_set():
            self.send_json(503, {"error": "server is starting"})
        elif path == "/metrics":
            data = self.engine.metrics_text().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        elif path in ("/server_info", "/get_server_info"):
            self.send_json(200, self.engine.server_info())
        elif path == "/model_info":
            self.send_json(200, {"model_path": self.engine.args.model_path, "is_generation": True})
        elif path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [{
                "id": self.engine.model_id, "object": "model", "root": self.engine.args.model_path,
                "max_model_len": self.engine.args.context_length, "owned_by": "engine_double"}]})
        else:
            self.send_json(404, {"error": f"no route {path}"})

    def do_POST(self):
        if self.path.split("?")[0] != "/v1/chat/completions":
            self.send_json(404, {"error": f"no route {self.path}"})
            return
        if not self.engine.ready.is_set():
            self.send_json(503, {"error": "server is starting"})
            return
        if not self.authorized():
            return
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            messages = body["messages"]
        except (ValueError, KeyError) as exc:
            self.send_json(400, {"error": f"bad request: {exc}"})
            return
        faults = self.engine.faults
        if "stall_after" in faults and self.engine.completed >= int(faults["stall_after"] or "0"):
            self.engine.log("a request is waiting for a step that never comes (injected fault: stall_after)")
            time.sleep(3600)
            return
        failing = "fail_requests" in faults or self.engine.failures.random() < float(faults.get("fail_rate") or 0)
        with self.engine.count_lock:
            self.engine.served["errors" if failing else "running"] += 1
        if failing:
            self.send_json(500, {"error": "injected fault: " + ("fail_requests" if "fail_requests" in faults
                                                                  else "fail_rate")})
        else:
            try:
                self.complete(body, messages)
            finally:
                with self.engine.count_lock:
                    self.engine.served["running"] -= 1
        # the tool's untimed warm-up requests are answered like any, and not counted by the faults that count
        # requests (crash_after, stall_after): those count the measured ones, as the tests that set them assume
        if not self.headers.get("X-Request-Id", "").startswith("serving-rollout-warmup-"):
            self.engine.request_done()

    def complete(self, body, messages):
        prompt = message_text(messages)
        prompt_tokens = count_tokens(prompt)
        if prompt_tokens > self.engine.args.context_length:
            self.send_json(400, {"error": f"prompt of {prompt_tokens} tokens exceeds "
                                          f"context length {self.engine.args.context_length}"})
            return
        max_tokens = int(body.get("max_tokens") or 16)
        started = time.monotonic()
        words, tool_calls = self.answer(body, prompt, max_tokens)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": len(words),
                 "total_tokens": prompt_tokens + len(words)}
        ident = f"chatcmpl-double-{os.getpid()}-{self.engine.completed}"
        finish = "tool_calls" if tool_calls else ("length" if len(words) >= max_tokens else "stop")
        pieces = [{"tool_calls": tool_calls}] if tool_calls else [
            {"content": (" " if i else "") + word} for i, word in enumerate(words)]
        is_cell = self.headers.get("X-Request-Id", "").startswith("serving-rollout-cell-")
        produced = self.engine.token_times(started, prompt_tokens, len(pieces), self.engine.cell_burst(is_cell))
        if not body.get("stream"):
            for _ in produced:
                pass
            message = {"role": "assistant", "content": None if tool_calls else " ".join(words)}
            if tool_calls:
                message["tool_calls"] = tool_calls
            choice = {"index": 0, "message": message, "finish_reason": finish}
            if body.get("logprobs") and not tool_calls:
                choice["logprobs"] = token_logprobs(prompt, words, self.engine.faults)
            self.send_json(200, {"id": ident, "object": "chat.completion",
                                 "model": self.engine.model_id, "usage": usage, "choices": [choice]})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        for i, delta in zip(produced, pieces, strict=True):
            if i == 0:
                delta = {"role": "assistant", **delta}
            self.sse({"id": ident, "object": "chat.completion.chunk", "model": self.engine.model_id,
                      "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        self.sse({"id": ident, "object": "chat.completion.chunk", "model": self.engine.model_id,
                  "choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
                  "usage": usage})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def sse(self, payload):
        self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
        self.wfile.flush()

    def answer(self, body, prompt, max_tokens):
        tools = body.get("tools") or []
        if tools and body.get("tool_choice") != "none":
            function = tools[0]["function"]
            arguments = example_for_schema(function.get("parameters", {}), prompt)
            return ["<tool_call>"], [{"id": "call_0", "type": "function", "function": {
                "name": function["name"], "arguments": json.dumps(arguments)}}]
        fmt = body.get("response_format") or {}
        if fmt.get("type") in ("json_object", "json_schema"):
            schema = (fmt.get("json_schema") or {}).get("schema", {"type": "object"})
            value = example_for_schema(schema, prompt)
            if schema.get("type", "object") == "object" and not value:
                value = {"answer": "ok"}
            return json.dumps(value).split(" "), None
        words = answer_words(prompt, max_tokens, self.engine.faults)
        if words and words[0].startswith("word"):  # free text only: the gates' answers stay right
            words = corrupt(words, prompt, float(self.engine.faults.get("corrupt_tokens") or 0),
                            self.engine.corruption)
        return words, None


class QuietOnHangUp(ThreadingHTTPServer):
    """A client that hangs up mid-answer (a user's request cancelled) is no error of the engine: the engines' own
    servers log no traceback for it, so neither does the double (a traceback reads as a crash in its journal)."""

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


def make_handler(engine):
    return type("EngineHandler", (Handler,), {"engine": engine})

def main(argv=None):
    args = parse_engine_args(sys.argv[1:] if argv is None else argv)
    engine = Engine(args, dict(os.environ))
    server = QuietOnHangUp((args.host, args.port), make_handler(engine))
    server.daemon_threads = True

    def on_term(signum, frame):
        if "ignore_sigterm" in engine.faults and signum == signal.SIGTERM:
            engine.log("received SIGTERM; waiting for the open client streams to close (injected fault)")
            return
        engine.log(f"received signal {signum}, shutting down")
        engine.ready.clear()
        for neighbour in getattr(engine, "neighbours", []):
            neighbour.kill()
        if "straggler" in engine.faults:
            engine.leave_straggler()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    threading.Thread(target=engine.start, daemon=True).start()
    server.serve_forever()
    engine.log("engine_double stopped")


if __name__ == "__main__":
    main()
