"""bench/bench_test_time.py's reading of a CI run's output: stages from its headers, pytest's slowest tests."""

import importlib.util

from conftest import REPO

# a bench script runs as `python -m bench.<name>` from the repository root: load it from its file here
_spec = importlib.util.spec_from_file_location("bench_test_time", REPO / "bench" / "bench_test_time.py")
_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_bench)
SUMMARY, slowest, stages = _bench.SUMMARY, _bench.slowest, _bench.stages

LOG = [(100.0, "setup: Debian packages present"), (160.0, "== lint: yamllint, ruff, ansible-lint"),
       (220.0, "== lab host serving-lab-gpu-1: start and provision the original serving unit"),
       (250.0, "== pytest on two workers: tests/molecule tests/integration tests/unit"),
       (2300.0, "191.23s call     tests/molecule/test_molecule_scenarios.py::test_rollout"),
       (2300.0, "12.50s setup    tests/integration/test_real_vllm_lab.py::test_tp2"),
       (2300.0, "146.02s call     tests/integration/test_real_vllm_lab.py::test_tp2"),
       (2310.0, "851 passed, 1 skipped in 2059.12s (0:34:19)")]


def test_stages_run_from_each_header_to_the_next():
    assert stages(LOG) == [("bin/lab-run", 60.0), ("lint: yamllint, ruff, ansible-lint", 60.0),
                           ("lab host serving-lab-gpu-1: start and provision the original serving unit", 30.0),
                           ("pytest on two workers: tests/molecule tests/integration tests/unit", 2060.0)]
    assert stages([]) == []


def test_the_slowest_tests_are_pytests_own_durations_slowest_first():
    assert [(row["seconds"], row["phase"]) for row in slowest(LOG, 2)] == [(191.23, "call"), (146.02, "call")]
    assert SUMMARY.match(LOG[-1][1]).group(1) == "851 passed, 1 skipped"
    assert SUMMARY.match("===== 3 failed, 848 passed in 2100.00s =====").group(1) == "3 failed, 848 passed"
