"""--check on every playbook against the lab host: it runs read-only (and says what it would change),
or it stops at its first task with one line naming the dry run. Never an internal error, never a
change on the host."""

import re
import subprocess

import pytest
from conftest import LAB_HOST, REPO, run_playbook

LAB = LAB_HOST  # this test worker's lab host (conftest)
# The playbooks whose changes are their purpose: refused under --check at their first task.
REFUSED = {"candidate-p2p.yml": "candidate.yml", "candidate.yml": "candidate.yml", "rollback.yml": "rollback.yml",
           "promote.yml": "promote.yml", "plan.yml": "plan.yml"}
PLAYBOOKS = sorted(p.name for p in (REPO / "playbooks").glob("*.yml"))
EXTRA = {"plan_file": str(REPO / "plans" / "candidate-plan-example.json"), "promotion_run_id": "20261201T000000Z",
         "promotion_approved_run_id": "20261201T000000Z"}


def host_state():
    """What a change would show: the files, the unit's invocation, the tool's own state folder."""
    script = ("sha256sum /etc/systemd/system/sglang.service /etc/sglang/*.env; "
              "systemctl show -p InvocationID,ActiveState,UnitFileState sglang.service; "
              "ls /etc/systemd/system | grep -c candidate; "
              "find /var/lib/serving-rollout -type f -exec sha256sum {} + 2>/dev/null | sort")
    return subprocess.run(["podman", "exec", LAB, "sh", "-c", script], capture_output=True, text=True).stdout


@pytest.fixture(autouse=True)
def no_lock_left():
    """Each case starts from a lab host no run holds (a test elsewhere may have been killed mid-run)."""
    subprocess.run(["podman", "exec", LAB, "rm", "-f", "/var/lib/serving-rollout/sglang.service.lock"], check=False)


def test_every_playbook_is_covered():
    assert set(REFUSED) <= set(PLAYBOOKS) and "capture.yml" in PLAYBOOKS


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_check_mode_runs_read_only_or_is_refused_in_one_line(playbook, tmp_path):
    before = host_state()
    result = run_playbook(playbook, {"rollout_evidence_dir": str(tmp_path), "observation_writer_dir": str(tmp_path),
                                     **EXTRA}, inventory="inventory/lab", local=False, check=True)
    output = result.stdout + result.stderr
    assert not re.search(r"Traceback|filter plugin .* failed|Expecting value|An unhandled exception", output), \
        output[-3000:]
    if playbook in REFUSED:
        assert result.returncode != 0
        refusals = re.findall(rf"--check: {re.escape(REFUSED[playbook])} changes the host by design and has no dry "
                              r"run; nothing was touched\. \S", output)
        assert refusals, output[-3000:]
        assert len(re.findall(r"^fatal: ", result.stdout, re.M)) == 1  # one host, one line: nothing else failed
    elif playbook == "lab-provision-vllm.yml":
        # the real-engine host's provisioning on a host lab/vllm-up.sh did not start: refused by name
        assert result.returncode != 0 and "no /opt/vllm/bin/python on lab-gpu-1: start this host with " \
            "lab/vllm-up.sh" in output, output[-3000:]
    elif playbook == "peer-path.yml":
        # the lab has no GPU: the proof is skipped by name, under --check as without it
        assert result.returncode == 0 or "peer-path verdict skipped" in output, output[-3000:]
    else:
        assert result.returncode == 0, output[-3000:]
    assert host_state() == before
