"""Bounded orchestration of the peer-path worker: process groups, time-outs, budgets, verdicts.

Pure Python, no torch: it starts worker processes (a command prefix such as
[python, worker.py] or a container runtime's exec), kills a child's whole process group
when it overruns, and turns results into verdicts. A hang or corruption is a result
(`hung`, `corrupt`), never an exception.
"""

import json
import os
import signal
import socket
import statistics
import time

from .host_commands import TimeoutExpired, start_process
from .nccl_facts import p2p_in_effect, parse_log

MARK = "P2PCHECK_RESULT "
NVLINK_GBPS_PER_LINK = 26.5625  # H100/H200 NVLink 4, per direction
PCIE_GBPS_PER_LANE = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


class Budget:
    """A total time budget; each test gets min(per-test limit, what is left)."""

    def __init__(self, total_s, per_test_s, clock=time.monotonic):
        self.clock = clock
        self.deadline = clock() + total_s
        self.per_test_s = per_test_s

    def next_timeout(self):
        return min(self.per_test_s, self.deadline - self.clock())

    def exhausted(self):
        return self.next_timeout() <= 0


def parse_result(output):
    """The last `P2PCHECK_RESULT {...}` line of a worker's output, or None."""
    for line in reversed((output or "").splitlines()):
        if line.startswith(MARK):
            try:
                return json.loads(line[len(MARK):])
            except ValueError:
                return None
    return None


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_processes(commands, envs, timeout, start=start_process):
    """Start processes (`start`: host_commands' starter on a host) in their own process groups; wait for all
    within `timeout` seconds.

    Returns [{status, returncode, output, result, seconds}] with status one of
    ok / error / hung (killed at the time-out, with every process of its group).
    """
    started = time.monotonic()
    procs = [start(cmd, env) for cmd, env in zip(commands, envs, strict=True)]
    outputs = [None] * len(procs)
    hung = False
    for index, proc in enumerate(procs):
        left = max(0.0, timeout - (time.monotonic() - started))
        try:
            outputs[index], _ = proc.communicate(timeout=left)
        except TimeoutExpired:
            hung = True
            break
    if hung:  # one rank hanging holds the others in the collective: kill every group
        for proc in procs:
            kill_group(proc)
        for index, proc in enumerate(procs):
            out, _ = proc.communicate()
            outputs[index] = (outputs[index] or "") + (out or "")
    seconds = time.monotonic() - started
    results = []
    for proc, output in zip(procs, outputs, strict=True):
        result = parse_result(output)
        if hung:
            status = "hung"
        elif proc.returncode == 0 and result and result.get("status") == "ok":
            status = "ok"
        else:
            status = "error"
        results.append({"status": status, "returncode": proc.returncode, "output": output or "",
                        "result": result, "seconds": seconds})
    return results


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ordered_pairs(gpus):
    return [(a, b) for a in gpus for b in gpus if a != b]


def ipc_pairs(gpus, policy="auto"):
    """Ordered pairs that get the cross-process copy. n GPUs have n(n-1) ordered pairs (56 at 8):
    'ring' keeps each GPU's two ring neighbours, both directions (2n pairs, every GPU sends and
    receives through IPC); 'auto' is 'all' up to 4 GPUs and 'ring' above."""
    if policy not in ("all", "ring", "auto"):
        raise ValueError(f"ipc_pairs must be all, ring or auto, got {policy!r}")
    if policy == "all" or (policy == "auto" and len(gpus) <= 4):
        return ordered_pairs(gpus)
    n = len(gpus)
    ring = {(gpus[i], gpus[(i + 1) % n]) for i in range(n)} | {(gpus[(i + 1) % n], gpus[i]) for i in range(n)}
    return sorted(ring)


def estimate_seconds(n, fixed_s, in_process_pair_s, ipc_pair_s, ipc_fixed_s, allreduce_run_s, runs=3,
                     policy="auto"):
    """Predicted wall time of the peer-path check on n GPUs, from figures measured on fewer:
    the fixed start-up, per-pair copy costs times the pairs the policy selects, and the
    collective runs (one n-rank run per bracket arm; NCCL init grows mildly with n)."""
    pairs = n * (n - 1)
    ipc = len(ipc_pairs(list(range(n)), policy))
    return {"gpus": n, "ordered_pairs": pairs, "ipc_pairs": ipc,
            "seconds": fixed_s + pairs * in_process_pair_s + ipc_fixed_s + ipc * ipc_pair_s + runs * allreduce_run_s}


def cross_check(probe_runs, reference_runs):
    """Per size and arm: the probe's median latency beside nccl-tests' (medians over bracket
    runs), and their ratio."""
    def medians(runs, key):
        out = {}
        for run in runs:
            for size in run.get("sizes", []):
                value = size.get(key)
                if value:
                    out.setdefault((run["label"], size["bytes"]), []).append(value)
        return {k: statistics.median(v) for k, v in out.items()}
    probe, reference = medians(probe_runs, "median_us"), medians(reference_runs, "time_us")
    rows = []
    for (label, nbytes), ref in sorted(reference.items()):
        mine = probe.get((label, nbytes))
        rows.append({"label": label, "bytes": nbytes, "probe_us": mine, "nccl_tests_us": ref,
                     "ratio": mine / ref if mine else None})
    return rows


def link_peak_gbps(src, dst, preflight_gpus, nvlink_gbps=NVLINK_GBPS_PER_LINK):
    """Per-direction peak of the link between two GPUs: NVLink count x rate, else PCIe gen x width."""
    by_index = {g["index"]: g for g in preflight_gpus}
    a, b = by_index.get(src), by_index.get(dst)
    if not a or not b:
        return None
    links = sum(1 for remote in a.get("nvlink_remotes", []) if remote == b.get("bus_id"))
    if not links and dst in a.get("nvlink_peers", []):
        # Through NVSwitch every link of a GPU reaches any peer (remotes read FFFFFFFF:FF:FF.0).
        links = min(len(a.get("nvlink_remotes", [])), len(b.get("nvlink_remotes", [])))
    if links:
        return {"kind": f"NV{links}", "peak_gbps": links * nvlink_gbps}
    gen = min(a.get("pcie_gen") or 0, b.get("pcie_gen") or 0)
    width = min(a.get("pcie_width") or 0, b.get("pcie_width") or 0)
    if gen in PCIE_GBPS_PER_LANE and width:
        return {"kind": f"PCIe Gen{gen} x{width}", "peak_gbps": PCIE_GBPS_PER_LANE[gen] * width}
    return None


def pair_verdict(in_process, ipc):
    """ok / corrupt / no_peer_access / error for one ordered pair (IPC left out by policy:
    judged on the in-process copy)."""
    if not in_process or not ipc:
        return "error"
    if not in_process.get("verified") or not (ipc.get("skipped") or ipc.get("verified")):
        return "corrupt"
    if not in_process.get("can_access_peer"):
        return "no_peer_access"
    return "ok"


def transport_of(outputs):
    parsed = parse_log("\n".join(outputs))
    return {"summary": parsed["summary"], "versions": parsed["versions"],
            "warnings": parsed["warnings"], "p2p_in_effect": p2p_in_effect(parsed),
            "p2p_reasons": parsed["proof"]["reasons"]}


def compare_brackets(runs, sizes):
    """Per size: median latency per label over its runs, the B/A ratio, and A's drift."""
    labels = []
    for run in runs:
        if run["label"] not in labels:
            labels.append(run["label"])
    rows = []
    for nbytes in sizes:
        row = {"bytes": nbytes}
        for label in labels:
            values = [s["median_us"] for run in runs if run["label"] == label and run["status"] == "ok"
                      for s in run["sizes"] if s["bytes"] == nbytes]
            row[label] = {"median_us": statistics.median(values) if values else None,
                          "runs_us": values}
            if len(values) >= 2:
                row[label]["drift"] = (max(values) - min(values)) / min(values)
        if len(labels) == 2 and row[labels[0]]["median_us"] and row[labels[1]]["median_us"]:
            row["ratio"] = row[labels[1]]["median_us"] / row[labels[0]]["median_us"]
            row["faster"] = labels[1] if row["ratio"] < 1 else labels[0]
        rows.append(row)
    return rows


def bracket_order(order, names):
    """'ABA' with names [x, y] -> [x, y, x]; letters must name given env sets."""
    mapping = {chr(ord("A") + i): name for i, name in enumerate(names)}
    bad = [c for c in order if c not in mapping]
    if bad or not order:
        raise ValueError(f"bracket order {order!r} must use letters {sorted(mapping)}")
    return [mapping[c] for c in order]


def overall_verdict(pairs, runs):
    """hung > corrupt > error > no_peer_access > ok, over every pair and collective run."""
    statuses = {p["verdict"] for p in pairs} | {r["status"] for r in runs}
    statuses |= {"corrupt" for r in runs for s in r.get("sizes", []) if not s.get("correct", True)}
    for worst in ("hung", "corrupt", "error", "no_peer_access", "skipped"):
        if worst in statuses:
            return worst
    return "ok"
