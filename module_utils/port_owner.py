"""Who serves on the engine's port, as the kernel and systemd say it: the processes holding a
listening socket on the port (/proc/net/tcp and tcp6, then each process's open sockets) and whether
each belongs to the unit's own control group (/proc/<pid>/cgroup against systemd's ControlGroup).

A health answer proves only that *something* answers: a foreign process bound to the port while the
original was down answers 200 too. This is the proof that the answer is the unit's. Pure reading of
/proc under `proc_root` (a fixture tree in tests); commands are never run here."""

import os
import re

from .host_files import proc_stat
from .unit_recipe import redact_argv

LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column
# Processes that listen on a container's published port for it: the container serves behind them.
PORT_FORWARDERS = ("docker-proxy", "rootlessport", "rootlessport-child", "conmon", "pasta", "pasta.avx2",
                   "slirp4netns")


def listening_inodes(tcp_text, port):
    """Socket inodes listening on `port` in one /proc/net/tcp{,6} text."""
    inodes = set()
    for line in (tcp_text or "").splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != LISTEN:
            continue
        _, _, port_hex = fields[1].rpartition(":")
        try:
            if int(port_hex, 16) == int(port):
                inodes.add(fields[9])
        except ValueError:
            continue
    return inodes


def _read(path, mode="r"):
    try:
        with open(path, mode) as handle:
            return handle.read()
    except OSError:
        return None


def _pids(proc_root):
    try:
        return sorted(int(name) for name in os.listdir(proc_root) if name.isdigit())
    except OSError:
        return []


def _holds(proc_root, pid, sockets):
    fd_dir = f"{proc_root}/{pid}/fd"
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return False
    for name in names:
        try:
            if os.readlink(f"{fd_dir}/{name}") in sockets:
                return True
        except OSError:
            continue
    return False


def cgroup_of(cgroup_text):
    """The unified (v2) or name=systemd (v1) cgroup path of one /proc/<pid>/cgroup text, or None."""
    v1 = None
    for line in (cgroup_text or "").splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and not controllers:
            return path
        if controllers == "name=systemd":
            v1 = path
    return v1


def in_group(cgroup, control_group):
    """Whether a process's cgroup is the unit's group or below it."""
    if not cgroup or not control_group:
        return False
    group = control_group.rstrip("/")
    return cgroup == group or cgroup.startswith(group + "/")


# A container's own scope, as systemd-managed runtimes name it (podman: libpod-<id>.scope, docker: docker-<id>.scope):
# a container unit's engine listens from there, outside the unit's group, behind its conmon or shim.
CONTAINER_SCOPE_RE = re.compile(r"/(?:libpod|docker|crio|cri-containerd)-[0-9a-f]{12,}\.scope(?:/|$)")


def ancestors(proc_root, pid, limit=64):
    """The pids above `pid` (its parent, the parent's parent, ...), read from /proc/<pid>/stat (host_files)."""
    found = []
    for _ in range(limit):
        stat = proc_stat(pid, proc_root)
        if stat is None or stat[0] <= 1:
            break
        pid = stat[0]
        found.append(pid)
    return found


def listeners(proc_root, port):
    """[{pid, command, cgroup}] of every process holding a listening socket on `port`."""
    inodes = set()
    for name in ("tcp", "tcp6"):
        inodes |= listening_inodes(_read(f"{proc_root}/net/{name}"), port)
    if not inodes:
        return []
    sockets = {f"socket:[{inode}]" for inode in inodes}
    found = []
    for pid in _pids(proc_root):
        if not _holds(proc_root, pid, sockets):
            continue
        raw = _read(f"{proc_root}/{pid}/cmdline", "rb") or b""
        argv = raw.decode(errors="replace").strip("\0").split("\0") if raw else []
        found.append({"pid": pid, "command": " ".join(redact_argv(argv))[:200] if argv else "?",
                      "program": os.path.basename(argv[0]) if argv else "?",
                      "cgroup": cgroup_of(_read(f"{proc_root}/{pid}/cgroup")),
                      "ancestors": ancestors(proc_root, pid)})
    return found


def judge(port, control_group, unit, found, main_pid=0):
    """{serving, judged, owners, forwarded, foreign, reason}: the unit serves on `port` when a listener is its own
    - in its control group, or its MainPID or a process below it (a host whose systemd cannot nest cgroups, such as
    a container without cgroup delegation, keeps every process in one group) - and no listener is foreign to it. A
    container runtime's port forwarder (docker-proxy, conmon, ...) or a container's own scope is neither: the
    container is proven by its runtime (name and image), not by the port, and the verdict says it was not judged."""
    main_pid = int(main_pid or 0)
    owners = [entry for entry in found if in_group(entry["cgroup"], control_group)
              or (main_pid and (entry["pid"] == main_pid or main_pid in entry.get("ancestors", [])))]
    forwarded = [entry for entry in found if entry not in owners and (
        entry["program"] in PORT_FORWARDERS or CONTAINER_SCOPE_RE.search(entry["cgroup"] or ""))]
    foreign = [entry for entry in found if entry not in owners and entry not in forwarded]
    verdict = {"port": int(port), "unit": unit, "control_group": control_group, "owners": owners,
               "forwarded": forwarded, "foreign": foreign, "serving": bool(owners or forwarded) and not foreign,
               "judged": not forwarded, "reason": None}
    if foreign:
        holders = "; ".join(f"pid {e['pid']} ({e['command']}) in {e['cgroup'] or 'no cgroup'}" for e in foreign)
        whose = (f"outside {unit}'s control group {control_group}" if control_group else
                 f"not of {unit} (which runs no process: no control group)")
        verdict["reason"] = (
            f"port {port} is held by a process {whose}: "
            f"{holders}. The answer on the port is not the original's. Next: stop that process "
            f"(kill {' '.join(str(e['pid']) for e in foreign)}), then run rollback.yml to restart and prove {unit}")
    elif forwarded:
        verdict["reason"] = (f"port {port} is held by {', '.join(e['program'] for e in forwarded)} of a container "
                             "(its runtime's forwarder or its own scope): the container is proven by its runtime's "
                             "name and image, not judged by the port")
    elif not found:
        verdict["reason"] = f"nothing listens on port {port}: {unit} does not serve there"
    return verdict


def port_of(base_url):
    """The TCP port of an engine URL (http://host:port/...); 80/443 by scheme when none is written."""
    scheme, _, rest = (base_url or "").partition("://")
    hostport = rest.split("/", 1)[0].rsplit("@", 1)[-1]
    tail = hostport.partition("]")[2] if hostport.startswith("[") else hostport
    _, sep, port = tail.rpartition(":")
    if sep and port.isdigit():
        return int(port)
    return 443 if scheme == "https" else 80


def who_serves(run, unit, port, proc_root="/proc"):
    """judge() for `unit` on `port`, systemd's ControlGroup read with `run` (a host_commands runner)."""
    rc, out, _ = run(["systemctl", "show", "-p", "ControlGroup,MainPID", "--", unit])
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line) if rc == 0 else {}
    main_pid = props.get("MainPID", "0")
    return judge(port, props.get("ControlGroup", ""), unit, listeners(proc_root, port),
                 int(main_pid) if main_pid.isdigit() else 0)
