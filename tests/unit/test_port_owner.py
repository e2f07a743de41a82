"""Who serves on the engine's port (module_utils/port_owner.py), read from a /proc tree laid out as the kernel
writes it: /proc/net/tcp's LISTEN rows, each process's socket links and its cgroup."""

import os

from serving_rollout.module_utils import port_owner

# /proc/net/tcp as Linux 6.x writes it: a listener on 0.0.0.0:30000 (0x7530) and an established client socket.
HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode"
TAIL = "00000000:00000000 00:00000000 00000000     0        0"
TCP = "\n".join([HEADER,
                 f"   0: 00000000:7530 00000000:0000 0A {TAIL} 41213 1 0000000000000000 100 0 0 10 0",
                 f"   1: 0100007F:7530 0100007F:A2B4 01 {TAIL} 41877 1 0000000000000000 20 4 30 10 -1"]) + "\n"
ANY6 = "0" * 32
TCP6 = "\n".join([HEADER, f"   0: {ANY6}:1F90 {ANY6}:0000 0A {TAIL} 52000 1 0000000000000000 100 0 0 10 0"]) + "\n"


def proc(tmp_path, processes, tcp=TCP, tcp6=TCP6):
    root = tmp_path / "proc"
    (root / "net").mkdir(parents=True)
    (root / "net" / "tcp").write_text(tcp)
    (root / "net" / "tcp6").write_text(tcp6)
    for pid, (argv, cgroup, sockets) in processes.items():
        (root / str(pid) / "fd").mkdir(parents=True)
        (root / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
        (root / str(pid) / "cgroup").write_text(cgroup)
        for n, inode in enumerate(sockets):
            os.symlink(f"socket:[{inode}]", root / str(pid) / "fd" / str(n + 3))
        os.symlink("/dev/null", root / str(pid) / "fd" / "0")
    return str(root)


ENGINE = (["python3", "-m", "sglang.launch_server", "--port", "30000", "--api-key", "sk-live-123"],
          "0::/system.slice/sglang.service\n", ["41213"])


def test_the_units_own_listener_serves(tmp_path):
    root = proc(tmp_path, {412: ENGINE})
    verdict = port_owner.judge(30000, "/system.slice/sglang.service", "sglang.service",
                               port_owner.listeners(root, 30000))
    assert verdict["serving"] and verdict["judged"] and verdict["foreign"] == []
    assert [o["pid"] for o in verdict["owners"]] == [412]
    assert "sk-live-123" not in str(verdict)  # the command is shown through the allow-list


def test_a_foreign_listener_is_named_with_its_pid_command_cgroup_and_the_next_step(tmp_path):
    foreign = (["python3", "-m", "http.server", "30000"], "0::/user.slice/session-4.scope\n", ["41213"])
    root = proc(tmp_path, {412: (ENGINE[0], ENGINE[1], []), 977: foreign})
    verdict = port_owner.judge(30000, "/system.slice/sglang.service", "sglang.service",
                               port_owner.listeners(root, 30000))
    assert not verdict["serving"] and [f["pid"] for f in verdict["foreign"]] == [977]
    assert verdict["reason"].startswith("port 30000 is held by a process outside sglang.service's control group "
                                        "/system.slice/sglang.service: pid 977 (python3 -m http.server 30000) in "
                                        "/user.slice/session-4.scope")
    assert "kill 977" in verdict["reason"] and "rollback.yml" in verdict["reason"]


def test_a_process_below_the_units_group_and_a_v1_hierarchy_count_as_the_units(tmp_path):
    child = (["python3", "worker"], "12:cpu:/x\n1:name=systemd:/system.slice/vllm.service/payload\n", ["52000"])
    root = proc(tmp_path, {88: child})
    verdict = port_owner.judge(8080, "/system.slice/vllm.service", "vllm.service", port_owner.listeners(root, 8080))
    assert verdict["serving"] and verdict["owners"][0]["cgroup"] == "/system.slice/vllm.service/payload"
    assert not port_owner.in_group("/system.slice/vllm.service-candidate", "/system.slice/vllm.service")


def test_a_container_runtimes_forwarder_is_not_foreign_but_not_judged(tmp_path):
    proxy = (["/usr/bin/docker-proxy", "-proto", "tcp", "-host-port", "30000"], "0::/system.slice/docker.service\n",
             ["41213"])
    root = proc(tmp_path, {501: proxy})
    verdict = port_owner.judge(30000, "/system.slice/sglang.service", "sglang.service",
                               port_owner.listeners(root, 30000))
    assert verdict["serving"] and not verdict["judged"] and verdict["foreign"] == []
    assert "held by docker-proxy of a container" in verdict["reason"]


def test_nothing_listening_is_said_and_only_listen_rows_count(tmp_path):
    root = proc(tmp_path, {412: (ENGINE[0], ENGINE[1], ["41877"])})  # holds only the established socket
    verdict = port_owner.judge(30000, "/system.slice/sglang.service", "sglang.service",
                               port_owner.listeners(root, 30000))
    assert not verdict["serving"] and verdict["owners"] == verdict["foreign"] == []
    assert verdict["reason"] == "nothing listens on port 30000: sglang.service does not serve there"


def test_the_port_of_an_engine_url():
    assert port_owner.port_of("http://127.0.0.1:30000") == 30000
    assert port_owner.port_of("http://[::1]:8000/v1") == 8000
    assert port_owner.port_of("https://engine.internal/health") == 443
    assert port_owner.port_of("http://user:pw@host:9000/") == 9000


def test_who_serves_reads_the_control_group_from_systemd(tmp_path):
    root = proc(tmp_path, {412: ENGINE})
    calls = []

    def run(argv, **_):
        calls.append(argv)
        return 0, "ControlGroup=/system.slice/sglang.service\nMainPID=412\n", ""

    verdict = port_owner.who_serves(run, "sglang.service", 30000, proc_root=root)
    assert verdict["serving"] and calls == [["systemctl", "show", "-p", "ControlGroup,MainPID", "--",
                                             "sglang.service"]]


def test_without_cgroup_nesting_the_units_main_pid_and_its_children_are_its_own(tmp_path):
    """A systemd container without cgroup delegation (molecule's) keeps every process in the container's group:
    the unit's MainPID, and a worker below it, still own the port; an unrelated process there does not."""
    flat = "0::/libpod_parent/libpod-7ffede7bc7d8\n"
    root = proc(tmp_path, {412: (ENGINE[0], flat, []), 413: (["python3", "worker"], flat, ["41213"]),
                           977: (["python3", "-m", "http.server"], flat, ["52000"])})
    # /proc/<pid>/stat as Linux writes it (52 fields; the parent pid 4th, the start time 22nd)
    tail = " ".join(["0"] * 48)
    (tmp_path / "proc" / "413" / "stat").write_text(f"413 (python3) S 412 {tail}\n")
    (tmp_path / "proc" / "412" / "stat").write_text(f"412 (python3) S 1 {tail}\n")
    verdict = port_owner.judge(30000, "/system.slice/sglang.service", "sglang.service",
                               port_owner.listeners(root, 30000), main_pid=412)
    assert verdict["serving"] and [o["pid"] for o in verdict["owners"]] == [413]
    other = port_owner.judge(8080, "/system.slice/sglang.service", "sglang.service",
                             port_owner.listeners(root, 8080), main_pid=412)
    assert [f["pid"] for f in other["foreign"]] == [977]


def test_a_container_units_engine_in_its_own_scope_is_not_judged_by_the_port(tmp_path):
    scope = "0::/system.slice/machine.slice/libpod-30c5f4f7ad04705e88a4cac0ec5d25ed.scope/container\n"
    root = proc(tmp_path, {20214: (["python3", "/opt/engine-double/engine_double.py"], scope, ["41213"])})
    verdict = port_owner.judge(30000, "/system.slice/sglang-ctr.service", "sglang-ctr.service",
                               port_owner.listeners(root, 30000))
    assert verdict["serving"] and not verdict["judged"] and verdict["foreign"] == []
