#!/usr/bin/env python3
"""Figures for the A/B decision: error control at the decision, interference, sequential cells.

Simulates the rollout's cell flow (the first baseline bracket of two thirds of n, the candidate's
cell of at most n looked at after every chunk and stopped when clear, the second bracket one
chunk) with the engine
TEST DOUBLE's latency model (tests/doubles/engine_double.py LatencyModel: its prefill and decode
model, per-step noise, per-request noise) in place of HTTP, and judges with the project's own
code (serving_rollout/play/abstats.py, conditions.py), so hundreds of seeded runs take seconds. Two
cells (1k and 4k prompts) per run.

Scenarios, RUNS seeded runs each:
  aa            identical candidate: any decision other than inconclusive is false (<= 5 %)
  aa-burst      identical candidate, and a time-boxed burst in the candidate arm slowing 30 % of
                its requests by 10 %, seen in the host's CPU busy fraction as a real burst is:
                re-measured or inconclusive, never a verdict (false decision <= 5 %)
  aa-burst-blind  the same burst with the conditions not looked at (what today's design does)
  gain5         a true 5 % E2E gain: acceptable in >= 90 % of runs (power)
  guard-ttft8   decode 5 % faster but prefill 8 % slower (E2E about 4 % better, TTFT about 8 %
                worse): a guard metric worse, so reject; the sequential cell must not stop on the
                better E2E and accept (the non-inferiority check), fixed-guard-ttft8 beside it
  fixed-*       the same with every arm at a fixed n (no sequential stopping), for the cost
                comparison: mean requests per arm against today's fixed n (12) and against the
                smallest fixed n that reaches 90 % power
  *-lab-noise   the lab's double as provisioned (per-step noise only, no per-request noise)
Cost is the mean of requests per arm per cell (the three brackets' total / 3) against today's
fixed n (every bracket 12), and beside it the smallest fixed n that reaches 90 % power.

Usage: .venv/bin/python -m bench.bench_ab_decisions [RUNS [FIXED_N [ERROR_RUNS]]]
  (writes bench/results-ab-decisions.json). ERROR_RUNS (default RUNS) seeds the scenarios that
  measure a false decision rate: a design that spends its 5 % honestly has a true rate near it, and
  1000 runs estimate that rate only to about +-1.4 % (95 %).
"""

import json
import random
import sys
import time
from pathlib import Path

from serving_rollout.module_utils.conditions import CONDITION_LIMITS, conditions_problem, median_conditions
from serving_rollout.play.abstats import cell_verdict, decide, sequential_design, sequential_look
from tests.doubles.engine_double import LatencyModel

REPO = Path(__file__).resolve().parent.parent

# The lab's double (roles/lab_serving_host defaults) plus 3 % per-request noise for the client and
# a busy machine (bench_ab_accuracy.py's "realistic noise").
NOISE = {"DOUBLE_PREFILL_MS_PER_1K": "20", "DOUBLE_DECODE_MS_PER_TOKEN": "4", "DOUBLE_NOISE": "0.02",
         "DOUBLE_REQUEST_NOISE": "0.03"}
CELLS = (("1k", 1000), ("4k", 4000))
OUTPUT_TOKENS = 80


class Arm:
    """One engine (arm) of the double's latency model, and the host's CPU busy signal."""

    def __init__(self, seed, gain=0.0, burst=None, noise=None):
        env = {**NOISE, **(noise or {}), "DOUBLE_SEED": str(seed)}
        if gain:  # one gain for prefill and decode, or (prefill, decode); negative is slower
            prefill, decode = gain if isinstance(gain, tuple) else (gain, gain)
            env["DOUBLE_EFFECT_P2P"] = f"prefill={prefill},decode={decode}"
        self.model = LatencyModel(env, {"p2p": bool(gain)})
        self.rng = random.Random(seed + 7)
        self.burst = burst  # (first request index, last) of the arm's requests slowed by 10 %
        self.served = 0

    def request(self, prompt_tokens):
        factor = self.model.request_factor()
        in_burst = self.burst and self.burst[0] <= self.served < self.burst[1]
        self.served += 1
        slow = 1.10 if in_burst else 1.0
        ttft = self.model.ttft(prompt_tokens) * factor * slow
        e2e = ttft + sum(self.model.decode() for _ in range(OUTPUT_TOKENS - 1)) * factor * slow
        return {"ttft_s": ttft, "e2e_s": e2e, "decode_tps": (OUTPUT_TOKENS - 1) / (e2e - ttft), "error": None}, \
            in_burst

    def chunk(self, prompt_tokens, n):
        rows = [self.request(prompt_tokens) for _ in range(n)]
        busy = 0.95 if any(b for _, b in rows) else 0.5 + self.rng.uniform(-0.1, 0.1)
        return [r for r, _ in rows], {"cpu_busy": busy, "cpu_steal": 0.0, "clock_events": [], "gpu_processes": 0}


def measure(arm, prompt_tokens, n, reference, remeasure_max, watch):
    """One chunk as latency_cell measures it: re-measured while unlike the reference; the
    problem left, if the last attempt is still unlike it."""
    spent, problem = 0, None
    for _ in range(1 + remeasure_max):
        rows, cond = arm.chunk(prompt_tokens, n)
        spent += n
        problem = conditions_problem(reference, cond, CONDITION_LIMITS) if watch and reference else None
        if not problem:
            break
    return rows, cond, spent, problem


def run(seed, gain=0.0, burst=False, n_max=12, chunk=4, sequential=True, watch=True, remeasure_max=2,
        noise=None):
    base = Arm(seed, noise=noise)
    cand_burst = (int(0.35 * n_max), int(0.35 * n_max) + int(0.3 * n_max * len(CELLS))) if burst else None
    cand = Arm(seed + 100000, gain, cand_burst, noise)
    looks = -(-n_max // chunk)
    bracket = -(-2 * n_max // 3) if sequential else n_max  # rollout_bracket_requests' default
    design = sequential_design(n_max, chunk, bracket)
    cells, spent = [], {"baseline-1": 0, "candidate": 0, "baseline-2": 0}
    first = {}
    for name, tokens in CELLS:
        rows, conds = [], []
        for _ in range(-(-bracket // chunk)):
            r, c, s, _ = measure(base, tokens, min(chunk, bracket - len(rows)), None, 0, watch)
            rows += r
            conds.append(c)
            spent["baseline-1"] += s
        first[name] = (rows, median_conditions(conds))
    second_n = {}
    cand_cells = {}
    for name, tokens in CELLS:
        rows, conds, look, disturbed = [], [], None, []
        for k in range(1, looks + 1):
            r, c, s, problem = measure(cand, tokens, chunk, first[name][1], remeasure_max, watch)
            rows += r
            conds.append(c)
            spent["candidate"] += s
            disturbed += [problem] if problem else []
            if sequential:
                look = sequential_look(first[name][0], rows, k, design, 0.05, len(CELLS))
                if look["stop"]:
                    break
        cand_cells[name] = (rows, median_conditions(conds), look, disturbed)
        # The second bracket is one chunk: the drift check, and part of the baseline at the last look.
        second_n[name] = min(chunk, bracket) if sequential else bracket
    for name, tokens in CELLS:
        rows = []
        for _ in range(-(-second_n[name] // chunk)):
            r, _, s, _ = measure(base, tokens, min(chunk, second_n[name] - len(rows)), None, 0, watch)
            rows += r
            spent["baseline-2"] += s
        c_rows, c_cond, look, disturbed = cand_cells[name]
        cell = {"name": name, "baseline": [first[name][0], rows[:second_n[name]]], "candidate": c_rows,
                # the last look taken
                "sequential": {"look": look["look"], "looks": looks, "design": design} if look else None,
                "conditions": {"baseline": first[name][1], "candidate": c_cond} if watch else {},
                "disturbed": disturbed}
        cells.append(cell_verdict(cell, cells=len(CELLS), seed=seed))
    return decide(cells)["decision"], spent


def scenario(runs, **kwargs):
    decisions, per_arm = {}, []
    for seed in range(runs):
        decision, spent = run(seed, **kwargs)
        decisions[decision] = decisions.get(decision, 0) + 1
        per_arm.append(sum(spent.values()) / 3 / len(CELLS))
    return {"runs": runs, "decisions": decisions, "mean_requests_per_arm_per_cell": sum(per_arm) / runs}


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    started = time.perf_counter()
    fixed_n = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    error_runs = int(sys.argv[3]) if len(sys.argv) > 3 else runs
    quiet = {"DOUBLE_REQUEST_NOISE": "0"}  # the lab's double as provisioned: per-step noise only
    out = {
        "aa": scenario(error_runs),
        "aa-burst": scenario(error_runs, burst=True),
        "aa-burst-blind": scenario(runs, burst=True, watch=False),
        "gain5": scenario(runs, gain=0.05),
        "guard-ttft8": scenario(runs, gain=(-0.08, 0.05)),
        "fixed-guard-ttft8": scenario(runs, gain=(-0.08, 0.05), sequential=False, n_max=fixed_n),
        "fixed-gain5": scenario(runs, gain=0.05, sequential=False, n_max=fixed_n),
        "fixed-aa": scenario(error_runs, sequential=False, n_max=fixed_n),
        # the smallest fixed n per arm that reaches 90 % power, for the honest cost comparison
        **{f"fixed-gain5-n{n}": scenario(runs, gain=0.05, sequential=False, n_max=n, chunk=n) for n in (4, 6, 8)},
        "gain5-lab-noise": scenario(runs, gain=0.05, noise=quiet),
        "aa-lab-noise": scenario(error_runs, noise=quiet),
        **{f"fixed-gain5-lab-noise-n{n}": scenario(runs, gain=0.05, sequential=False, n_max=n, chunk=n, noise=quiet)
           for n in (4, 6)},
    }
    out["false_decision_aa"] = 1 - out["aa"]["decisions"].get("inconclusive", 0) / error_runs
    out["false_decision_aa_burst"] = 1 - out["aa-burst"]["decisions"].get("inconclusive", 0) / error_runs
    out["false_decision_aa_fixed"] = 1 - out["fixed-aa"]["decisions"].get("inconclusive", 0) / error_runs
    out["power_gain5"] = out["gain5"]["decisions"].get("acceptable", 0) / runs
    out["power_fixed_gain5"] = out["fixed-gain5"]["decisions"].get("acceptable", 0) / runs
    out["requests_ratio"] = out["gain5"]["mean_requests_per_arm_per_cell"] / fixed_n
    out["guard_accepted"] = out["guard-ttft8"]["decisions"].get("acceptable", 0) / runs
    out["guard_accepted_fixed"] = out["fixed-guard-ttft8"]["decisions"].get("acceptable", 0) / runs
    out["power_lab_noise"] = out["gain5-lab-noise"]["decisions"].get("acceptable", 0) / runs
    out["false_decision_aa_lab_noise"] = 1 - out["aa-lab-noise"]["decisions"].get("inconclusive", 0) / error_runs
    out["requests_ratio_lab_noise"] = out["gain5-lab-noise"]["mean_requests_per_arm_per_cell"] / fixed_n
    powered = [n for n in (4, 6, 8) if out[f"fixed-gain5-n{n}"]["decisions"].get("acceptable", 0) / runs >= 0.9]
    out["smallest_fixed_n_at_90pct_power"] = powered[0] if powered else ">8"
    powered = [n for n in (4, 6) if out[f"fixed-gain5-lab-noise-n{n}"]["decisions"].get("acceptable", 0) / runs >= 0.9]
    out["smallest_fixed_n_at_90pct_power_lab_noise"] = powered[0] if powered else ">6"
    out["command"] = f".venv/bin/python -m bench.bench_ab_decisions {runs} {fixed_n} {error_runs}"
    out["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(out, indent=2))
    (REPO / "bench" / "results-ab-decisions.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
