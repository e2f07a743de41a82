"""Who holds a rollout lock and whether it still runs (serving_rollout.holder), and the lock file
written whole or named unreadable (library/rollout_lock.py's pure parts)."""

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

_spec = importlib.util.spec_from_file_location("rollout_lock", REPO / "library" / "rollout_lock.py")
rollout_lock = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rollout_lock)


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
