"""The interrupted callback's pieces that run inside a signal handler, against real processes."""

import importlib.util
import os
import signal
import subprocess

import pytest
from conftest import REPO

# A callback plugin is loaded by Ansible from its folder, not imported as a package: load it the same way.
_spec = importlib.util.spec_from_file_location("interrupted_callback", REPO / "callback_plugins" / "interrupted.py")
_callback = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_callback)
record_interrupted, recovery_text, stop_workers = (
    _callback.record_interrupted, _callback.recovery_text, _callback.stop_workers)


def test_stop_workers_terminates_each_child_even_if_one_is_gone():
    workers = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
    workers[0].kill()  # exited but not yet reaped: still a child, and signalling it must not stop the loop
    stop_workers(os.getpid())
    assert workers[1].wait(timeout=60) == -signal.SIGTERM
    workers[0].wait()


def test_record_interrupted_writes_the_note_in_the_hosts_evidence_folder(tmp_path):
    record_interrupted(tmp_path, "R7", "gpu-a", "candidate-running")
    note = (tmp_path / "gpu-a" / "rollout-R7" / "interrupted.json").read_text()
    assert '"phase": "candidate-running"' in note and '"run_id": "R7"' in note


@pytest.mark.parametrize("lease", ["300 s", "rollout_lease_s"])
def test_recovery_text_names_host_phase_run_and_the_one_command(lease):
    text = recovery_text("gpu-a", "candidate-running", "R7", "inv/prod", lease)
    assert "gpu-a was at phase 'candidate-running' of run R7" in text
    assert f"({lease})" in text
    assert text.endswith("ansible-playbook -i inv/prod playbooks/rollback.yml --limit gpu-a")
