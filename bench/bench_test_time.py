"""The test suite's time budget: run CI's command (`CI=true bash .ci/run`) in a fresh clone of this checkout's
HEAD, as CI does, and report each stage's time and the slowest tests to bench/results-test-time.json.

    .venv/bin/python -m bench.bench_test_time [--note TEXT] [--clone DIR] [--out FILE]

Stages are read from the run's own headers as they appear (bin/lab-run's, then bin/test's "== " lines),
timed here by the wall clock of this process; the slowest tests are pytest's own --durations table, which
bin/test prints. The machine's load (1-minute average) is kept at the start and the end, so a run beside
another job is told from a quiet one: docs/testing.md says which figure is which."""

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DURATION = re.compile(r"^(\d+\.\d+)s (call|setup|teardown)\s+(\S+)")
SUMMARY = re.compile(r"^(?:=+ )?(\d+ (?:passed|failed).*?) in [\d.]+s")


def stages(lines):
    """[(name, seconds)] from (time, line) pairs: a stage starts at its header and ends at the next one."""
    if not lines:
        return []
    marks = [(lines[0][0], "bin/lab-run")] + [(t, line[3:].strip()) for t, line in lines if line.startswith("== ")]
    end = lines[-1][0]
    return [(name, round((marks[i + 1][0] if i + 1 < len(marks) else end) - start, 1))
            for i, (start, name) in enumerate(marks)]


def slowest(lines, count=20):
    """pytest's --durations rows (seconds, phase, test id), slowest first."""
    rows = [(float(m.group(1)), m.group(2), m.group(3)) for _, line in lines if (m := DURATION.match(line))]
    return [{"seconds": s, "phase": phase, "test": test} for s, phase, test in sorted(rows, reverse=True)[:count]]


def run(clone, note):
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout.strip()
    subprocess.run(["rm", "-rf", str(clone)], check=True)
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    load_before, started = os.getloadavg()[0], time.time()
    proc = subprocess.Popen(["bash", ".ci/run"], cwd=clone, env={**os.environ, "CI": "true"},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append((time.time(), line.rstrip("\n")))
        sys.stdout.write(line)
    rc = proc.wait()
    summary = next((m.group(1) for _, line in reversed(lines) if (m := SUMMARY.match(line))), None)
    return {"schema": "serving-rollout.test-time/v1", "commit": head, "command": "CI=true bash .ci/run (fresh clone)",
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)), "rc": rc,
            "total_s": round(time.time() - started, 1), "cpus": os.cpu_count(),
            "load_1m_before": round(load_before, 2), "load_1m_after": round(os.getloadavg()[0], 2),
            "note": note, "pytest": summary, "stages": [{"stage": n, "seconds": s} for n, s in stages(lines)],
            "slowest": slowest(lines)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--note", default="", help="what else ran on the machine (a quiet machine: leave empty)")
    parser.add_argument("--clone", default="/tmp/serving-rollout-test-time")
    parser.add_argument("--out", default=str(REPO / "bench" / "results-test-time.json"))
    args = parser.parse_args(argv)
    result = run(Path(args.clone), args.note)
    out = Path(args.out)
    runs = json.loads(out.read_text())["runs"] if out.exists() else []
    out.write_text(json.dumps({"runs": runs + [result]}, indent=2) + "\n")
    print(f"test time: {result['total_s']} s in all ({result['pytest']}); stages "
          + ", ".join(f"{s['stage'].split(':')[0]} {s['seconds']} s" for s in result["stages"]) + f"; written to {out}")
    return result["rc"]


if __name__ == "__main__":
    sys.exit(main())
