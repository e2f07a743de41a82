"""Who holds a rollout lock and whether it still runs (serving_rollout.holder), and the lock file
written whole or named unreadable (module_utils/host_lock.py)."""

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time

from conftest import REPO

from serving_rollout import holder
from serving_rollout.module_utils import host_lock as rollout_lock
from serving_rollout.module_utils import watchdog


def controller(pid, start=None, host=None):
    return {"controller": {"host": host or socket.gethostname(), "pid": pid,
                           "pid_start": start if start is not None else holder.proc_stat(pid)[1]}}


def test_a_live_holder_is_alive_a_dead_or_reused_pid_is_not():
    assert holder.liveness(controller(os.getpid())).endswith("alive (the run is still going; wait for it, or stop it "
                                                             "first)")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert "not running (the run is dead" in holder.liveness(controller(gone.pid, start="1"))
    assert "not running" in holder.liveness(controller(os.getpid(), start="12345"))  # the pid was reused
    assert "on another controller, check there (ps -p 4242)" in holder.liveness(controller(4242, "1", "ctl-9"))
    assert "names no controller process" in holder.liveness({"holder": "alice@ops-1 pid 4242"})
    assert "unreadable" in holder.liveness({"unreadable": 0})


def test_me_outside_ansible_playbook_names_no_process():
    # pytest's command line is not ansible-playbook's: no playbook above it
    assert holder.me() == {"host": socket.gethostname(), "pid": None, "pid_start": None}


def test_the_lock_is_written_whole_or_not_at_all_and_an_empty_one_is_named(tmp_path):
    lock = tmp_path / "sglang.service.lock"
    assert rollout_lock.write_whole(str(lock), {"token": "t1"}) is None
    assert json.loads(lock.read_text()) == {"token": "t1"}
    assert rollout_lock.write_whole(str(lock), {"token": "t2"}) == "exists"  # never over another's
    assert json.loads(lock.read_text()) == {"token": "t1"} and sorted(p.name for p in tmp_path.iterdir()) == [lock.name]
    missing = tmp_path / "no-such-folder" / "x.lock"
    problem = rollout_lock.write_whole(str(missing), {"token": "t3"})
    assert problem.startswith(f"cannot write the lock {missing}: No such file or directory") and "free" in problem
    lock.write_text("")  # what an older tool left on a full disk
    assert rollout_lock.read_lock(str(lock)) == {"unreadable": 0}
    assert "an unreadable lock (0 bytes" in rollout_lock.describe({"unreadable": 0}, str(tmp_path / "state.json"))
    assert rollout_lock.read_lock(str(tmp_path / "none.lock")) is None


def test_children_finds_a_real_child_and_not_a_grandchild():
    child = subprocess.Popen([sys.executable, "-c",
                              "import subprocess,sys; subprocess.Popen(['sleep','60']); sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not holder.children(child.pid) and time.monotonic() < deadline:  # until the grandchild exists
            time.sleep(0.05)
        grandchildren = holder.children(child.pid)
        assert len(grandchildren) == 1
        mine = holder.children(os.getpid())
        assert child.pid in mine and grandchildren[0] not in mine
    finally:
        for pid in holder.children(child.pid):
            os.kill(pid, signal.SIGKILL)
        child.kill()
        child.wait()


def test_alive_is_true_false_or_cannot_be_told():
    assert holder.alive(controller(os.getpid())) is True
    assert holder.alive(controller(os.getpid(), start="12345")) is False  # the pid was reused
    assert holder.alive(controller(4242, "1", "ctl-9")) is None  # another controller
    assert holder.alive({"holder": "x"}) is None and holder.alive({"unreadable": 0}) is None


def test_a_take_over_renews_the_lease_before_the_lock_changes_hands_in_one_rename(tmp_path):
    """The watchdog follows the lock: it must never see the lock missing, nor the new holder with a lapsed lease."""
    path = tmp_path / "sglang.service.lock"
    path.write_text(json.dumps({"token": "old"}))
    lease = tmp_path / "sglang.service.lock.lease"
    lease.write_text("5\n")
    os.utime(lease, (1, 1))  # lapsed long ago
    inode = path.stat().st_ino
    assert rollout_lock.take_over(str(path), {"token": "new"}, 600) is None
    assert json.loads(path.read_text()) == {"token": "new"} and path.stat().st_ino != inode
    assert lease.read_text() == "600\n" and time.time() - lease.stat().st_mtime < 60
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sglang.service.lock", "sglang.service.lock.lease"]


def test_a_lease_that_cannot_be_written_leaves_no_temporary_file(tmp_path):
    folder = tmp_path / "state"
    folder.mkdir()
    (folder / "x.lock.lease").mkdir()  # os.replace onto a folder fails, as a full disk's write does
    try:
        watchdog.renew_lease(str(folder / "x.lock"), 30)
    except OSError:
        pass
    else:
        raise AssertionError("renew_lease wrote over a folder")
    assert sorted(p.name for p in folder.iterdir()) == ["x.lock.lease"]


def lock_action(answers, calls):
    """action_plugins/rollout_lock.py with the host's module a TEST DOUBLE (scripted answers, calls recorded)."""
    from types import SimpleNamespace

    spec = importlib.util.spec_from_file_location("action_rollout_lock", REPO / "action_plugins" / "rollout_lock.py")
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)

    class ScriptedHost(plugin.ActionModule):
        def _execute_module(self, module_name=None, module_args=None, task_vars=None, **_):
            calls.append(dict(module_args))
            return dict(answers.pop(0))

    def make(args):
        task = SimpleNamespace(args=args, async_val=0, check_mode=False, action="rollout_lock")
        return ScriptedHost(task, SimpleNamespace(_shell=SimpleNamespace(tmpdir="/tmp/double")), None, None, None)
    return make


def test_a_take_over_of_a_living_rollbacks_lock_is_refused_before_the_lock_is_touched():
    calls = []
    living = {"run_id": "R2", "holder": "root@ctl pid 1 rollback", "restoring": True, **controller(os.getpid())}
    action = lock_action([{"held": False, "lock": living}], calls)(
        {"path": "/var/lib/serving-rollout/sglang.service.lock", "token": "mine", "steal": True, "lease_s": 600})
    result = action.run(task_vars={"ansible_play_name": "rollback"})
    assert result["failed"] and "held by another rollback, run R2 (root@ctl pid 1 rollback), which is still " \
        "running" in result["msg"]
    assert "nothing was taken over or changed" in result["msg"]
    assert [call["state"] for call in calls] == ["held"]  # read only: never present with steal


def test_a_living_runs_lock_is_taken_over_by_a_rollback():
    calls = []
    running = {"run_id": "R3", "restoring": False, **controller(os.getpid())}
    action = lock_action([{"held": False, "lock": running}, {"changed": True, "lock": {"token": "mine"},
                                                            "previous": running}], calls)(
        {"path": "/l", "token": "mine", "steal": True, "lease_s": 600})
    result = action.run(task_vars={})
    assert not result.get("failed") and "alive" in result["previous_liveness"] and len(calls) == 2


def test_a_dead_holders_lock_is_taken_over():
    calls = []
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = {"run_id": "R1", **controller(gone.pid, start="1")}
    action = lock_action([{"held": False, "lock": dead}, {"changed": True, "lock": {"token": "mine"},
                                                         "previous": dead}], calls)(
        {"path": "/l", "token": "mine", "steal": True, "lease_s": 600})
    result = action.run(task_vars={"ansible_play_name": "rollback"})
    assert not result.get("failed") and "not running (the run is dead" in result["previous_liveness"]
    assert [call["state"] if "state" in call else "present" for call in calls] == ["held", "present"]


def test_a_refusal_quotes_only_the_holders_own_phase(tmp_path):
    state = tmp_path / "state.json"
    lock = {"run_id": "R2", "holder": "root@ctl pid 9", "since": "2026-12-05T03:00:00Z"}
    state.write_text(json.dumps({"phase": "restored", "unit": "u", "candidate": "c"}))  # an earlier run's end
    assert rollout_lock.run_phase(lock, str(state)) is None
    assert "no phase recorded by that run (it had not begun to stop the original)" in rollout_lock.describe(
        lock, str(state))
    state.write_text(json.dumps({"phase": "candidate-running", "run_id": "R1"}))  # another run's
    assert rollout_lock.run_phase(lock, str(state)) is None
    state.write_text(json.dumps({"phase": "stopping-original", "run_id": "R2"}))
    assert rollout_lock.describe(lock, str(state)).endswith("last recorded phase 'stopping-original'")
    assert rollout_lock.run_phase(lock, None) is None


def test_a_dead_holder_is_asked_about_again_so_its_render_can_be_taken_over():
    calls = []
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = {"run_id": "R1", **controller(gone.pid, start="1")}
    action = lock_action([{"failed": True, "msg": "another rollout holds /l", "lock": dead},
                          {"changed": True, "lock": {"token": "mine"}, "stale": dead,
                           "stale_reason": "its controller process is gone"}], calls)({"path": "/l", "token": "mine"})
    result = action.run(task_vars={"ansible_play_name": "candidate"})
    assert not result.get("failed") and result["stale"] == dead
    assert [call.get("holder_dead", False) for call in calls] == [False, True]
    living = {"run_id": "R2", **controller(os.getpid())}
    calls.clear()
    refused = lock_action([{"failed": True, "msg": "another rollout holds /l", "lock": living}], calls)(
        {"path": "/l", "token": "mine"}).run(task_vars={})
    assert refused["failed"] and refused["msg"].endswith("alive (the run is still going; wait for it, or stop it "
                                                         "first)")
    assert len(calls) == 1


def test_of_two_take_overs_of_one_lock_the_second_is_refused(tmp_path):
    """Each rollback judged the dead run's lock (token 'dead'); the first takes it over, the second finds another
    token by then and is refused, the first's lock untouched."""
    path = tmp_path / "sglang.service.lock"
    path.write_text(json.dumps({"token": "dead"}))
    assert rollout_lock.take_over(str(path), {"token": "first"}, 600, expect="dead") is None
    assert rollout_lock.take_over(str(path), {"token": "second"}, 600, expect="dead") == "taken"
    assert json.loads(path.read_text()) == {"token": "first"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sglang.service.lock", "sglang.service.lock.lease"]
