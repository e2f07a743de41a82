"""The lab serving host: a real systemd container carrying the operator's original unit."""

import pytest
import testinfra
from conftest import LAB_HOST

LAB = LAB_HOST  # this test worker's lab host (conftest)
# bin/test's workers run this file on one of them: one testinfra connection (module fixture) for the file.
pytestmark = pytest.mark.xdist_group("test_lab_host")


@pytest.fixture(scope="module")
def lab():
    return testinfra.get_host(f"podman://{LAB}")


def test_systemd_is_running(lab):
    assert lab.run("systemctl is-system-running").stdout.strip() == "running"


def test_original_unit_active_enabled_with_defensive_controls(lab):
    unit = lab.service("sglang.service")
    assert unit.is_running and unit.is_enabled
    text = lab.file("/etc/systemd/system/sglang.service").content_string
    for expected in ("NCCL_P2P_DISABLE=1", "NCCL_CUMEM_ENABLE=0", "--tp-size 2",
                     "--context-length", "--disable-custom-all-reduce", "--revision",
                     "EnvironmentFile=/etc/sglang/sglang.env"):
        assert expected in text, expected


def test_secret_environment_file_is_root_only(lab):
    env_file = lab.file("/etc/sglang/sglang.env")
    assert env_file.mode == 0o600 and env_file.user == "root"
    assert "SGLANG_API_KEY=" in env_file.content_string


def test_engine_reports_shm_transport_and_is_ready(lab):
    journal = lab.run("journalctl -u sglang.service -o cat _SYSTEMD_INVOCATION_ID="
                      "$(systemctl show -p InvocationID --value sglang.service)").stdout
    assert "via SHM/direct/direct" in journal and "via P2P" not in journal
    assert "The server is fired up and ready to roll!" in journal
    health = lab.run("python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:30000/health').status)\"")
    assert health.stdout.strip() == "200"
