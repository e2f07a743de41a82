"""Shared test set-up: one name for the project's module_utils, the engine double.
(Test helpers and filter plugins are on pytest's pythonpath: pyproject.toml.)"""

import contextlib
import fcntl
import importlib.abc
import importlib.machinery
import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


class OneModuleUtilsName(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Tests import module_utils/ as serving_rollout.module_utils (docs/architecture.md). A module under
    library/ imports it as ansible.module_utils.<name>, the name Ansible ships it under; run in-process
    by a test, that name is the same module object, so a module and its test share one copy."""

    PREFIX = "ansible.module_utils."

    def find_spec(self, fullname, path=None, target=None):
        name = fullname[len(self.PREFIX):] if fullname.startswith(self.PREFIX) else None
        if name and "." not in name and (REPO / "module_utils" / f"{name}.py").is_file():
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def __init__(self):
        self.own_specs = {}

    def create_module(self, spec):
        module = importlib.import_module("serving_rollout.module_utils." + spec.name[len(self.PREFIX):])
        self.own_specs[module.__name__] = module.__spec__  # the import sets the alias's spec on it next
        return module

    def exec_module(self, module):
        module.__spec__ = self.own_specs.pop(module.__name__)  # its own spec back


sys.meta_path.insert(0, OneModuleUtilsName())

DOUBLE = REPO / "tests" / "doubles" / "engine_double.py"
FIXTURES = REPO / "tests" / "fixtures"


# bin/test runs the lab tests on pytest-xdist workers, each with its own lab host (lab/test-hosts:
# three on this 2-core machine, docs/testing.md). Each worker's ansible-playbook runs reach
# its host through LAB_SSH_PORT (inventory/lab reads it) and the tests through LAB_CONTAINER;
# lab/up.sh and lab/fleet-up.sh read the same two variables. Set them to pick a host by hand.
LAB_HOSTS = {f"gw{i}": tuple(line.split()) for i, line in enumerate(
    line for line in (REPO / "lab" / "test-hosts").read_text().splitlines() if line and not line.startswith("#"))}
_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker:  # each worker its own host, whatever the parent's environment says
    if _worker not in LAB_HOSTS:
        raise RuntimeError(f"pytest-xdist worker {_worker}: lab/test-hosts has hosts for {sorted(LAB_HOSTS)} "
                           f"only (run -n {len(LAB_HOSTS)} or fewer)")
    os.environ["LAB_CONTAINER"], os.environ["LAB_SSH_PORT"] = LAB_HOSTS[_worker]
LAB_HOST = os.environ.get("LAB_CONTAINER", "serving-lab-gpu-1")


def lab(*command, check=True, stdin=None):
    """A command on this worker's lab host (podman exec; `stdin` fed to it when given)."""
    return subprocess.run(["podman", "exec", *(["-i"] if stdin is not None else []), LAB_HOST, *command],
                          capture_output=True, text=True, check=check, input=stdin)


def lab_unit_state(unit="sglang.service"):
    """systemd's state of a unit on the lab host: the properties a restoration is proven by."""
    out = lab("systemctl", "show", "-p", "ActiveState,UnitFileState,NRestarts,InvocationID,LoadState", unit).stdout
    return dict(line.split("=", 1) for line in out.splitlines())


def lab_files_hash():
    """sha256 of the lab's original unit and its two EnvironmentFiles."""
    return lab("sha256sum", "/etc/systemd/system/sglang.service", "/etc/sglang/sglang.env",
               "/etc/sglang/engine-double.env").stdout


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RunningDouble:
    """An engine double process on a free loopback port."""

    def __init__(self, env=None, args=()):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        full_env = {k: v for k, v in os.environ.items() if not k.startswith(("DOUBLE_", "NCCL_"))}
        full_env.update({"DOUBLE_STARTUP_S": "0.2", "PYTHONUNBUFFERED": "1"})
        full_env.update(env or {})
        command = [sys.executable, str(DOUBLE), "--model-path", "test/model", "--revision",
                   "a" * 40, "--tp-size", "2", "--context-length", "8192",
                   "--port", str(self.port), *args]
        self.proc = subprocess.Popen(command, env=full_env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)

    def wait_ready(self, timeout=10.0):
        from serving_rollout.module_utils.engine_client import get_json

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if get_json(self.url, "/health", timeout=1.0)["ok"]:
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.02)
        return False

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.stdout.read()


@pytest.fixture
def engine_double():
    started = []

    def start(env=None, args=(), ready=True):
        double = RunningDouble(env, args)
        started.append(double)
        if ready:
            assert double.wait_ready(), f"double did not become ready: {double.stop()}"
        return double

    yield start
    for double in started:
        double.stop()


# For lab tests that need a verdict from an effect far outside the noise and are not about
# interference: bin/test runs beside other jobs that start and stop, and a swing of the host's
# CPU between arms rightly makes a cell inconclusive (re-measured first, then named). The GPU
# conditions stay watched; tests/integration/test_interference.py tests the detection itself.
# bin/test's second worker loads the machine unevenly too: the baseline brackets of a cell drift
# by tens of percent, so the drift limit is widened with the CPU limits.
CPU_SHARED_WITH_OTHER_JOBS = {"rollout_condition_limits": {"cpu_busy": 1.0, "cpu_runnable": 1000, "cpu_steal": 1.0},
                              "rollout_drift_limit": 0.3}


def run_playbook(playbook, extra_vars=None, inventory="localhost,", local=True, check=False, timeout=300):
    """ansible-playbook from the repo root (its ansible.cfg), as an operator runs it."""
    import json as _json

    command = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", inventory,
               str(REPO / "playbooks" / playbook)]
    if local:
        command += ["-c", "local", "-e", "ansible_python_interpreter=/usr/bin/python3"]
    if check:
        command.append("--check")
    if extra_vars:
        command += ["-e", _json.dumps(extra_vars)]
    env = {**os.environ, "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1",
           "CONTAINERS_CONF": str(REPO / "lab" / "containers.conf")}
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)




def wait_until(condition, timeout, what):
    """Polled each half second: a cap on how long to wait, never a margin a test's result depends on."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout} s")


def start_lab_playbook(playbook, extra_vars):
    """ansible-playbook against the lab host in the background (its own session, so a test can
    kill it as a killed controller would die)."""
    import json as _json

    command = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "inventory/lab",
               f"playbooks/{playbook}", "-e", _json.dumps(extra_vars)]
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "CONTAINERS_CONF": str(REPO / "lab" / "containers.conf")}
    return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)


# The wait runs on the host in one process: a `podman exec` costs about 0.14 s of this machine's CPU, so a
# poll from here every 0.3 s kept half a core busy through every wait, slowing the very run it waited for.
_WAIT_FOR_PHASE = r"""
import json, sys, time
path, phase, runs_before, timeout = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), float(sys.argv[4])
deadline, state = time.monotonic() + timeout, {}
while time.monotonic() < deadline:
    try:
        with open(path) as handle:
            state = json.load(handle)
    except (OSError, ValueError):  # not written yet, or caught mid-write
        state = {}
    if state.get("phase") == phase and (runs_before is None or state.get("run_id") not in [None, *runs_before]):
        sys.exit(0)
    time.sleep(0.1)
print(json.dumps(state))
sys.exit(1)
"""


_ANY_RUN = object()


def wait_for_lab_phase(state_file, phase, timeout=90, not_run=_ANY_RUN, host=None):
    """Until the rollout state file on the lab host records `phase` (a condition, not a sleep). With `not_run`
    (a run id, or None for "no run yet"), only a run other than that one counts: an earlier run's phase is not it."""
    import json as _json

    runs_before = None if not_run is _ANY_RUN else [not_run]
    command = ["podman", "exec", host or LAB_HOST, "/usr/bin/python3", "-c", _WAIT_FOR_PHASE, state_file, phase,
               _json.dumps(runs_before), str(timeout)]
    waited = subprocess.run(command, capture_output=True, text=True, timeout=timeout + 60)
    run = "" if runs_before is None else f" of a run other than {not_run}"
    assert waited.returncode == 0, \
        f"phase {phase}{run} not reached in {timeout} s (state: {(waited.stdout + waited.stderr).strip()})"


def only_run_dir(evidence, host, kind):
    dirs = sorted((Path(evidence) / host).glob(f"{kind}-*"))
    assert len(dirs) == 1, dirs
    return dirs[0]


# Longest first, so that the workers end together (bin/test keeps this order: --no-loadscope-reorder):
# the real-engine tests (one worker's longest stretch), molecule scenarios, the other lab tests,
# then the quick unit tests that fill the gaps. Files whose tests share a module fixture (one
# lab rollout, the fleet's three hosts, the real-engine host) mark themselves xdist_group and run
# on one worker; unit test files are kept whole the same way.
_ORDER = ("tests/integration/test_real_vllm_lab.py", "tests/molecule/", "tests/integration/", "tests/unit/")


# A test marked machine_alone has the machine to itself: every other test of bin/test's workers
# holds the machine lock shared around its whole run (set-up and teardown included, so a module
# fixture's engine start counts), a machine_alone test holds it exclusively. Why: a test about
# telling interference from an effect needs the rest of the machine's load steady; a steady load
# beside it (another CPU-heavy job) keeps a burst visible, but the other worker's rollouts, engine
# starts and bursts come and go between the arms and can hide it. The exclusive test first leaves a
# "wanted" file, so that the other worker takes no new shared lock while it waits (no starvation).
MACHINE_LOCK = Path(tempfile.gettempdir()) / "serving-rollout-tests-machine.lock"
MACHINE_WANTED = MACHINE_LOCK.with_suffix(".wanted")


def pytest_configure(config):
    config.addinivalue_line("markers", "machine_alone: runs with no other test of this machine's workers beside it")


@contextlib.contextmanager
def machine_lock(alone, path=MACHINE_LOCK):
    wanted = path.with_suffix(".wanted")
    with open(path, "a") as handle:
        if alone:
            wanted.write_text(str(os.getpid()))
            try:
                fcntl.flock(handle, fcntl.LOCK_EX)
            finally:
                wanted.unlink(missing_ok=True)
        else:
            while wanted_by_a_live_process(wanted):
                time.sleep(0.5)
            fcntl.flock(handle, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def wanted_by_a_live_process(wanted=MACHINE_WANTED):
    """Whether a machine_alone test waits for the lock (a file left by a killed run is not a wait)."""
    try:
        os.kill(int(wanted.read_text()), 0)
        return True
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return False
    except PermissionError:  # another user's live process
        return True


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # one process: nothing runs beside it
        yield
        return
    with machine_lock(item.get_closest_marker("machine_alone") is not None):
        yield


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    def rank(item):
        path = item.path.relative_to(REPO).as_posix()
        return next((i for i, top in enumerate(_ORDER) if path.startswith(top)), len(_ORDER))

    for item in items:
        if rank(item) == _ORDER.index("tests/unit/"):
            item.add_marker(pytest.mark.xdist_group(item.path.stem))
    items.sort(key=rank)
