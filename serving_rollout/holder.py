"""Who holds a host's rollout lock, and whether that controller process is still alive.

  python -m serving_rollout.holder me          this controller's ansible-playbook process as JSON
                                               {host, pid, pid_start} (run from a pipe lookup)
  python -m serving_rollout.holder alive LOCK  one line: the lock's holder and whether it runs

The pid alone is not enough (pids are reused): the process's start time (field 22 of
/proc/<pid>/stat) is recorded beside it, and a holder is alive only when both match.
"""

import json
import socket
import sys
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


def liveness(lock, here=None):
    """One line on the lock's holder: alive, dead, or on another controller (checked there)."""
    controller = (lock or {}).get("controller") or {}
    host, pid = controller.get("host"), controller.get("pid")
    if "unreadable" in (lock or {}):
        return "the lock is unreadable: no holder can be named; rollback.yml takes it over"
    if not pid:
        return "the lock names no controller process (an older run): whether it lives cannot be told"
    who = f"ansible-playbook pid {pid} on {host}"
    if host != (here or socket.gethostname()):
        return f"{who}: on another controller, check there (ps -p {pid})"
    stat = proc_stat(pid)
    if stat is None or stat[1] != str(controller.get("pid_start")):
        return f"{who}: not running (the run is dead; rollback.yml takes the lock over and restores the host)"
    return f"{who}: alive (the run is still going; wait for it, or stop it first)"


def main(argv):
    if argv == ["me"]:
        print(json.dumps(me()))
    elif len(argv) == 2 and argv[0] == "alive":
        try:
            lock = json.loads(argv[1])
        except ValueError:
            raise SystemExit(f"alive needs the lock as JSON, got {argv[1]!r:.80}") from None
        print(liveness(lock))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
