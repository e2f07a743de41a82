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

from .log_lines import clean as clean_log

# A signature: (name, regular expression, kind). kind is "fatal" (the engine is crashing or dead)
# or "warning" (an error-looking line a healthy engine may print; judged against the baseline).
# Order is priority: when several fatal signatures appear, the first named here is the crash
# (a watchdog time-out kills the worker with SIGABRT: the time-out is the cause, "died -6" the echo).
_CAUSES = (
    ("nccl-watchdog-timeout", r"Watchdog caught collective operation timeout", "fatal"),
    # torch's allocator ("CUDA out of memory. Tried to allocate"), its exception, and the CUDA runtime's own
    # word for it ("CUDA error: out of memory", a graph capture's OOM): crash_phase says where it struck
    ("cuda-oom", r"(?i)CUDA out of memory|OutOfMemoryError|CUDA error: out of memory", "fatal"),
    ("kv-cache-no-memory", r"No available memory for the cache blocks", "fatal"),
    # vLLM V1's start-up memory check (vllm/v1/worker/utils.py request_memory): the engine never starts
    ("gpu-memory-short-at-startup", r"Free memory on device \S*\s*\([\d.]+/[\d.]+ GiB\) on startup is less than "
                                    r"desired GPU memory utilization", "fatal"),
    # V0: "... larger than the maximum number of tokens that can be stored in KV cache (N)";
    # V1: "... KV cache is needed, which is larger than the available KV cache memory (X GiB)"
    ("kv-cache-too-small", r"larger than the maximum number of tokens that can be stored in KV cache|"
                           r"is larger than the available KV cache memory", "fatal"),
    ("cuda-illegal-memory-access", r"(?i)an illegal memory access was encountered|cudaErrorIllegalAddress", "fatal"),
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

# The cause line of a crash: a Python exception with its message, minus the engine's log prefix; or its
# bare name alone on its line (raised without a message: "TimeoutError").
_EXCEPTION_RE = re.compile(r"((?:[A-Za-z_][\w]*\.)*(?:[A-Za-z_]\w*(?:Error|Exception|Interrupt)|Exception)): (.+)$")
_BARE_EXCEPTION_RE = re.compile(r"^((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt))$")
# Python's words between the exceptions of a chain: the one printed before them is the inner one.
_CHAIN_RE = re.compile(r"The above exception was the direct cause of the following exception|"
                       r"During handling of the above exception, another exception occurred")
# The frame a Python traceback names for the raise (faulthandler's frames have no comma: _FRAME_RE).
_RAISE_FRAME_RE = re.compile(r'File "[^"]+", line \d+, in \S+')
# The engine's own word that a line is a warning: vLLM's level ("WARNING 03-22 18:40:47 [..]"), Python
# logging's ("WARNING:", " - WARNING - "), the engines' "To silence this warning", Python's warnings
# ("UserWarning: ") and torch's C++ warnings ("[W1226 15:44:09 ...]", "[rank1]:[W CudaIPCTypes.cpp:16]").
# A crash signature in such a line is a warning, never a crash (SGLang's "Setup Custom allreduce failed
# with CUDART error: ... To silence this warning" on a PCIe pair that then serves).
_ENGINE_WARNING_RE = re.compile(r"\bWARNING(?: \d\d-\d\d |:| - )|To silence this warning|\b[A-Z]\w*Warning: |"
                                r"\[W(?:\d{4} | [\w.]+:\d+\])")
# A CI runner's "[2026-01-28T23:59:42Z] ", vLLM's and Ray's per-process prefixes, and a log-level/time/source
# prefix before the message.
# journald's "Feb 04 08:47:05 host unit[pid]: ", compose's "name  | ", Ray's "(Worker pid=N, ip=...)",
# torch's "[rank0]:", vLLM's "ERROR 03-11 11:58:53 [core.py:1100] " (old: "... core.py:45] ").
_PREFIX_RE = re.compile(r"^(?:\[\d{4}-\d\d-\d\dT[\d:.]+Z\]\s*)?"  # a CI runner's timestamp (buildkite)
                        r"(?:\S+ \d+ \d\d:\d\d:\d\d \S+ [\w.@-]+\[\d+\]: )?(?:[\w.-]*\s*\|\s+)?"
                        r"(?:\((?:[\w.:=-]+ )*pid=[\d.]+(?:, ip=[\d.]+)?\)\s*)*"
                        r"(?:\[rank\d+\]:\s*)?"
                        r"(?:(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) (?:\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? )?"
                        r"(?:\[[^\]]+\]|\S+\]) )?")
# Exceptions that only say "see above": never the cause when another line is there.
_ECHO_CAUSES = ("EngineDeadError", "AsyncEngineDeadError", "EngineGenerateError", "ChildProcessError",
                "ProcessExitedException")

# The NCCL wheels a CUDA build of either engine installs beside torch (a CPU build has none).
NCCL_DISTS = ["nvidia-nccl-cu12", "nvidia-nccl-cu13", "nvidia-nccl-cu11"]

SGLANG = {
    "name": "sglang",
    # /health_generate runs one real generation; /health answers once the HTTP server is up.
    "health_paths": ["/health_generate", "/health"],
    "models_path": "/v1/models",
    # --port's default (sglang/srt/server_args.py): a unit without --port serves here.
    "default_port": 30000,
    # What SGLang sets in NCCL's environment itself when the unit leaves it unset (os.environ.setdefault-like, before
    # NCCL loads): NCCL_CUMEM_ENABLE from --enable-symm-mem (0 without it; always 0 in older releases).
    "sets_env": {"NCCL_CUMEM_ENABLE": "0"},
    # Flags its parser (ServerArgs.add_cli_args) takes with no value (store_true) beyond --enable-*/--disable-*.
    "bare_flags": ("--trust-remote-code", "--skip-tokenizer-init", "--log-requests", "--show-time-cost",
                   "--skip-server-warmup", "--allow-auto-truncate", "--is-embedding"),
    # An engine build (module_utils/engine_build.py): its package, the NCCL wheels it may carry, and the parser its
    # launch_server builds (ServerArgs.add_cli_args), asked for the original's arguments without starting a server.
    "build": {"package": "sglang", "nccl_dists": NCCL_DISTS,
              "parser": {"make": ["sglang.srt.server_args:ServerArgs.add_cli_args"]}},
    # A release's own start-up line naming it (none known: its /get_server_info route is the proof).
    "version_lines": [],
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
        # 0.5 adds piecewise graphs: "Capturing num tokens", "Capture piecewise CUDA graph end"
        ("cuda-graph-capture", r"Capture (?:piecewise )?(?:cuda|CUDA) graph begin|Capturing batches|"
                               r"Capturing num tokens"),
        ("cuda-graph-captured", r"Capture (?:piecewise )?(?:cuda|CUDA) graph end"),
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
        # "Custom allreduce is disabled because ...", SGLang 0.5's "CustomAllreduce is disabled" and
        # "CustomAllReduceV2 is disabled", and its "Setup Custom allreduce failed with ..." (it goes on without)
        "disabled": [r"(?i)Custom ?all-?reduce(?:V2)? is disabled",
                     r"Custom all-?reduce kernels are temporarily disabled", r"Setup Custom allreduce failed"],
        # the config's own value, not the warning's advice ("specify disable_custom_all_reduce=True explicitly")
        "config_off": [r"(?<!specify )disable_custom_all_reduce=True"],
    },
    # 0.5.6 names the dtype first: "KV Cache is allocated. dtype: torch.bfloat16, #tokens: N"
    "kv_cache_tokens": [r"KV Cache is allocated\..*?#tokens: (\d[\d,]*)", r"max_total_num_tokens=(\d[\d,]*)"],
    # The requests the engine says it will run at once (its scheduler's limit, after the KV cache is sized).
    "max_concurrency": [r"max_running_requests=(\d+)"],
    # Speculation's accept length in its decode lines ("Decode batch, ..., accept len: 2.58, ..."), for a
    # server without --enable-metrics.
    "accept_length_lines": [r"Decode batch.*\baccept len: ([\d.]+)"],
    # Prometheus /metrics (served with --enable-metrics; sgl-project/sglang docs/references/production_metrics.md):
    # histograms (_sum, _count, _bucket), counters (_total); speculation reports its accept length as a gauge.
    # requests, errors (aborted) and KV usage (token_usage, a fraction) are what a bake compares.
    "metrics": {"ttft": "sglang:time_to_first_token_seconds", "e2e": "sglang:e2e_request_latency_seconds",
                "generated": "sglang:generation_tokens_total", "accept_length": "sglang:spec_accept_length",
                "requests": "sglang:num_requests_total", "errors": "sglang:num_aborted_requests_total",
                "kv_usage": "sglang:token_usage", "enable": "--enable-metrics"},
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
        # sgl-project/sglang#30047 and #22166 (the corpus): a decode line of a speculating server
        "decode-batch": "[{time} TP0] Decode batch, #running-req: 1, #token: {tokens}, token usage: 0.00, "
                        "accept len: {accept:.2f}, cuda graph: True, gen throughput (token/s): {tps:.2f}, "
                        "#queue-req: 0",
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
    # What vLLM sets in NCCL's environment itself when the unit leaves it unset: env_override.py sets
    # NCCL_CUMEM_ENABLE=0 at import ("NCCL_CUMEM_ENABLE is set to 0, skipping override" when the unit set it),
    # unless the host has IMEX channels (multi-node NVLink), not modelled here.
    "sets_env": {"NCCL_CUMEM_ENABLE": "0"},
    # Flags its parser (EngineArgs.add_cli_args: store_true and BooleanOptionalAction) takes with no value beyond
    # --enable-*/--disable-*/--no-*.
    "bare_flags": ("--trust-remote-code", "--enforce-eager", "--skip-tokenizer-init", "--disable-log-requests",
                   "--disable-log-stats", "--async-scheduling", "--headless"),
    # The parser `python -m vllm.entrypoints.openai.api_server` and `vllm serve` build (make_arg_parser on vLLM's
    # FlexibleArgumentParser, then validate_parsed_serve_args); 0.32 moved it from entrypoints.openai to
    # entrypoints.launchers, the lab's two releases read it from each place.
    "build": {"package": "vllm", "nccl_dists": NCCL_DISTS,
              "parser": {"base": ["vllm.utils.argparse_utils:FlexibleArgumentParser",
                                  "vllm.utils:FlexibleArgumentParser"],
                         "make": ["vllm.entrypoints.launchers.cli_args:make_arg_parser",
                                  "vllm.entrypoints.openai.cli_args:make_arg_parser"],
                         "validate": ["vllm.entrypoints.launchers.cli_args:validate_parsed_serve_args",
                                      "vllm.entrypoints.openai.cli_args:validate_parsed_serve_args"],
                         "positional": ["model_tag"]}},
    # The start-up lines naming the release: the lab's 0.31.0 and 0.32.0 print the banner's "version X" and the engine
    # core's "(vX)"; older releases "vLLM API server version X".
    "version_lines": [r"[\u2580-\u259f]\s+version (\d\S*)\s*$", r"vLLM API server version (\S+)",
                      r"Initializing a V1 LLM engine \(v(\S+)\)"],
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
        # V1's engine core waits for its workers' answer to a call (execute_model, sample_tokens) and gives up
        ("rpc-timeout", r"RPC call to \w+ timed out", "fatal"),
        ("worker-died", r"Worker(?: proc)? \S+(?: pid \d+)? died(?:, exit code: -?\d+| unexpectedly)", "fatal"),
        # V1's API server (or LLM client) found its engine core process gone: "core_client.py ... Engine core
        # proc EngineCore_DP0 died unexpectedly, shutting down client."
        ("engine-core-died", r"Engine core proc \S+ died unexpectedly", "fatal"),
        # Ray reports a worker's failure on its behalf (its own exception wrapped, or the actor gone)
        ("ray-worker-failed", r"RayTaskError|ActorDiedError|The actor died unexpectedly|"
                              r"The actor is dead because its worker process has died", "fatal"),
        ("engine-core-fatal", r"EngineCore (?:encountered a fatal error|failed to start)", "fatal"),
        ("engine-dead", r"EngineDeadError|AsyncEngineDeadError|output_handler failed", "fatal"),
    ) + _ECHOES + _WARNINGS,
    # A worker stuck in a collective: the engine core repeats this every 60 s.
    "stuck_lines": [r"No available shared memory broadcast block found"],
    "noise": _NOISE_COMMON,
    "stop_lines": [r"\[shutdown\]|Shutting down FastAPI HTTP server|Waiting for application shutdown|"
                   r"Application shutdown complete|Finished server process"],
    # After an orderly stop began, vLLM logs EngineDeadError from its output handler: not a crash.
    # A stop the tool asked for can also read as the engine core dying (vllm-project/vllm#41507).
    "stop_noise": [r"EngineDeadError", r"AsyncLLM output_handler failed", r"output_handler failed",
                   r"Engine core proc \S+ died unexpectedly"],
    "custom_all_reduce": {
        "enabled": [r"Registering \d+ cuda graph addresses"],
        "disabled": [r"(?i)Custom ?all-?reduce(?:V2)? is disabled",
                     r"Custom all-?reduce kernels are temporarily disabled"],
        "config_off": [r"(?<!specify )disable_custom_all_reduce=True", r"'disable_custom_all_reduce': True"],
    },
    "kv_cache_tokens": [r"KV cache size: (\d[\d,]*) tokens"],
    # How many requests of the full context length fit in the KV cache at once ("6.49x").
    "max_concurrency": [r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x"],
    # V1's periodic speculation line ("SpecDecoding metrics: Mean acceptance length: 5.44, ...").
    "accept_length_lines": [r"SpecDecoding metrics: .*Mean acceptance length: ([\d.]+)"],
    # Prometheus /metrics (always served; the lab's vLLM 0.32 answers these names): mean acceptance length
    # is 1 + accepted / drafts, bonus token included, as vLLM's own SpecDecoding log line computes it.
    # Finished requests are counted by finished_reason (0.32: stop, length, abort, error, repetition; the lab's
    # /metrics, tests/fixtures/metrics): an abort or an error is a request that failed.
    "metrics": {"ttft": "vllm:time_to_first_token_seconds", "e2e": "vllm:e2e_request_latency_seconds",
                "generated": "vllm:generation_tokens_total", "accepted": "vllm:spec_decode_num_accepted_tokens_total",
                "drafts": "vllm:spec_decode_num_drafts_total", "requests": "vllm:request_success_total",
                "errors": 'vllm:request_success_total{finished_reason=~"abort|error"}',
                "kv_usage": "vllm:kv_cache_usage_perc",
                "enable": None},
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
    "accept_length_lines": [],
    "metrics": {},
    "process_titles": [],
    "stop": {"waits_for_open_streams": True},
    "version_lines": [],
    "examples": {},
}

ADAPTERS = {"sglang": SGLANG, "vllm": VLLM}
ALL = dict(ADAPTERS, unknown=UNKNOWN)


# Both engines' parsers take --enable-X, --disable-X (store_true) and vLLM's --no-X (BooleanOptionalAction) with
# no value: a word after one is the next argument, never its value.
_BOOLEAN_FLAG_RE = re.compile(r"^--(?:enable|disable|no)-[\w-]+$")


def engine_env_sources(engine):
    """What the engine sets in NCCL's environment when nothing above set it, as an NCCL configuration source
    (module_utils/nccl_config.py's python-default: only where no other source set the variable)."""
    values = (ADAPTERS.get(engine) or {}).get("sets_env") or {}
    return [{"source": "python-default", "path": f"the engine ({engine} sets it when unset)", "values": dict(values)}] \
        if values else []


def is_bare_flag(flag, engine=None):
    """Whether the engine's own parser takes `flag` with no value (any known engine's, when engine is None)."""
    if _BOOLEAN_FLAG_RE.match(flag or ""):
        return True
    engines = [ADAPTERS[engine]] if engine in ADAPTERS else ADAPTERS.values()
    return any(flag in a.get("bare_flags", ()) for a in engines)


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


def _exceptions(lines):
    """[(index, exception text, echo?)] of every Python exception line: with its message, or its bare
    name alone on a line; echo when it only says "see above" (EngineDeadError and the like)."""
    found = []
    for index, line in enumerate(lines):
        body = _strip(line)
        match = _EXCEPTION_RE.search(body) or _BARE_EXCEPTION_RE.match(body)
        if match:
            found.append((index, match.group(0), match.group(1).split(".")[-1] in _ECHO_CAUSES))
    return found


def _innermost(real, lines):
    """The exception a chain began with: the first one followed by Python's chain words ("The above
    exception was the direct cause of ..."); without a chain, the last one."""
    for index, text, _ in real:
        if any(_CHAIN_RE.search(line) for line in lines[index + 1:index + 4]):
            return index, text
    return real[-1][:2]


def _raise_frame(lines, index):
    """The traceback frame just above line `index` (where its exception was raised), or None."""
    for line in reversed(lines[max(0, index - 12):index]):
        match = _RAISE_FRAME_RE.search(line)
        if match:
            return match.group(0)
    return None


def crash_cause(lines, crash=None, crash_pattern=None):
    """{cause, frame}: the line an operator should see for a crash, and the frame that raised it.

    A crash whose own signature is an exception's (an NCCL or CUDA error, OOM, KV cache too small, an
    RPC timeout) shows that exception, else its own line; a generic one (a traceback, a worker or the
    engine core that died) shows the innermost real exception of the chain (not one that only says
    'see above'), its bare name where it had no message, else its own line. A faulthandler dump shows
    its innermost frame."""
    found = _exceptions(lines)
    real = [item for item in found if not item[2]]
    echo = next((text for _, text, is_echo in reversed(found) if is_echo), None)
    own = next((_strip(line) for line in lines if crash_pattern and re.search(crash_pattern, line)), None)
    if crash == "python-faulthandler-dump":
        frame = next((_FRAME_RE.search(line).group(0) for line in lines if _FRAME_RE.search(line)), None)
        return {"cause": f"faulthandler dump, innermost frame: {frame}" if frame else own, "frame": frame}
    named = [(index, text) for index, text, _ in real
             if crash_pattern and crash != "python-traceback" and re.search(crash_pattern, lines[index])]
    if named:
        index, text = named[-1]
    elif crash in {name for name, _, _ in _CAUSES}:
        return {"cause": own, "frame": None}
    elif real:
        index, text = _innermost(real, lines)
    elif crash == "engine-dead":  # the engine's own "dead" exception says more than the handler's line
        return {"cause": echo or own, "frame": None}
    else:
        return {"cause": own or echo, "frame": None}
    return {"cause": text, "frame": _raise_frame(lines, index)}


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


def versions_logged(engine, text):
    """The releases the engine's start-up lines name (its adapter's version_lines), in order, once each."""
    found = [v for pattern in adapter(engine)["version_lines"] for v in re.findall(pattern, text or "")]
    return list(dict.fromkeys(found))


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


def accept_length(engine, text):
    """Speculation's accept length as the engine's own log states it, its last report: {value, source,
    line, reports}, or None (no speculation, or an engine that logs none)."""
    for pattern in adapter(engine)["accept_length_lines"]:
        found = [(match, line) for line in (text or "").splitlines() for match in [re.search(pattern, line)] if match]
        if found:
            match, line = found[-1]
            return {"value": float(match.group(1)), "source": "engine log", "line": _strip(line)[:200],
                    "reports": len(found)}
    return None


def _signature(rules, line):
    """(rank, name, pattern, kind) of the first crash signature in the line, or None."""
    for rank, (name, pattern, kind) in enumerate(rules["crashes"]):
        if re.search(pattern, line):
            return rank, name, pattern, kind
    return None


def _judge_line(read, found, known, hit, line, index, survived):
    """File line `index`, which holds a signature. A fatal signature is a crash unless the engine's own
    words call the line a warning or the engine went on to serve after it (survived); a warning is noise
    when the baseline had it, else an error of this invocation."""
    rank, name, pattern, kind = hit
    key = signature_key(name, line)
    if key not in read["signatures"]:
        read["signatures"].append(key)
    if kind == "fatal" and not (survived or _ENGINE_WARNING_RE.search(line)):
        read["errors"].append(line)
        found.setdefault(name, (rank, pattern, index))
    elif key in known:
        read["noise"].append(line)
    else:  # a line the reader classes as a warning is a warning, never an error (shown, judged by whoever reads it)
        read["warnings"].append(line)


def _crash(engine, lines, found):
    """{crash, crash_phase, cause, cause_frame} of the most specific fatal signature found (None without)."""
    if not found:
        return {"crash": None, "crash_phase": None, "cause": None, "cause_frame": None}
    crash, (_, pattern, first) = min(found.items(), key=lambda item: item[1][0])
    why = crash_cause(lines, crash, pattern)
    return {"crash": crash, "crash_phase": phase_of(engine, lines[:first + 1]), "cause": why["cause"],
            "cause_frame": why["frame"]}


def read_log(engine, text, known=(), stop_requested=False):
    """Judge one invocation's log, read through the one line reader (module_utils/log_lines.py).

    known: signature keys of the healthy original's baseline invocation - seen there, so
    noise here (shown, not an error). stop_requested: the tool (or the operator) stopped this
    invocation, so the engine's own clean-stop errors are noise from the first line. Returns
    {engine, ready_logged, phase, crashed, crash, crash_phase, cause, cause_frame, errors, warnings, noise,
    stuck, signatures, stopping, nccl_versions, custom_all_reduce, kv_cache_tokens, max_concurrency,
    accept_length}: errors are the lines of fatal signatures (a line the reader classes as a warning is listed in
    warnings when new against the baseline, in noise when the baseline had it, never among the errors);
    crashed is whether a fatal signature appeared (outside an orderly stop, not in a line the engine calls
    a warning, not before the engine's last ready line); crash names the most specific one, crash_phase
    the start-up phase it struck in."""
    rules = adapter(engine)
    text = clean_log(text)
    lines = text.splitlines()
    ready = [index for index, line in enumerate(lines) if _any(rules["ready_lines"], line)]
    served_at = ready[-1] if ready else -1
    read = {"errors": [], "warnings": [], "noise": [], "stuck": [], "signatures": []}
    found, known = {}, set(known or ())
    stopping = bool(stop_requested)
    for index, line in enumerate(lines):
        stopping = stopping or _any(rules["stop_lines"], line)
        if _any([p for _, p in rules["noise"]], line) or (stopping and _any(rules["stop_noise"], line)):
            read["noise"].append(line)  # a healthy engine's warning; vLLM's EngineDeadError of a clean stop
            continue
        if _any(rules["stuck_lines"], line):
            read["stuck"].append(line)
        hit = _signature(rules, line)
        if hit is not None:
            _judge_line(read, found, known, hit, line, index, index < served_at)
    return {
        "engine": rules["name"],
        "ready_logged": bool(ready),
        "phase": phase_of(engine, lines),
        "crashed": bool(found),
        **_crash(engine, lines, found),
        **read,
        "stopping": stopping,
        "nccl_versions": nccl_versions(text),
        "custom_all_reduce": custom_all_reduce_state(engine, text),
        "kv_cache_tokens": kv_cache_tokens(engine, text),
        "max_concurrency": max_concurrency(engine, text),
        "accept_length": accept_length(engine, text),
    }



def log_failure(read):
    """What a read log (read_log's result) shows wrong, or None: a crash's cause, else the error lines and the
    warnings new against the original's own start. The one judgement of a candidate's start-up, a restored
    original's journal and the journal after an endurance cell."""
    if read.get("crashed"):
        return str(read.get("cause"))
    new = [*(read.get("errors") or []), *(read.get("warnings") or [])]
    return f"error lines new against the original: {' | '.join(map(str, new))}" if new else None

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
