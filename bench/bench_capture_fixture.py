#!/usr/bin/env python3
"""Figure: capture.yml wall time against one host of 8-GPU fixture data (target: under 5 s).

Usage: .venv/bin/python -m bench.bench_capture_fixture [RUNS]
"""

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.fixtures.make_sysfs_tree import pcie_8gpu

REPO = Path(__file__).resolve().parent.parent


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    with tempfile.TemporaryDirectory() as tmp:
        pcie_8gpu(Path(tmp) / "host")
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,",
                            "-c", "local", "playbooks/capture.yml", "-e", "capture_hosts=localhost",
                            "-e", "ansible_python_interpreter=/usr/bin/python3",
                            "-e", f"host_facts_sysfs_root={tmp}/host", "-e", f"observation_writer_dir={tmp}/ev"],
                           cwd=REPO, check=True, capture_output=True)
            times.append(time.perf_counter() - start)
    print(json.dumps({"runs": runs, "median_s": statistics.median(times), "max_s": max(times),
                      "target_s": 5.0}))


if __name__ == "__main__":
    main()
