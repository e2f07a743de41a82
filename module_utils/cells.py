"""One latency cell: n streamed requests at a concurrency, fixed output length, temperature 0,
unique prefixes, each response checked against the output contract; NVML telemetry sampled
alongside. Per request: TTFT, E2E, decode rate, actual prompt tokens, error.
"""

import contextlib
import re
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from . import engine_metrics
from .conditions import (
    BENIGN_CLOCK_EVENTS,
    CONDITION_LIMITS,
    conditions_problem,
    cpu_conditions,
    cpu_times,
    procs_running,
)
from .engine_client import chat as http_chat
from .engine_client import get_text
from .host_commands import ModuleFailure
from .host_lock import Refused, held, lock_lost, read_lock
from .nvml_facts import decode_clock_events
from .prompts import CONTRACT_PATTERN, contract_prompt, contract_violation, with_target
from .unit_stop import engine_changed, unit_identity
from .watchdog import LeaseKeeper


def request_record(index, result, words, pattern, contract_tokens=None):
    """One request's record. contract_tokens: the token contract (exactly that many completion
    tokens, as the engine counts them) instead of the word contract."""
    usage = result["usage"] or {}
    record = {"index": index, "ttft_s": result["ttft_s"], "e2e_s": result["e2e_s"],
              "prompt_tokens": usage.get("prompt_tokens"), "completion_tokens": usage.get("completion_tokens"),
              "decode_tps": None, "error": result["error"], "contract_ok": None}
    if result["ok"]:
        if contract_tokens:
            record["contract_ok"] = record["completion_tokens"] == contract_tokens
            violation = f"{record['completion_tokens']} completion tokens, not {contract_tokens}"
        else:
            record["contract_ok"] = contract_violation(result["content"], words, pattern) is None
            violation = result["content"]
        if not record["contract_ok"]:
            record["response"] = violation
        tokens = record["completion_tokens"] or len((result["content"] or "").split())
        if tokens > 1 and result["e2e_s"] > result["ttft_s"]:
            record["decode_tps"] = (tokens - 1) / (result["e2e_s"] - result["ttft_s"])
    return record


class Telemetry:
    """NVML samples in a background thread: power, temperature, clocks, clock-event reasons."""

    def __init__(self, interval_s):
        self.interval_s = interval_s
        self.samples, self.reason, self.foreign = [], None, None  # foreign: compute processes on the GPUs
        self.stop_event = threading.Event()
        try:
            import pynvml as nvml

            nvml.nvmlInit()
            self.nvml = nvml
        except Exception as exc:  # no binding or driver: telemetry says so
            self.nvml, self.reason = None, f"NVML not available: {exc}"
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        n = self.nvml
        handles = [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]
        while not self.stop_event.is_set():
            at = time.time()
            for index, h in enumerate(handles):
                try:
                    self.samples.append({"t": at, "gpu": index, "power_w": n.nvmlDeviceGetPowerUsage(h) / 1000,
                                         "temp_c": n.nvmlDeviceGetTemperature(h, 0),
                                         "sm_mhz": n.nvmlDeviceGetClockInfo(h, 1),
                                         "mem_mhz": n.nvmlDeviceGetClockInfo(h, 2),
                                         "clock_events": n.nvmlDeviceGetCurrentClocksEventReasons(h)})
                except Exception as exc:  # one failed reading is recorded, not fatal
                    self.samples.append({"t": at, "gpu": index, "error": str(exc)})
            self.stop_event.wait(self.interval_s)

    def __enter__(self):
        if self.nvml:
            n = self.nvml
            try:  # the same engine in both arms holds the same count; another process changes it
                self.foreign = sum(len(n.nvmlDeviceGetComputeRunningProcesses(n.nvmlDeviceGetHandleByIndex(i)))
                                   for i in range(n.nvmlDeviceGetCount()))
            except Exception:  # an unreadable count is left out, not fatal
                self.foreign = None
            self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        if self.nvml:
            self.thread.join()
            self.nvml.nvmlShutdown()

    def summary(self):
        if not self.nvml:
            return {"available": False, "reason": self.reason}
        by_gpu = {}
        for s in self.samples:
            if "error" not in s:
                by_gpu.setdefault(s["gpu"], []).append(s)
        out = {"available": True, "samples": len(self.samples), "gpus": {}}
        for gpu, rows in by_gpu.items():
            events = 0
            for r in rows:
                events |= r["clock_events"]
            out["gpus"][gpu] = {key: {"median": statistics.median(r[key] for r in rows),
                                      "max": max(r[key] for r in rows)}
                                for key in ("power_w", "temp_c", "sm_mhz", "mem_mhz")}
            out["gpus"][gpu]["clock_events_mask"] = events
            out["gpus"][gpu]["clock_events"] = decode_clock_events(events)
        return out


def warm_up(options, body_of):
    """`warmup` untimed requests of the cell's shape at its concurrency before its first timed one: an engine just
    started (the candidate, the restored original) serves its first prompts of a new length or batch markedly
    slower, which a warm original's arm never pays. {requests, failures}, or None without a warm-up."""
    n = int(options.get("warmup") or 0)
    if n < 1:
        return None
    chat = options.get("chat", http_chat)

    def one(index):
        request_id = f"serving-rollout-warmup-{options.get('name', 'cell')}-{options.get('arm', 'arm')}-{index}"
        return chat(options["base_url"], body_of(), api_key=options.get("api_key"),
                    timeout=options.get("timeout_s", 600), request_id=request_id)

    with ThreadPoolExecutor(max_workers=max(1, min(n, options.get("concurrency", 1)))) as pool:
        results = list(pool.map(one, range(n)))
    return {"requests": n, "failures": sum(bool(r.get("error")) for r in results)}


def run_cell(options):
    """Run one cell, or one chunk of it; options: base_url, model, api_key, requests, concurrency,
    prompt_tokens, contract_words, contract_pattern, timeout_s, telemetry_interval_s, first_index
    (the index of this chunk's first request within the cell), engine (its /metrics window is read
    beside the client's figures), warmup (untimed requests first, warm_up), chat."""
    chat = options.get("chat", http_chat)
    words = options.get("contract_words", 32)
    pattern = re.compile(options.get("contract_pattern", CONTRACT_PATTERN))
    n, concurrency = options["requests"], options.get("concurrency", 1)
    first = options.get("first_index", 0)

    # The token contract (a random-weight model cannot keep the word contract): the engine is
    # asked for exactly N tokens (vLLM's and SGLang's min_tokens and ignore_eos) and its own
    # usage count is checked.
    tokens = options.get("contract_tokens") if options.get("contract") == "tokens" else None

    def body_of():
        prompt = with_target(contract_prompt(words), options["prompt_tokens"])
        body = {"model": options.get("model", "default"), "stream": True, "temperature": 0,
                "max_tokens": words * 2 + 16, "messages": [{"role": "user", "content": prompt}],
                "stream_options": {"include_usage": True}}
        if tokens:
            body.update(max_tokens=tokens, min_tokens=tokens, ignore_eos=True)
        return body

    def one(index):
        request_id = f"serving-rollout-cell-{options.get('name', 'cell')}-{options.get('arm', 'arm')}-{index}"
        result = chat(options["base_url"], body_of(), api_key=options.get("api_key"),
                      timeout=options.get("timeout_s", 600), request_id=request_id)
        return request_record(index, result, words, pattern, tokens)

    read_stat = options.get("read_stat", read_proc_stat)
    warmed = warm_up(options, body_of)
    # the engine's own count of this chunk (its /metrics before and after), beside the client's
    engine = options.get("engine")
    scrape = (lambda: engine_metrics.scrape(engine, options["base_url"], api_key=options.get("api_key"),
                                            get=options.get("get_text", get_text))) if engine else None
    metrics_before = scrape() if scrape else None
    started = time.monotonic()
    cpu_before = read_stat()
    with Telemetry(options.get("telemetry_interval_s", 1.0)) as telemetry, RunnableSampler() as runnable, \
            ThreadPoolExecutor(max_workers=concurrency) as pool:
        records = list(pool.map(one, range(first, first + n)))
    cpu_after = read_stat()
    elapsed = time.monotonic() - started
    summary = telemetry.summary()
    conditions = chunk_conditions(cpu_before, cpu_after, summary, telemetry.foreign)
    conditions["cpu_runnable"] = runnable.median()
    return {"requests": records, "elapsed_s": elapsed, "telemetry": summary, "conditions": conditions,
            **({"warmup": warmed} if warmed else {}),
            "engine_metrics": engine_metrics.window(engine, metrics_before, scrape()) if scrape else None,
            "failures": sum(r["error"] is not None for r in records),
            "contract_violations": [{"index": r["index"], "response": r.get("response")}
                                    for r in records if r["contract_ok"] is False]}


class RunnableSampler:
    """The host's runnable processes (/proc/stat procs_running) every 50 ms while a chunk runs:
    a neighbour's busy processes show here whatever the machine's baseline load."""

    def __init__(self, interval_s=0.05):
        self.interval_s, self.samples = interval_s, []
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop_event.is_set():
            try:
                with open("/proc/stat") as handle:
                    value = procs_running(handle.read())
            except OSError:
                return
            if value is not None:
                self.samples.append(value)
            self.stop_event.wait(self.interval_s)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        self.thread.join()

    def median(self):
        return statistics.median(self.samples) if self.samples else None


def read_proc_stat():
    try:
        with open("/proc/stat") as handle:
            return cpu_times(handle.read())
    except (OSError, ValueError, IndexError):
        return None


def chunk_conditions(cpu_before, cpu_after, telemetry, gpu_processes=None):
    """What could disturb this chunk's timings: the machine's CPU busy and steal fractions over
    the chunk, and from NVML the hottest GPU's median temperature, the GPUs' median power, the
    clock-event reasons seen (idle and set clocks left out) and other processes on the GPUs."""
    out = cpu_conditions(cpu_before, cpu_after) if cpu_before and cpu_after else {"cpu_busy": None,
                                                                                  "cpu_steal": None}
    gpus = (telemetry or {}).get("gpus") or {}
    out["temp_c"] = max((g["temp_c"]["median"] for g in gpus.values()), default=None)
    out["power_w"] = sum(g["power_w"]["median"] for g in gpus.values()) if gpus else None
    out["clock_events"] = sorted({e for g in gpus.values() for e in g.get("clock_events") or []}
                                 - BENIGN_CLOCK_EVENTS)
    out["gpu_processes"] = gpu_processes
    return out


def may_go_on(guard, run, when="cells"):
    """Why the run must stop measuring, else None, asked on the host around a chunk (no round trip of its own):
    the lock no longer holds this run's token (another run took it over; the watchdog's lease is renewed when it
    does and guard has lease_s), or the candidate engine exited or restarted since it became ready (guard's
    candidate_unit and candidate_identity: a crash of the run, never a slower arm). guard: lock_path, lock_token,
    lease_s, candidate_unit, candidate_identity. A lease that cannot be written raises host_lock.Refused."""
    lock = held({"path": guard["lock_path"], "token": guard["lock_token"], "lease_s": guard.get("lease_s"),
                 "must_hold": False}, read_lock(guard["lock_path"]), check_mode=False)
    lost = lock_lost(lock)
    if lost or not guard.get("candidate_unit"):
        return lost
    return engine_changed(guard.get("candidate_identity") or {}, unit_identity(run, guard["candidate_unit"]), when)


def run_measured(options):
    """run_cell, and while the chunk ran under conditions unlike the reference (the first
    baseline bracket's), measure it again, at most remeasure_max times. The discarded attempts
    are kept (their conditions and why); a chunk still unlike the reference is marked disturbed."""
    reference = options.get("reference_conditions")
    limits = {**CONDITION_LIMITS, **(options.get("condition_limits") or {})}
    discarded, warmed = [], None
    for attempt in range(1 + max(0, int(options.get("remeasure_max", 2)))):
        # the engine was warmed before the first attempt: a measurement again needs no second warm-up
        result = run_cell(options if attempt == 0 else {**options, "warmup": 0})
        warmed = warmed or result.get("warmup")
        problem = conditions_problem(reference, result["conditions"], limits) if reference else None
        if not problem:
            break
        discarded.append({"conditions": result["conditions"], "problem": problem,
                          "e2e_s": [r["e2e_s"] for r in result["requests"]]})
    result["remeasured"] = discarded[:-1] if problem else discarded
    result["disturbed"] = problem
    return {**result, "warmup": warmed} if warmed else result


def run_for(options, stop_reason):
    """run_measured once or, with for_s (an endurance cell's slice), chunk after chunk of options' requests on the
    host until for_s seconds have passed since the first began, a chunk had a failed request (a hang or an error
    is the cell's verdict already) or stop_reason() names why the run must stop, asked before each further chunk
    as before the first (may_go_on: a round trip each would cost more than the chunk). Returns (the chunks in
    order, that reason or None)."""
    for_s, n = float(options.get("for_s") or 0), int(options["requests"])
    started = time.monotonic()
    chunks = [run_measured(options)]
    while for_s > 0 and time.monotonic() - started < for_s and not chunks[-1]["failures"]:
        stopped = stop_reason()
        if stopped:
            return chunks, stopped
        chunks.append(run_measured({**options, "first_index": int(options.get("first_index", 0)) + n * len(chunks),
                                    "warmup": 0}))
    return chunks, None


def guarded(run, p, when="cells"):
    """Why the run must stop measuring (may_go_on), or None; nothing to check without a lock."""
    if not p["lock_path"]:
        return None
    try:
        return may_go_on(p, run, when)
    except Refused as refused:
        raise ModuleFailure(f"could not read the lock {p['lock_path']}: {refused.msg}") from refused


def measure(run, p, api_key):
    """latency_cell's chunk or endurance slice (its arguments as p; api_key() reads the key on the host): bad
    arguments refused by name; the go-on checks before it, and after it with check_after; the watchdog's lease kept
    while it runs. Its result, or ModuleFailure."""
    for name in ("requests", "concurrency", "prompt_tokens", "contract_words", "contract_tokens"):
        if p[name] < 1:
            raise ModuleFailure(f"{name} must be at least 1, got {p[name]}")
    if p["first_index"] < 0:
        raise ModuleFailure(f"first_index must be at least 0, got {p['first_index']}")
    if p["remeasure_max"] < 0 or p["for_s"] < 0:
        raise ModuleFailure(f"remeasure_max and for_s must be at least 0, got {p['remeasure_max']} and {p['for_s']}")
    stopped = guarded(run, p)
    if stopped:
        return {"changed": False, "cell": None, "chunks": None, "stopped": stopped, "stopped_after": None,
                "lease_renewals": None, "lease_problem": None}
    keeper = LeaseKeeper(p["lock_path"], p["lock_token"], p["lease_s"]) if p["lock_path"] and p["lease_s"] else None
    with keeper or contextlib.nullcontext():
        results, stopped = run_for({**p, "api_key": api_key()}, lambda: guarded(run, p))
    chunks = [{"name": p["name"], "arm": p["arm"], "prompt_tokens_target": p["prompt_tokens"],
               "concurrency": p["concurrency"], **result} for result in results]
    after = guarded(run, p, "last cell") if p["check_after"] and not stopped else None
    return {"changed": False, "cell": None if p["for_s"] else chunks[0], "chunks": chunks if p["for_s"] else None,
            "stopped": stopped, "stopped_after": after, "lease_renewals": keeper.renewals if keeper else None,
            "lease_problem": keeper.problem if keeper else None}

