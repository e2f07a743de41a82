"""Who holds a host's rollout lock, and whether that controller process is still alive (used by the
rollout_lock action plugin on the controller, and by the CLI and the interrupted callback).

The pid alone is not enough (pids are reused): the process's start time (field 22 of
/proc/<pid>/stat) is recorded beside it, and a holder is alive only when both match.
"""

import socket
from pathlib import Path

from serving_rollout.module_utils.host_files import proc_stat


def cmdline(pid):
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def children(pid):
    """Pids whose parent is `pid` (a process gone meanwhile is left out)."""
    found = []
    for entry in Path("/proc").iterdir():
        stat = proc_stat(entry.name) if entry.name.isdigit() else None
        if stat and stat[0] == pid:
            found.append(int(entry.name))
    return found


def playbook_process(pid):
    """The topmost ansible-playbook process above `pid` (its workers are forks with the same command
    line), or None when there is none."""
    found = None
    while pid and pid > 1:
        if "ansible-playbook" in cmdline(pid):
            found = pid
        stat = proc_stat(pid)
        pid = stat[0] if stat else None
    return found


def me():
    pid = playbook_process(proc_stat("self")[0])
    return {"host": socket.gethostname(), "pid": pid, "pid_start": proc_stat(pid)[1] if pid else None}


def alive(lock, here=None):
    """True when the lock's holder (an ansible-playbook process) runs on this controller, False when it ran here
    and does not any more, None when that cannot be told (another controller, an older or unreadable lock)."""
    controller = (lock or {}).get("controller") or {}
    host, pid = controller.get("host"), controller.get("pid")
    if "unreadable" in (lock or {}) or not pid or host != (here or socket.gethostname()):
        return None
    stat = proc_stat(pid)
    return stat is not None and stat[1] == str(controller.get("pid_start"))


def liveness(lock, here=None):
    """One line on the lock's holder: alive, dead, or on another controller (checked there)."""
    controller = (lock or {}).get("controller") or {}
    host, pid = controller.get("host"), controller.get("pid")
    if "unreadable" in (lock or {}):
        return "the lock is unreadable: no holder can be named; rollback.yml takes it over"
    if not pid:
        return "the lock names no controller process (an older run): whether it lives cannot be told"
    who = f"ansible-playbook pid {pid} on {host}"
    living = alive(lock, here)
    if living is None:
        return f"{who}: on another controller, check there (ps -p {pid})"
    if not living:
        return f"{who}: not running (the run is dead; rollback.yml takes the lock over and restores the host)"
    return f"{who}: alive (the run is still going; wait for it, or stop it first)"
