#!/usr/bin/env python3
"""Figure: capture.yml on 50 inventory hosts in under 60 s on this machine.

The hosts are 50 inventory entries with a local connection, each reading its own 8-GPU sysfs
fixture root (tests/fixtures/make_sysfs_tree.py) - not 50 machines: the figure is the
controller's cost (templating, module runs, 150 evidence documents), which is what grows with a
fleet. No NVML here, so each host's NVML reading is the "not available" path.

Usage: .venv/bin/python -m bench.bench_fleet_capture [HOSTS] [FORKS]   (writes bench/results-fleet-capture.json)
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from tests.fixtures.make_sysfs_tree import pcie_8gpu

REPO = Path(__file__).resolve().parent.parent


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    forks = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    with tempfile.TemporaryDirectory() as tmp:
        hosts = {}
        for n in range(count):
            root = Path(tmp) / f"root-{n:02d}"
            pcie_8gpu(root)
            hosts[f"fixture-{n:02d}"] = {"ansible_connection": "local", "host_facts_sysfs_root": str(root),
                                         "ansible_python_interpreter": "/usr/bin/python3"}
        inventory = Path(tmp) / "fleet.yml"
        inventory.write_text(yaml.safe_dump({"all": {"children": {"gpu_serving_hosts": {"hosts": hosts}}}}))
        start = time.perf_counter()
        run = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
                              "-f", str(forks), "playbooks/capture.yml", "-e", f"observation_writer_dir={tmp}/ev"],
                             cwd=REPO, capture_output=True, text=True, env={**os.environ, "ANSIBLE_FORCE_COLOR": "0"})
        wall = time.perf_counter() - start
        if run.returncode != 0:
            raise SystemExit(run.stdout[-3000:] + run.stderr[-2000:])
        documents = len(list(Path(tmp, "ev").rglob("*.json")))
    result = {"hosts": count, "forks": forks, "cores": os.cpu_count(), "wall_s": round(wall, 1), "target_s": 60,
              "evidence_documents": documents, "met": wall < 60,
              "command": f".venv/bin/python -m bench.bench_fleet_capture {count} {forks}"}
    print(json.dumps(result))
    (REPO / "bench" / "results-fleet-capture.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
