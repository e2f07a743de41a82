"""The README's two commands in a fresh clone, in the order a newcomer runs them: the main job
(bin/lab-run) first, then the lint and unit stages of the test command. What the main job leaves
behind (evidence/, the lab's key, caches) must not change what lint or a test decides."""

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import REPO


def run(command, cwd, timeout):
    # A newcomer's shell: no virtualenv of ours active, the clone's own tools first.
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "CONTAINERS_CONF")}
    env["PATH"] = ":".join(p for p in env.get("PATH", "").split(":") if not p.startswith(str(REPO)))
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.skipif(os.environ.get("SERVING_ROLLOUT_VIA_CI_RUN") == "1",
                    reason="run by .ci/run, which is this very path: the main job, then bin/test, in a fresh clone")
def test_main_job_then_lint_and_unit_tests_in_a_fresh_clone():
    top = Path(tempfile.mkdtemp(prefix="newcomer-"))
    clone = top / "serving-rollout"
    try:
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=120)
        main_job = run(["bin/lab-run"], clone, timeout=1500)
        assert main_job.returncode == 0, main_job.stdout[-3000:] + main_job.stderr[-3000:]
        assert "every file matches manifest.json" in main_job.stdout
        # the main job wrote its evidence inside the clone, where lint and the tests run next
        assert list((clone / "evidence").glob("lab-gpu-1/rollout-*/manifest.json"))
        tests = run(["bin/test", "lint", "unit"], clone, timeout=1500)
        assert tests.returncode == 0, tests.stdout[-4000:] + tests.stderr[-3000:]
        assert "== lint" in tests.stdout and " passed" in tests.stdout.splitlines()[-1], tests.stdout[-800:]
        # Repetition is covered without a third run here: the clone's main job was the lab host's second
        # (CI ran bin/lab-run first), and CI's bin/test lints a checkout that holds the main job's evidence.
        # the clone's own code ran, not this checkout's (the editable package points at the clone)
        where = run([str(clone / ".venv" / "bin" / "python"), "-c",
                     "import serving_rollout.evidence as e; print(e.__file__)"], "/", timeout=60)
        assert where.stdout.strip() == str(clone / "serving_rollout" / "evidence.py"), where
    finally:
        shutil.rmtree(top, ignore_errors=True)
