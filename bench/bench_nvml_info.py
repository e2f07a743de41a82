#!/usr/bin/env python3
"""Time nvml_info's collection on a real GPU host and count NVML initialisations.

Usage: bench_nvml_info.py [RUNS]   (needs nvidia-ml-py; prints JSON)
"""

import json
import statistics
import sys
import time

import pynvml

from serving_rollout.module_utils.nvml_facts import collect


class CountingNvml:
    """pynvml with nvmlInit counted; everything else passes through."""

    def __init__(self):
        self.inits = 0

    def nvmlInit(self):
        self.inits += 1
        return pynvml.nvmlInit()

    def __getattr__(self, name):
        return getattr(pynvml, name)


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    times, inits = [], []
    for _ in range(runs):
        counting = CountingNvml()
        start = time.perf_counter()
        result = collect(counting)
        times.append(time.perf_counter() - start)
        inits.append(counting.inits)
    print(json.dumps({"runs": runs, "median_s": statistics.median(times), "max_s": max(times),
                      "nvml_inits_per_run": sorted(set(inits)), "gpus": result.get("gpu_count"),
                      "pairs": len(result.get("pairs", []))}))


if __name__ == "__main__":
    main()
