"""Engine adapters: what SGLang and vLLM really print and serve, in one place per engine.

Every rule here was read from a real log (tests/fixtures/engine-logs/corpus.yml names each
log's source): how an engine tells that it is ready (HTTP is the truth, the log only shows
progress), the phases of its start with their log signatures, what a crash looks like and
which line is its cause, what is noise (a healthy engine's warnings, vLLM's clean-stop ERROR),
where the NCCL version is printed, how custom all-reduce shows its state, the process titles
of its workers (orphans), and how it stops. The rollout, the preflight, the fact modules and
the lab double read these; nothing else names an engine's strings.

Pure functions over text; no I/O.
"""

import ast
import json
import re

# A signature: (name, regular expression, kind). kind is "fatal" (the engine is crashing or dead)
# or "warning" (an error-looking line a healthy engine may print; judged against the baseline).
# Order is priority: when several fatal signatures appear, the first named here is the crash
# (a watchdog time-out kills the worker with SIGABRT: the time-out is the cause, "died -6" the echo).
_CAUSES = (
    ("nccl-watchdog-timeout", r"Watchdog caught collective operation timeout", "fatal"),
    ("cuda-oom", r"(?i)CUDA out of memory|OutOfMemoryError", "fatal"),
    ("kv-cache-no-memory", r"No available memory for the cache blocks", "fatal"),
    ("kv-cache-too-small", r"larger than the maximum number of tokens that can be stored in KV cache", "fatal"),
    ("nccl-error", r"NCCL [Ee]rror\b", "fatal"),                          # RuntimeError: NCCL error: ...; NCCL Error 5
    ("cuda-failed", r"(?i)\bFailed: Cuda error\b", "fatal"),             # custom_all_reduce.cuh, lower-case "Cuda"
    ("cuda-error", r"(?i)\bCUDA(RT)? error\b", "fatal"),
    ("python-fatal-error", r"Fatal Python error: ", "fatal"),            # faulthandler: no "Traceback" word
    # faulthandler's frames ("line N in f", no comma) and headers, even when the error line is cut off
    ("python-faulthandler-dump", r"(?:Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\)|"
                                 r"^\s*(?:\([^)]*\)\s*)?File \"[^\"]+\", line \d+ in \S+\s*$", "fatal"),
    ("sigsegv", r"\*\*\* SIGSEGV received", "fatal"),
    ("cpp-terminate", r"terminate called after throwing", "fatal"),
    ("xid", r"\bXid\b", "fatal"),
)
_ECHOES = (
    ("python-traceback", r"Traceback \(most recent call last\)", "fatal"),
)
_WARNINGS = (
    ("nccl-warn", r"NCCL WARN\b", "warning"),
)

# Warnings a healthy engine prints: shown as noise, never an error. Each has a corpus log.
_NOISE_COMMON = (
    # NCCL tried an external network plugin, did not find it, and uses its internal one.
    ("nccl-net-plugin-fallback", r"NET/Plugin ?: .*(No plugin found|[Cc]ould not find|cannot open shared object)"),
    ("nccl-ibverbs-missing", r"Failed to open libibverbs\.so"),
    ("cuda-graph-waits-for-nccl", r"Waiting for pending NCCL work to finish before starting graph capture"),
)

# The NCCL version, wherever it is printed: NCCL's own line (2.21+ "NCCL INFO NCCL version",
# <= 2.20 a bare "NCCL version 2.20.5+cuda12.4" line), torch's error text ("..., NCCL version 2.18.1"),
# and the engine's own "is using nccl==" line.
_NCCL_VERSION_RES = (
    re.compile(r"\bNCCL version (\d+\.\d+\.\d+)"),
    re.compile(r"\bis using nccl==(\d+\.\d+\.\d+)"),
)

# The cause line of a crash: a Python exception with its message, minus the engine's log prefix.
_EXCEPTION_RE = re.compile(r"((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt)): (.+)$")
# vLLM's and Ray's per-process prefixes, and a log-level/time/source prefix before the message.
# journald's "Feb 04 08:47:05 host unit[pid]: ", compose's "name  | ", Ray's "(Worker pid=N, ip=...)",
# torch's "[rank0]:", vLLM's "ERROR 03-11 11:58:53 [core.py:1100] " (old: "... core.py:45] ").
_PREFIX_RE = re.compile(r"^(?:\S+ \d+ \d\d:\d\d:\d\d \S+ [\w.@-]+\[\d+\]: )?(?:[\w.-]*\s*\|\s+)?"
                        r"(?:\((?:[\w.-]+ )?pid=[\d.]+(?:, ip=[\d.]+)?\)\s*)*"
                        r"(?:\[rank\d+\]:\s*)?"
                        r"(?:(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) (?:\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? )?"
                        r"(?:\[[^\]]+\]|\S+\]) )?")
# Exceptions that only say "see above": never the cause when another line is there.
_ECHO_CAUSES = ("EngineDeadError", "AsyncEngineDeadError", "EngineGenerateError", "ChildProcessError",
                "ProcessExitedException")

SGLANG = {
    "name": "sglang",
    # /health_generate runs one real generation; /health answers once the HTTP server is up.
    "health_paths": ["/health_generate", "/health"],
    "models_path": "/v1/models",
    # --port's default (sglang/srt/server_args.py): a unit without --port serves here.
    "default_port": 30000,
    # Log lines are progress only: with --log-level warning SGLang prints none of them.
    "ready_lines": [r"The server is fired up and ready to roll!"],
    # Its whole configuration at start: ServerArgs(...) (the double: a JSON object).
    "config_dump": r"server_args=(ServerArgs\(.*\)|\{.*\})\s*$",
    "config_dump_is_complete": True,
    # What the scheduler finally runs with, after its own adjustments (the requested server_args may differ):
    # "max_total_num_tokens=N, chunked_prefill_size=N, ..., max_running_requests=N, context_len=N".
    "effective_args": r"max_total_num_tokens=\d+, (.*)$",
    "phases": [
        ("starting", r"server_args=ServerArgs\(|server_args=\{"),
        ("distributed-init", r"Init torch distributed begin|sglang is using nccl==|"
                             r"NCCL INFO (?:NCCL version|Bootstrap)"),
        ("loading-weights", r"Load weight begin|Loading safetensors checkpoint shards"),
        ("weights-loaded", r"Load weight end"),
        ("kv-cache", r"KV Cache is allocated|Memory pool end"),
        ("cuda-graph-capture", r"Capture cuda graph begin|Capturing batches"),
        ("cuda-graph-captured", r"Capture cuda graph end"),
        ("http-starting", r"max_total_num_tokens=|Uvicorn running on|Application startup complete"),
        ("ready", r"The server is fired up and ready to roll!"),
    ],
    "crashes": _CAUSES + (
        ("graph-capture-failed", r"Capture (?:cuda|CUDA) graph failed", "fatal"),
        ("warmup-failed", r"Initialization failed\. warmup error", "fatal"),
        ("scheduler-exception", r"Scheduler hit an exception", "fatal"),
        ("subprocess-dead", r"Received sigquit from a child process|Child process unexpectedly failed", "fatal"),
    ) + _ECHOES + _WARNINGS,
    # Lines a stuck engine repeats: the log grows, the start does not progress.
    "stuck_lines": [],
    "noise": _NOISE_COMMON,
    # Lines of an orderly stop, after which an engine's own error-looking lines are not a crash.
    "stop_lines": [r"Shutting down|Application shutdown complete|Finished server process"],
    "stop_noise": [],
    "custom_all_reduce": {
        "enabled": [r"Registering \d+ cuda graph addresses"],
        "disabled": [r"Custom allreduce is disabled", r"Custom all-?reduce kernels are temporarily disabled"],
        "config_off": [r"disable_custom_all_reduce=True"],
    },
    "kv_cache_tokens": [r"KV Cache is allocated\. #tokens: (\d[\d,]*)", r"max_total_num_tokens=(\d[\d,]*)"],
    # The requests the engine says it will run at once (its scheduler's limit, after the KV cache is sized).
    "max_concurrency": [r"max_running_requests=(\d+)"],
    # Prometheus /metrics (served with --enable-metrics; sgl-project/sglang docs/references/production_metrics.md):
    # histograms (_sum, _count), counters (_total); speculation reports its accept length as a gauge.
    "metrics": {"ttft": "sglang:time_to_first_token_seconds", "e2e": "sglang:e2e_request_latency_seconds",
                "generated": "sglang:generation_tokens_total", "accept_length": "sglang:spec_accept_length",
                "enable": "--enable-metrics"},
    # setproctitle names: the scheduler (one per TP rank) holds the GPU memory; orphans reparent to PID 1.
    "process_titles": [r"sglang::scheduler\w*", r"sglang::detokenizer", r"sglang::data_parallel_controller"],
    # SGLang's launch_server exits on SIGTERM and kills its process tree; a scheduler that detached
    # is what gpu_free's terminate finds.
    "stop": {"waits_for_open_streams": False},
    "examples": {
        "starting": "[{time}] server_args=ServerArgs(model_path='{model}', tp_size={tp})",
        "distributed-init": "[{time} TP0] sglang is using nccl=={nccl}",
        "loading-weights": "[{time} TP0] Load weight begin. avail mem=78.50 GB",
        "weights-loaded": "[{time} TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, "
                          "avail mem=60.11 GB",
        "kv-cache": "[{time} TP0] KV Cache is allocated. #tokens: {kv_tokens}, K size: 20.00 GB, V size: 20.00 GB",
        # sgl-project/sglang#2468 (the corpus): the scheduler's limits once the memory pool is sized
        "capacity": "[{time} TP0] max_total_num_tokens={kv_tokens}, max_prefill_tokens=16384, "
                    "max_running_requests={max_concurrency}, context_len={context}",
        "cuda-graph-capture": "[{time} TP0] Capture cuda graph begin. This can take up to several minutes.",
        "cuda-graph-captured": "[{time} TP0] Capture cuda graph end. Time elapsed: 2.19 s",
        # sgl-project/sglang#27948 (the corpus): a capture that fails ends the scheduler with this line
        "cuda-graph-failed": "Exception: Capture cuda graph failed: {cause}",
        "custom-all-reduce-enabled": "[{time} TP0] Registering {n} cuda graph addresses",
        "custom-all-reduce-disabled": "[{time} TP0] Custom allreduce is disabled because {reason}",
        "http-starting": "[{time}] INFO:     Uvicorn running on http://0.0.0.0:{port} (Press CTRL+C to quit)",
        "ready": "[{time}] The server is fired up and ready to roll!",
    },
}

VLLM = {
    "name": "vllm",
    # /health is 200 once the engine core is up; /v1/models lists the served model.
    "health_paths": ["/health", "/v1/models"],
    "models_path": "/v1/models",
    # --port's default (vllm serve and the OpenAI API server): a unit without --port serves here.
    "default_port": 8000,
    "ready_lines": [r"Starting vLLM API server(?: \d+)? on http", r"Starting vLLM server on http",
                    r"Application startup complete\.", r"Uvicorn running on http"],
    # Only the arguments that differ from vLLM's defaults, as a Python dict literal.
    "config_dump": r"non-default args: (\{.*\})\s*$",
    "config_dump_is_complete": False,
    "phases": [
        ("starting", r"vLLM API server version|non-default args: \{|args: Namespace\("),
        ("engine-init", r"Initializing a V1 LLM engine|Initializing an LLM engine"),
        ("distributed-init", r"vLLM is using nccl==|world_size=\d+ rank=\d+|NCCL INFO (?:NCCL version|Bootstrap)"),
        ("loading-weights", r"Loading safetensors checkpoint shards|Starting to load model"),
        ("weights-loaded", r"Loading weights took|Loading model weights took|Model loading took"),
        ("compiling", r"Dynamo bytecode transform time|torch\.compile take|for vLLM's torch\.compile"),
        ("kv-cache", r"KV cache size: [\d,]+ tokens|# GPU blocks: \d+|Available KV cache memory|# CPU blocks: \d+"),
        ("cuda-graph-capture", r"Capturing CUDA graph|Capturing the model for CUDA graphs|Capturing cudagraphs"),
        ("cuda-graph-captured", r"Graph capturing finished"),
        ("warmup-done", r"init engine \(profile, create kv cache, warmup model\) took"),
        ("http-starting", r"Starting vLLM API server|Starting vLLM server on|Available routes are"),
        ("ready", r"Application startup complete\."),
    ],
    # A tool or reasoning parser's traceback is one request's failure (the request still got its
    # answer): a warning of the API server, never an engine crash (the lab's real vLLM logs it).
    "crashes": (("request-error", r"\[\w*_(?:tool|reasoning)_parser\.py:\d+\]", "warning"),) + _CAUSES + (
        ("worker-died", r"Worker(?: proc)? \S+(?: pid \d+)? died(?:, exit code: -?\d+| unexpectedly)", "fatal"),
        ("engine-core-fatal", r"EngineCore (?:encountered a fatal error|failed to start)", "fatal"),
        ("engine-dead", r"EngineDeadError|AsyncEngineDeadError|output_handler failed", "fatal"),
    ) + _ECHOES + _WARNINGS,
    # A worker stuck in a collective: the engine core repeats this every 60 s.
    "stuck_lines": [r"No available shared memory broadcast block found"],
    "noise": _NOISE_COMMON,
    "stop_lines": [r"\[shutdown\]|Shutting down FastAPI HTTP server|Waiting for application shutdown|"
                   r"Application shutdown complete|Finished server process"],
    # After an orderly stop began, vLLM logs EngineDeadError from its output handler: not a crash.
    "stop_noise": [r"EngineDeadError", r"AsyncLLM output_handler failed", r"output_handler failed"],
    "custom_all_reduce": {
        "enabled": [r"Registering \d+ cuda graph addresses"],
        "disabled": [r"Custom allreduce is disabled", r"Custom all-?reduce kernels are temporarily disabled"],
        "config_off": [r"disable_custom_all_reduce=True", r"'disable_custom_all_reduce': True"],
    },
    "kv_cache_tokens": [r"KV cache size: (\d[\d,]*) tokens"],
    # How many requests of the full context length fit in the KV cache at once ("6.49x").
    "max_concurrency": [r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x"],
    # Prometheus /metrics (always served; the lab's vLLM 0.32 answers these names): mean acceptance length
    # is 1 + accepted / drafts, bonus token included, as vLLM's own SpecDecoding log line computes it.
    "metrics": {"ttft": "vllm:time_to_first_token_seconds", "e2e": "vllm:e2e_request_latency_seconds",
                "generated": "vllm:generation_tokens_total", "accepted": "vllm:spec_decode_num_accepted_tokens_total",
                "drafts": "vllm:spec_decode_num_drafts_total", "enable": None},
    "process_titles": [r"VLLM::EngineCore\w*", r"VLLM::Worker\w*", r"VllmWorkerProcess", r"VLLM::APIServer"],
    # The OpenAI API server waits for open client streams to close on SIGTERM, whatever its
    # shutdown timeout: a stop must have its own deadline and escalate.
    "stop": {"waits_for_open_streams": True},
    "examples": {
        "starting": "(APIServer pid={pid}) INFO {time} [api_server.py:1287] vLLM API server version {version}",
        "non-default-args": "(APIServer pid={pid}) INFO {time} [utils.py:328] non-default args: {args}",
        "engine-init": "(EngineCore_DP0 pid={pid}) INFO {time} [core.py:70] Initializing a V1 LLM engine (v{version}) "
                       "with config: model='{model}', tensor_parallel_size={tp}, disable_custom_all_reduce={car_off}",
        "distributed-init": "(VllmWorker TP0 pid={pid}) INFO {time} [pynccl.py:69] vLLM is using nccl=={nccl}",
        "weights-loaded": "(VllmWorker TP0 pid={pid}) INFO {time} [default_loader.py:262] "
                          "Loading weights took 1.02 seconds",
        "kv-cache": "(EngineCore_DP0 pid={pid}) INFO {time} [kv_cache_utils.py:1087] "
                    "GPU KV cache size: {kv_tokens} tokens",
        # zai-org/GLM-V#204 (the corpus): how many full-length requests fit
        "capacity": "(EngineCore_DP0 pid={pid}) INFO {time} [kv_cache_utils.py:1091] "
                    "Maximum concurrency for {context} tokens per request: {max_concurrency}x",
        "custom-all-reduce-enabled": "(VllmWorker TP0 pid={pid}) INFO {time} [custom_all_reduce.py:203] "
                                     "Registering {n} cuda graph addresses",
        "custom-all-reduce-disabled": "(VllmWorker TP0 pid={pid}) WARNING {time} [custom_all_reduce.py:136] "
                                      "Custom allreduce is disabled because {reason}",
        "cuda-graph-capture": "(VllmWorker TP0 pid={pid}) INFO {time} [gpu_model_runner.py:3400] "
                              "Capturing CUDA graphs (decode, FULL): 0%",
        "cuda-graph-captured": "(VllmWorker TP0 pid={pid}) INFO {time} [gpu_model_runner.py:3480] "
                               "Graph capturing finished in 7 secs, took 0.95 GiB",
        # vllm-project/vllm#7201 (the corpus): the worker's exception under torch's rank prefix
        "cuda-graph-failed": "[rank0]: RuntimeError: {cause}",
        "warmup-done": "(EngineCore_DP0 pid={pid}) INFO {time} [core.py:210] init engine (profile, create kv cache, "
                       "warmup model) took 25.99 seconds",
        "http-starting": "(APIServer pid={pid}) INFO {time} [api_server.py:1912] Starting vLLM API server 0 on "
                         "http://0.0.0.0:{port}",
        "ready": "(APIServer pid={pid}) INFO:     Application startup complete.",
    },
}

# A unit whose engine the tool cannot name (a restore must still read its log): only what every
# engine shares - Python, CUDA and NCCL - and no readiness or phase of its own.
UNKNOWN = {
    "name": "unknown",
    "health_paths": ["/health"],
    "models_path": "/v1/models",
    "default_port": None,  # no engine, no default: the unit's --port or the operator's
    "ready_lines": [],
    "phases": [],
    "crashes": _CAUSES + _ECHOES + _WARNINGS,
    "stuck_lines": [],
    "noise": _NOISE_COMMON,
    "stop_lines": [],
    "stop_noise": [],
    "custom_all_reduce": {"enabled": [], "disabled": [], "config_off": []},
    "kv_cache_tokens": [],
    "max_concurrency": [],
    "metrics": {},
    "process_titles": [],
    "stop": {"waits_for_open_streams": True},
    "examples": {},
}

ADAPTERS = {"sglang": SGLANG, "vllm": VLLM}
ALL = dict(ADAPTERS, unknown=UNKNOWN)


def adapter(engine):
    """The adapter of an engine by name; a clear error naming the value otherwise."""
    try:
        return ALL[engine]
    except (KeyError, TypeError):
        raise ValueError(f"no engine adapter for {engine!r} (known: {', '.join(sorted(ALL))})") from None


def _any(patterns, line):
    return any(re.search(p, line) for p in patterns)


def _strip(line):
    """A line without its journald, compose, Ray, torch-rank and engine-log prefixes."""
    return _PREFIX_RE.sub("", line).strip()


def signature_key(name, line):
    """A signature's identity across invocations: its name and its text with numbers, times,
    pids and addresses blanked, so the same warning of another start is the same signature."""
    body = re.sub(r"0x[0-9a-fA-F]+|\d+", "#", _strip(line))
    return f"{name}: {body[:160]}"


def nccl_versions(text):
    """Every NCCL version the log names, in any of the formats engines and NCCL print."""
    found = set()
    for regex in _NCCL_VERSION_RES:
        found.update(m.group(1) for m in regex.finditer(text or ""))
    return sorted(found)


_FRAME_RE = re.compile(r'File "[^"]+", line \d+ in \S+')


def cause_line(lines, crash=None, crash_pattern=None):
    """The line an operator should see for a crash.

    A specific crash (a watchdog time-out, OOM, an NCCL or CUDA error) shows the exception
    that names it, else its own line; a generic one (a traceback, a worker that died) shows
    the last real exception (not one that only says 'see above'), else its own line. A
    faulthandler dump shows its innermost frame (faulthandler prints the error line first,
    when there is one, and that is a python-fatal-error)."""
    exceptions, echo = [], None
    for line in lines:
        match = _EXCEPTION_RE.search(_strip(line))
        if not match:
            continue
        if match.group(1).split(".")[-1] in _ECHO_CAUSES:
            echo = match.group(0)
        else:
            exceptions.append((line, match.group(0)))
    own = next((_strip(line) for line in lines if crash_pattern and re.search(crash_pattern, line)), None)
    if crash == "python-faulthandler-dump":
        frame = next((_FRAME_RE.search(line).group(0) for line in lines if _FRAME_RE.search(line)), None)
        return f"faulthandler dump, innermost frame: {frame}" if frame else own
    if crash in {name for name, _, _ in _CAUSES}:
        named = [text for line, text in exceptions if re.search(crash_pattern, line)]
        return named[-1] if named else own
    if exceptions:
        return exceptions[-1][1]
    if crash == "engine-dead":  # the engine's own "dead" exception says more than the handler's line
        return echo or own
    return own or echo


def custom_all_reduce_state(engine, text):
    """{state: enabled | disabled | unknown, evidence: the line that says so, requested_off: bool}.
    Enabled is proven only by the engine using it (registering its CUDA-graph buffers); the
    config saying disable_custom_all_reduce=False is a request, not proof."""
    rules = adapter(engine)["custom_all_reduce"]
    lines = (text or "").splitlines()
    requested_off = any(_any(rules["config_off"], line) for line in lines)
    for line in lines:
        if _any(rules["disabled"], line):
            return {"state": "disabled", "evidence": _strip(line), "requested_off": requested_off}
    for line in lines:
        if _any(rules["enabled"], line):
            return {"state": "enabled", "evidence": _strip(line), "requested_off": requested_off}
    if requested_off:
        return {"state": "disabled", "evidence": "disable_custom_all_reduce=True in the engine's config",
                "requested_off": True}
    return {"state": "unknown", "evidence": None, "requested_off": False}


def phase_of(engine, lines):
    """The last start-up phase the lines show (the phase the engine is in), or None."""
    phases = adapter(engine)["phases"]
    current = None
    for line in lines:
        for name, pattern in phases:
            if re.search(pattern, line):
                current = name
    return current


def kv_cache_tokens(engine, text):
    for pattern in adapter(engine)["kv_cache_tokens"]:
        found = re.findall(pattern, text or "")
        if found:
            return int(found[-1].replace(",", ""))
    return None


def max_concurrency(engine, text):
    """The concurrency the engine states once its KV cache is sized (vLLM: full-length requests
    that fit, SGLang: its max_running_requests), the last one logged, else None."""
    for pattern in adapter(engine)["max_concurrency"]:
        found = re.findall(pattern, text or "")
        if found:
            value = float(found[-1].replace(",", ""))
            return int(value) if value.is_integer() else value
    return None


def read_log(engine, text, known=(), stop_requested=False):
    """Judge one invocation's log.

    known: signature keys of the healthy original's baseline invocation - seen there, so
    noise here (shown, not an error). stop_requested: the tool (or the operator) stopped this
    invocation, so the engine's own clean-stop errors are noise from the first line. Returns
    {engine, ready_logged, phase, crashed, crash, cause, errors, warnings, noise, stuck,
    signatures, stopping, nccl_versions, custom_all_reduce, kv_cache_tokens, max_concurrency}: errors are the
    lines of fatal signatures and of warnings new against the baseline; crashed is whether a
    fatal signature appeared (outside an orderly stop); crash names the most specific one."""
    rules = adapter(engine)
    lines = (text or "").splitlines()
    known = set(known or ())
    errors, noise, warnings, signatures, stuck = [], [], [], [], []
    found = {}
    stopping = bool(stop_requested)
    for line in lines:
        if _any(rules["stop_lines"], line):
            stopping = True
        if _any([p for _, p in rules["noise"]], line):
            noise.append(line)
            continue
        if stopping and _any(rules["stop_noise"], line):
            noise.append(line)  # vLLM's EngineDeadError of a clean stop
            continue
        if _any(rules["stuck_lines"], line):
            stuck.append(line)
        for rank, (name, pattern, kind) in enumerate(rules["crashes"]):
            if not re.search(pattern, line):
                continue
            key = signature_key(name, line)
            if key not in signatures:
                signatures.append(key)
            if kind == "fatal":
                errors.append(line)
                found.setdefault(name, (rank, pattern))
            elif key in known:
                noise.append(line)
            else:
                warnings.append(line)
                errors.append(line)
            break
    crash, cause = None, None
    if found:
        crash, (_, pattern) = min(found.items(), key=lambda item: item[1][0])
        cause = cause_line(lines, crash, pattern)
    return {
        "engine": rules["name"],
        "ready_logged": any(_any(rules["ready_lines"], line) for line in lines),
        "phase": phase_of(engine, lines),
        "crashed": crash is not None,
        "crash": crash,
        "cause": cause,
        "errors": errors,
        "warnings": warnings,
        "noise": noise,
        "stuck": stuck,
        "signatures": signatures,
        "stopping": stopping,
        "nccl_versions": nccl_versions(text),
        "custom_all_reduce": custom_all_reduce_state(engine, text),
        "kv_cache_tokens": kv_cache_tokens(engine, text),
        "max_concurrency": max_concurrency(engine, text),
    }


# The backend of the engine's distributed world: vLLM names it (`... backend=gloo` on CPU,
# `backend=nccl` on GPUs); NCCL's own lines prove an NCCL communicator for any engine.
_BACKEND_RE = re.compile(r"world_size=\d+ rank=\d+ .*\bbackend=(\w+)")
_NCCL_COMM_RE = re.compile(r"NCCL INFO (?:NCCL version|comm 0x|Channel \d+/\d+|Init COMPLETE)|is using nccl==")


def collectives(text):
    """(backend, evidence line) of an invocation's collectives: "nccl" when NCCL's own lines
    are there, else the backend the engine names ("gloo" for vLLM on CPU), else (None, None)."""
    lines = (text or "").splitlines()
    for line in lines:
        if _NCCL_COMM_RE.search(line):
            return "nccl", _strip(line)
    for line in lines:
        match = _BACKEND_RE.search(line)
        if match:
            return match.group(1).lower(), _strip(line)
    return None, None


def _literal(node, source):
    try:
        return ast.literal_eval(node)
    except ValueError:  # an object's repr (StructuredOutputsConfig(...), an enum): its text
        return ast.get_source_segment(source, node)


def _literal_args(dump):
    """{name: value} of a config dump: a JSON object, a Python dict repr or ServerArgs(k=v, ...);
    values that are not literals (config objects, enums) are kept as their source text."""
    if dump.startswith("{"):
        try:
            return json.loads(dump)
        except ValueError:
            pass
        try:
            node = ast.parse(dump, mode="eval").body
        except SyntaxError:
            return None
        if not isinstance(node, ast.Dict):
            return None
        pairs = zip(node.keys, node.values, strict=True)
        return {_literal(k, dump): _literal(v, dump) for k, v in pairs if k is not None}
    source = "f(" + dump[dump.index("(") + 1:-1] + ")"
    try:
        call = ast.parse(source, mode="eval").body
    except SyntaxError:
        return None
    return {keyword.arg: _literal(keyword.value, source) for keyword in call.keywords if keyword.arg}


def _last_capture(engine, rule, text):
    """The first group of the adapter's `rule` pattern on the invocation's last line that matches it
    (an engine logs its configuration once per start), or None."""
    pattern = adapter(engine).get(rule)
    found = [m.group(1) for m in (re.search(pattern, _strip(line)) for line in (text or "").splitlines()) if m] \
        if pattern else []
    return found[-1] if found else None


def reported_args(engine, text):
    """The engine's own configuration dump of this invocation (its last one): {arg: value},
    or None when it logged none. vLLM's lists only its non-default arguments."""
    dump = _last_capture(engine, "config_dump", text)
    return None if dump is None else _literal_args(dump)


def effective_args(engine, text):
    """What the engine says it finally runs with (SGLang's scheduler limits line, its last one):
    {name: int or text}, or None when it logged none (vLLM: its config dump is the record)."""
    line = _last_capture(engine, "effective_args", text)
    if line is None:
        return None
    pairs = (part.split("=", 1) for part in line.split(", ") if "=" in part)
    return {key.strip(): int(value) if value.strip().isdigit() else value.strip() for key, value in pairs}


def _same_value(reported, wanted):
    if wanted in (None, "") and reported is True:
        return True  # a switch
    if str(reported) == str(wanted):
        return True
    if isinstance(reported, dict) and isinstance(wanted, str):
        try:  # a JSON-valued flag (vLLM's --speculative-config) the dump shows as a dict
            return reported == json.loads(wanted)
        except ValueError:
            return False
    try:
        return float(reported) == float(wanted)
    except (TypeError, ValueError):
        return False


def arg_effect(engine, text, flag, value):
    """Whether the engine's own configuration dump shows `flag` at `value` (a candidate's arg
    control). Returns {flag, key, expected, reported, proven, why}; reported is None when the
    engine does not list the argument (vLLM then runs its default)."""
    rules = adapter(engine)
    key = flag.lstrip("-").replace("-", "_")
    result = {"flag": flag, "key": key, "expected": value, "reported": None, "proven": False}
    effective = effective_args(engine, text) or {}
    if key in effective:  # what the scheduler runs with decides, not what it was asked for
        proven = _same_value(effective[key], value)
        return dict(result, reported=effective[key], proven=proven,
                    why="" if proven else f"{rules['name']}'s scheduler runs {key}={effective[key]!r}, not {value!r}")
    args = reported_args(engine, text)
    if args is None:
        return dict(result, why=f"{rules['name']} logged no configuration dump in this invocation")
    if key not in args:
        where = "its server_args" if rules.get("config_dump_is_complete") else "its non-default args"
        return dict(result, why=f"{rules['name']} lists no {key} among {where}: it runs its default")
    proven = _same_value(args[key], value)
    return dict(result, reported=args[key], proven=proven,
                why="" if proven else f"{rules['name']} reports {key}={args[key]!r}, not {value!r}")


def ready_after_s(engine, stamped):
    """Seconds from an invocation's first line to its first ready line: [(unix_time, line)] in order.
    None when the log never says ready (the ready line is progress; HTTP decides readiness)."""
    rules = adapter(engine)
    if not stamped:
        return None
    first = stamped[0][0]
    for when, line in stamped:
        if _any(rules["ready_lines"], line):
            return round(when - first, 3)
    return None


def process_title_pattern(engine):
    """One regular expression over a process's command line for this engine's worker titles
    (empty for an engine the tool cannot name)."""
    return "|".join(adapter(engine)["process_titles"])


def base_url(engine, engine_args, host="127.0.0.1", port=None):
    """Where the engine answers: the operator's port, else the unit's --port, else the engine's default.
    A ValueError names the engine when none of them is there."""
    port = port or (engine_args or {}).get("--port") or adapter(engine)["default_port"]
    if port in (None, "", True):
        raise ValueError(f"the unit names no --port and engine {engine!r} has no known default port: "
                         "set rollout_engine_port")
    return f"http://{host}:{port}"


def health_path(engine):
    """The route that says the engine serves: SGLang's runs a generation, vLLM's answers once
    its engine core is up."""
    return adapter(engine)["health_paths"][0]


def example(engine, key, **values):
    """An example line of a phase or state, in this engine's real shape (the lab double prints these)."""
    return adapter(engine)["examples"][key].format(**values)
