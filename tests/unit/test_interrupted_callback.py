"""The interrupted callback's pieces that run inside a signal handler, against real processes."""

import importlib.util
import json
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


def host_result(name):
    """What v2_runner_on_* receive: a result with its host (a stand-in for Ansible's TaskResult)."""
    from types import SimpleNamespace

    return SimpleNamespace(_host=SimpleNamespace(get_name=lambda: name), _result={})


def test_a_lost_host_mid_run_is_said_at_once_with_its_watchdogs_duty_and_recorded_lost(tmp_path, capfd):
    from serving_rollout import fleet

    callback = _callback.CallbackModule.__new__(_callback.CallbackModule)  # no signal handlers in a test
    callback.phases, callback.hosts, callback.evidence = {}, {}, str(tmp_path)
    callback.extra = {"rollout_lease_s": 15}
    with fleet.locked(str(tmp_path)):
        fleet.begin(str(tmp_path), "R7", ["gpu-a", "gpu-b"], ["gpu-a", "gpu-b"])
    callback.hosts = {"gpu-a": "03:10:00", "gpu-b": "03:10:01"}
    callback.phases = {"gpu-a": {"kind": "phase", "phase": "candidate-running", "run_id": "R7"}}
    callback.v2_runner_on_unreachable(host_result("gpu-a"))
    callback.v2_runner_on_unreachable(host_result("gpu-b"))
    said = capfd.readouterr().err
    assert ("LOST: gpu-a is unreachable at phase 'candidate-running' of run R7. Its watchdog holds the duty: it "
            "restores the original itself once the lease lapses: at most the chunk under way (its requests' "
            "timeouts) plus 15 s after 03:10:00 UTC, this host's last answer") in said
    assert "playbooks/rollback.yml --limit gpu-a" in said
    assert "LOST: gpu-b is unreachable; this run recorded no phase there, so it never began to stop" in said
    assert '"lost": true' in (tmp_path / "gpu-a" / "rollout-R7" / "interrupted.json").read_text()
    summary = json.loads((tmp_path / "fleet-R7" / "summary.json").read_text())
    assert [h["outcome"] for h in summary["hosts"]] == ["lost", "started"], summary
