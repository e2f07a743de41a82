"""A fleet of three lab hosts through bin/serving-rollout (ansible-runner): canary, then batches,
stopping at the first host that fails; a fleet-wide rollback."""

import contextlib
import json
import os
import re
import signal
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import testinfra
from conftest import CPU_SHARED_WITH_OTHER_JOBS, LAB_HOST, REPO
from restored import restored_problems

from serving_rollout import bake_metrics, fleet_promotion, holder
from serving_rollout import evidence as evidence_tool
from serving_rollout.module_utils import engine_metrics

HOSTS = {"lab-gpu-1": LAB_HOST, "lab-gpu-2": "serving-lab-gpu-2", "lab-gpu-3": "serving-lab-gpu-3"}
FAULTS = "/etc/engine-double/faults/sglang-candidate.service"
LAB_SECRETS = (b"lab-secret-6f1d0c9e2b7a4e58", b"hf_labSecretToken0123456789abcdef")  # lab_serving_host defaults
SMALL = json.dumps({"rollout_cells": [{"name": "1k", "prompt_tokens": 1000}], "rollout_cell_requests": 4,
                    **CPU_SHARED_WITH_OTHER_JOBS})
# bin/test's workers run this file on one of them: the fleet's three lab hosts (module fixture): one worker at a time.
pytestmark = pytest.mark.xdist_group("test_fleet")


def on(host, *command, check=True):
    return subprocess.run(["podman", "exec", HOSTS[host], *command], capture_output=True, text=True, check=check)


def cli(*args):
    return subprocess.run([REPO / "bin" / "serving-rollout", *args], capture_output=True, text=True, timeout=600)


def identity(host):
    return on(host, "systemctl", "show", "-p", "InvocationID,ActiveState,NRestarts", "sglang.service").stdout, \
        on(host, "sha256sum", "/etc/systemd/system/sglang.service").stdout


@pytest.fixture(scope="module")
def fleet():
    subprocess.run([REPO / "lab" / "fleet-up.sh"], check=True, capture_output=True)
    # The lab's Prometheus, named in inventory/lab-fleet: a fleet promotion's bakes read the engines' series from it.
    subprocess.run([REPO / "lab" / "prometheus-up.sh"], check=True, capture_output=True)
    # A candidate effect far outside any noise (speedup), so the canary's verdict holds on a loaded machine.
    for host in HOSTS:
        on(host, "sh", "-c", f"mkdir -p /etc/engine-double/faults && echo speedup:0.5 > {FAULTS}")
    yield
    for host in HOSTS:
        on(host, "rm", "-f", FAULTS, "/var/lib/serving-rollout/sglang.service.lock", check=False)


def test_a_fault_on_the_second_batchs_host_stops_the_fleet_with_it_restored(fleet):
    on("lab-gpu-2", "sh", "-c", f"echo speedup:0.5,fail_requests > {FAULTS}")
    untouched = identity("lab-gpu-3")
    restored = identity("lab-gpu-2")[1]
    evidence = tempfile.mkdtemp(prefix="fleet-evidence-")
    result = cli("run", "candidate", "-i", "inventory/lab-fleet", "--canary", "1", "--batch-size", "1",
                 "--evidence", evidence, "-e", SMALL)
    assert result.returncode == 2, result.stdout[-4000:] + result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert "lab-gpu-1: phase candidate-running" in lines and "lab-gpu-2: phase restored" in lines
    assert any(line.startswith("lab-gpu-1: acceptable, verdict acceptable") for line in lines)
    assert any(line.startswith("lab-gpu-2: FAILED at ") for line in lines)
    # Ansible ends the play when a whole batch failed; had lab-gpu-2 shared its batch with a host that
    # passed, the next batch's gate would stop it ("NOT STARTED"). Either way it is listed, untouched.
    assert "lab-gpu-3: not-started" in lines
    assert lines[-2].startswith("exit 2: a host failed and was restored and proven")
    assert lines[-1].startswith("next: review the cards") and "promote " in lines[-1] and "--fleet --dry-run" in \
        lines[-1]
    # The failed host is restored and proven; the host after it never touched.
    state, unit = identity("lab-gpu-2")
    assert unit == restored and "ActiveState=active" in state and "NRestarts=0" in state
    assert identity("lab-gpu-3") == untouched
    recipes = json.loads(next(Path(evidence, "lab-gpu-2").glob("rollout-*/recipes.json")).read_text())
    assert restored_problems(testinfra.get_host(f"podman://{HOSTS['lab-gpu-2']}"), "sglang.service",
                             recipes["original_files"]) == []
    # The structured result and the fleet summary say the same.
    runner = next(Path(evidence, "runner").glob("candidate-*"))
    doc = json.loads((runner / "result.json").read_text())
    assert doc["exit_code"] == 2 and (Path(doc["artifacts"]) / "job_events").is_dir()
    assert [(h["host"], h["outcome"]) for h in doc["hosts"]] == \
        [("lab-gpu-1", "acceptable"), ("lab-gpu-2", "failed, restored"), ("lab-gpu-3", "not-started")]
    summary = json.loads(Path(doc["fleet_summary"]).read_text())
    assert summary["stopped_at"] == "lab-gpu-2" and Path(summary["hosts"][0]["evidence"]).is_dir()
    assert "fail" in summary["hosts"][1]["failure"]
    index = json.loads(Path(evidence, "index.json").read_text())
    assert index["fleets"][-1]["hosts"] == {"lab-gpu-1": "acceptable", "lab-gpu-2": "failed, restored",
                                            "lab-gpu-3": "not-started"}
    assert not Path(evidence, "lab-gpu-3").exists()
    # Runner's artifacts (every event, with module arguments and results) hold none of the lab's secrets.
    for path in Path(evidence, "runner").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert not any(secret in data for secret in LAB_SECRETS), path


def restoration(evidence, host):
    return json.loads(next(Path(evidence, host).glob("rollback-*/restoration.json")).read_text())


def test_rollback_fleet_wide(fleet):
    # lab-gpu-3 was never changed (the fleet stopped before it); like a host no run ever reached, it has
    # no snapshot, whatever earlier lab sessions left there.
    on("lab-gpu-3", "rm", "-rf", "/var/lib/serving-rollout/sglang.service")
    evidence = tempfile.mkdtemp(prefix="fleet-rollback-")
    result = cli("rollback", "-i", "inventory/lab-fleet", "--evidence", evidence, "--json")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    doc = json.loads(result.stdout)
    assert doc["hosts"] == [{"host": h, "outcome": "ok"} for h in HOSTS]
    for host in ("lab-gpu-1", "lab-gpu-2"):
        proof = restoration(evidence, host)
        assert proof["restored"] is True and proof["nothing_to_restore"] is False and proof["files"], proof
    untouched = restoration(evidence, "lab-gpu-3")
    assert untouched["restored"] is True and untouched["nothing_to_restore"] is True, untouched
    assert untouched["state_after"]["ActiveState"] == "active" and untouched["files"] == []


def failed_rollback_of_lab_gpu_3():
    """rollback.yml on lab-gpu-3 alone, expected to fail (exit 4); why, as its restoration record says."""
    evidence = tempfile.mkdtemp(prefix="fleet-rollback-")
    result = cli("rollback", "-i", "inventory/lab-fleet", "--evidence", evidence, "--json",
                 "-e", '{"rollout_hosts": "lab-gpu-3"}')
    assert result.returncode == 4, result.stdout[-4000:] + result.stderr[-2000:]
    proof = restoration(evidence, "lab-gpu-3")
    assert proof["restored"] is False
    # The refused rollback released its own lock: the next run is not refused by it.
    assert on("lab-gpu-3", "test", "-e", "/var/lib/serving-rollout/sglang.service.lock", check=False).returncode == 1
    return " ".join(proof["failure"].split())


def test_rollback_refuses_a_candidate_unit_without_a_snapshot(fleet):
    on("lab-gpu-3", "rm", "-rf", "/var/lib/serving-rollout/sglang.service")
    on("lab-gpu-3", "cp", "/etc/systemd/system/sglang.service", "/etc/systemd/system/sglang-candidate.service")
    try:
        failure = failed_rollback_of_lab_gpu_3()
        assert "sglang-candidate.service is installed but there is no snapshot of sglang.service" in failure
        # Refused before any change: the serving unit kept running.
        assert "ActiveState=active" in identity("lab-gpu-3")[0]
    finally:
        on("lab-gpu-3", "rm", "-f", "/etc/systemd/system/sglang-candidate.service")


def test_rollback_of_a_never_changed_unit_that_is_not_serving_fails_naming_its_state(fleet):
    on("lab-gpu-3", "rm", "-rf", "/var/lib/serving-rollout/sglang.service")
    on("lab-gpu-3", "systemctl", "stop", "sglang.service")
    try:
        failure = failed_rollback_of_lab_gpu_3()
        assert "no snapshot of sglang.service on this host (serving-rollout never changed it) and it is not " \
               "serving: ActiveState=inactive UnitFileState=enabled LoadState=loaded" in failure, failure
        # Nothing to restore from, so nothing is started or changed: the operator's stop stands.
        assert "ActiveState=inactive" in identity("lab-gpu-3")[0]
    finally:
        on("lab-gpu-3", "systemctl", "start", "sglang.service")


# 20 s bakes at 1 s intervals: at least 10 finished requests of the traffic double in each window on a busy machine.
# The metric rule is wide (a latency 50 % worse) and the injected regression far wider (4x), so a busy machine's
# noise between the original's window and the promoted one's can neither fail the canary nor hide the regression.
PROMOTE_FLEET = ["-i", "inventory/lab-fleet", "--canary", "1", "--batch-size", "2", "--bake-s", "20",
                 "--bake-interval-s", "1", "--bake-min-effect", "0.5", "--bake-min-requests", "10"]


def traffic(host, start=True):
    """The users' traffic double on the host (playbooks/lab-prometheus.yml put it there), as a transient unit."""
    if start:
        on(host, "systemd-run", "--unit", "lab-traffic", "-p", "EnvironmentFile=/etc/sglang/sglang.env", "python3",
           "/usr/local/bin/lab_traffic.py")
    else:
        on(host, "systemctl", "stop", "lab-traffic", check=False)


def lose_the_controller_while_baking(approve, state_path):
    """bin/serving-rollout's fleet promotion and every process under it (ansible-runner's ansible-playbook has its
    own session) killed as a lost controller dies, once the canary's promoted unit is baking."""
    proc = subprocess.Popen([REPO / "bin" / "serving-rollout", *approve], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        for _ in range(1200):  # polled (a local file): a cap, not a margin
            state = json.loads(state_path.read_text()) if state_path.is_file() else {}
            if state.get("hosts", {}).get("lab-gpu-1", {}).get("state") == "baking":
                break
            assert proc.poll() is None, f"the promotion ended before its canary baked: {state}"
            time.sleep(0.5)
        else:
            raise AssertionError("the canary never baked within 600 s")
    finally:
        tree, found = [proc.pid], 0
        while found < len(tree):
            tree += holder.children(tree[found])
            found += 1
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=30)


def test_a_clean_fleet_promotion_promotes_the_canary_then_a_batch_of_two_each_proven(fleet):
    """A fleet run, every host acceptable; promote --fleet approved as its dry run showed it: the canary (lab-gpu-1)
    watched, promoted and baked, then the batch of two (lab-gpu-2, lab-gpu-3) the same way, under users' traffic,
    each engine's series read from the lab's Prometheus; every host passes and is left promoted, proven by systemd
    (active, the promoted unit's text, the host's promotion record) and named; then the fleet rolled back, proven."""
    for host in HOSTS:  # every candidate faster (the fixture's effect; the test before left lab-gpu-2 failing)
        on(host, "sh", "-c", f"echo speedup:0.5 > {FAULTS}")
    evidence = tempfile.mkdtemp(prefix="fleet-promotion-clean-")
    ran = cli("run", "candidate", "-i", "inventory/lab-fleet", "--canary", "1", "--batch-size", "2",
              "--evidence", evidence, "-e", SMALL)
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-2000:]
    run_id = json.loads(next(Path(evidence, "runner").glob("candidate-*/result.json")).read_text())["run_id"]
    originals = {host: identity(host)[1] for host in HOSTS}
    # the promoted unit carries the measured candidate's effect (the double's fault for a P2P-enabled sglang.service):
    # faster than its original by far more than a busy machine's noise, so the rule's one-sided test holds
    faster = "/etc/engine-double/faults/sglang.service+p2p"
    options = ["-i", "inventory/lab-fleet", "--canary", "1", "--batch-size", "2", "--bake-s", "12",
               "--bake-interval-s", "2", "--bake-min-effect", "0.5", "--bake-min-requests", "8", "--evidence", evidence]
    try:
        dry = cli("promote", run_id, "--fleet", "--dry-run", *options)
        assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-2000:]
        assert dry.stdout.splitlines()[1:3] == ["  batch 1 (canary): lab-gpu-1; then a 12 s bake",
                                                "  batch 2 (batch): lab-gpu-2, lab-gpu-3; then a 12 s bake"], dry.stdout
        plan_id = re.search(r"--approve (\w+)", dry.stdout).group(1)
        for host in HOSTS:
            on(host, "sh", "-c", f"echo speedup:0.5 > '{faster}'")
            traffic(host)
        promoted = cli("promote", run_id, "--fleet", "--approve", plan_id, *options)
        out = promoted.stdout
        assert promoted.returncode == 0, out[-4000:] + promoted.stderr[-2000:]
        assert out.index("batch 1: promoting lab-gpu-1") < out.index("batch 2 of 2: watching the originals of "
                                                                     "lab-gpu-2, lab-gpu-3"), out
        state = json.loads(Path(evidence, f"fleet-promotion-{run_id}", "state.json").read_text())
        assert {h: s["state"] for h, s in state["hosts"].items()} == dict.fromkeys(HOSTS, "passed"), state
        assert state["ended"] == "every batch passed its bake" and state["promoted_left"] == list(HOSTS), state
        assert evidence_tool.verify(Path(evidence, f"fleet-promotion-{run_id}"), sealed=True) == []
        for host in HOSTS:
            assert state["hosts"][host]["metrics"]["source"] == PROMETHEUS, state["hosts"][host]
            show, digest = identity(host)
            assert "ActiveState=active" in show and digest != originals[host], (host, show)
            assert "Environment=NCCL_P2P_DISABLE=0" in on(host, "cat", "/etc/systemd/system/sglang.service").stdout
            record = json.loads(on(host, "cat", "/var/lib/serving-rollout/sglang.service/promoted.json").stdout)
            assert record["run_id"] == run_id, record
        # The bakes' smokes carry the hosts' API key: no lab secret in the console or in any record the promotion
        # wrote (its state, report, each host's bake series and verdict, runner's artifacts of every playbook).
        written = [p for p in Path(evidence).rglob("*") if p.is_file()]
        assert len(written) > 50 and not [p for p in written if any(x in p.read_bytes() for x in LAB_SECRETS)]
        assert not any(x.decode() in out + promoted.stderr for x in LAB_SECRETS)
    finally:
        for host in HOSTS:
            traffic(host, start=False)
            on(host, "rm", "-f", faster, check=False)
        back = cli("rollback", "-i", "inventory/lab-fleet", "--evidence", evidence)
    assert back.returncode == 0, back.stdout[-3000:]
    assert {host: identity(host)[1] for host in HOSTS} == originals


def test_a_fleet_promotion_bakes_each_batch_and_rolls_back_the_one_whose_bake_fails(fleet):
    """A fleet run: lab-gpu-1 and -2 acceptable, lab-gpu-3 rejected (its candidate slowed). promote --fleet: the dry
    run shows the plan (canary lab-gpu-1, then lab-gpu-2; lab-gpu-3 skipped, named); approved, with users' traffic on
    both hosts, each batch's original is watched, then promoted and baked, its engine's series read from the lab's
    real Prometheus. The controller is lost while the canary bakes (every process killed); the same approval again
    resumes there: the canary found promoted, baked again against its original's kept window. lab-gpu-1's promoted
    engine is as fast as its original: it passes. lab-gpu-2's promoted engine
    is 4x slower (a fault of the double that only the P2P-enabled unit loads): its bake fails on its metrics (E2E
    against its original's window), lab-gpu-2 is rolled back and proven; lab-gpu-3 is never touched; lab-gpu-1 stays
    promoted, named with the command that rolls it back."""
    on("lab-gpu-2", "sh", "-c", f"echo speedup:0.5 > {FAULTS}")
    on("lab-gpu-3", "sh", "-c", f"echo slowdown:0.5 > {FAULTS}")
    evidence = tempfile.mkdtemp(prefix="fleet-promotion-")
    ran = cli("run", "candidate", "-i", "inventory/lab-fleet", "--canary", "1", "--batch-size", "2",
              "--evidence", evidence, "-e", SMALL)
    assert ran.returncode == 1, ran.stdout[-4000:] + ran.stderr[-2000:]  # lab-gpu-3 not acceptable
    run_id = json.loads(next(Path(evidence, "runner").glob("candidate-*/result.json")).read_text())["run_id"]
    originals = {host: identity(host)[1] for host in HOSTS}
    slower = "/etc/engine-double/faults/sglang.service+p2p"  # the promoted unit allows P2P; its original does not
    try:
        dry = cli("promote", run_id, "--fleet", "--dry-run", "--evidence", evidence, *PROMOTE_FLEET)
        assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-2000:]
        lines = dry.stdout.splitlines()
        assert lines[1:3] == ["  batch 1 (canary): lab-gpu-1; then a 20 s bake",
                              "  batch 2 (batch): lab-gpu-2; then a 20 s bake"], lines
        assert lines[3] == "  skipped lab-gpu-3: its run's verdict is reject, which does not allow promotion", lines
        assert lines[4].startswith("  bake's metric rule: min_effect 50%"), lines
        plan_id = re.search(r"--approve (\w+)", lines[-1]).group(1)
        assert identity("lab-gpu-1")[1] == originals["lab-gpu-1"]  # the dry run changed nothing
        on("lab-gpu-2", "sh", "-c", f"echo slowdown:3 > '{slower}'")
        for host in ("lab-gpu-1", "lab-gpu-2"):
            traffic(host)
        approve = ["promote", run_id, "--fleet", "--approve", plan_id, "--evidence", evidence, *PROMOTE_FLEET]
        lose_the_controller_while_baking(approve, Path(evidence, f"fleet-promotion-{run_id}", "state.json"))
        # lab-gpu-1's promotion had finished: promoted, its lock released (the host's watchdog had no duty left)
        assert "Environment=NCCL_P2P_DISABLE=0" in on("lab-gpu-1", "cat", "/etc/systemd/system/sglang.service").stdout
        assert on("lab-gpu-1", "test", "-e", "/var/lib/serving-rollout/sglang.service.lock", check=False).returncode
        promoted = cli(*approve)  # the same approval again: the promotion resumes where it stopped
        out = promoted.stdout
        assert "fleet promotion: resuming plan " in out and "lab-gpu-1 baking" in out, out[-3000:]
        assert "batch 1: promoting again (resumed) lab-gpu-1" in out, out[-3000:]
        assert promoted.returncode == 2, out[-4000:] + promoted.stderr[-2000:]
        assert "lab-gpu-1: passed" in out and "lab-gpu-3: skipped (its run's verdict is reject" in out, out
        # E2E judged worse (the rule's median or p90: the histogram's coarse buckets may hold a median still)
        assert re.search(r"^lab-gpu-2: rolled back \(bake failed: .*E2E p50 [\d.]+ -> [\d.]+ s \([+-][\d.]+%\), "
                         r"p90 [\d.]+ -> [\d.]+ s \([+-][\d.]+%\), Mann-Whitney p\(worse\) [\d.e-]+: worse by at "
                         r"least 50%", out, re.M), out
        assert "to roll them back too: bin/serving-rollout rollback -i inventory/lab-fleet -e rollout_hosts=lab-gpu-1" \
            in out
        assert "Environment=NCCL_P2P_DISABLE=0" in on("lab-gpu-1", "cat", "/etc/systemd/system/sglang.service").stdout
        assert [identity(host)[1] for host in ("lab-gpu-2", "lab-gpu-3")] == [originals["lab-gpu-2"],
                                                                                originals["lab-gpu-3"]]
        state = json.loads(Path(evidence, f"fleet-promotion-{run_id}", "state.json").read_text())
        assert {h: s["state"] for h, s in state["hosts"].items()} == {
            "lab-gpu-1": "passed", "lab-gpu-2": "rolled back", "lab-gpu-3": "skipped"}
        # the promotion's record, each host's bake series and verdict with it, sealed like a run's
        assert evidence_tool.verify(Path(evidence, f"fleet-promotion-{run_id}"), sealed=True) == []
        judged = json.loads(Path(evidence, f"fleet-promotion-{run_id}", "hosts", "lab-gpu-2.json").read_text())[
            "judgement"]
        e2e = next(m for m in judged["metrics"] if m["metric"] == "e2e")
        assert judged["verdict"] == "fail" and e2e["verdict"] == "worse", judged
        assert max(e2e["deltas"].values()) >= 0.5 and e2e["p_worse"] < 0.05, e2e  # 4x slower: beyond the rule
        canary = state["hosts"]["lab-gpu-1"]["metrics"]
        assert canary["verdict"] == "pass" and canary["source"] == "http://127.0.0.1:9391", canary
        assert canary["shown"]["requests"][0] >= 10 and canary["shown"]["requests"][1] >= 10, canary
        bakes = [json.loads(p.read_text()) for p in Path(evidence, "lab-gpu-2").glob("bake-*/bake.json")]
        assert sorted(b["phase"] for b in bakes) == ["original", "promoted"] and all(
            b["bake"]["verdict"] == "pass" for b in bakes)  # healthy to systemd and the journal: only metrics tell
        files = json.loads(next(Path(evidence, "lab-gpu-2").glob("rollout-*/recipes.json")).read_text())
        assert restored_problems(testinfra.get_host(f"podman://{HOSTS['lab-gpu-2']}"), "sglang.service",
                                 files["original_files"]) == []
    finally:
        for host in ("lab-gpu-1", "lab-gpu-2"):
            traffic(host, start=False)
        on("lab-gpu-2", "rm", "-f", slower, check=False)
        back = cli("rollback", "-i", "inventory/lab-fleet", "--evidence", evidence, "-e",
                   '{"rollout_hosts": "lab-gpu-1"}')
        for host in ("lab-gpu-2", "lab-gpu-3"):
            on(host, "sh", "-c", f"echo speedup:0.5 > {FAULTS}")
    assert back.returncode == 0, back.stdout[-3000:]
    assert identity("lab-gpu-1")[1] == originals["lab-gpu-1"]


PROMETHEUS = "http://127.0.0.1:9391"  # inventory/lab-fleet's rollout_prometheus_url


def scraped_after(host, moment):
    """Wait until the lab's Prometheus holds a sample of the host's engine taken after `moment` (polled: it scrapes
    each second), then read the engine's /metrics directly: both now see the same counters."""
    query = f'max(timestamp(sglang:e2e_request_latency_seconds_count{{host="{host}"}}))'
    for _ in range(240):
        body = json.loads(urllib.request.urlopen(f"{PROMETHEUS}/api/v1/query?" + urllib.parse.urlencode(
            {"query": query}), timeout=10).read())
        if body["data"]["result"] and float(body["data"]["result"][0]["value"][1]) > moment:
            break
        time.sleep(0.25)
    else:
        raise AssertionError(f"Prometheus took no sample of {host} after {moment} in 60 s")
    address = on(host, "hostname", "-I").stdout.split()[0]
    return engine_metrics.bake_reading("sglang", f"http://{address}:9400")


def test_prometheus_and_the_engines_own_metrics_give_the_same_window(fleet):
    """The same window read both ways (quiet at both ends, so both see the same counters): the engine's /metrics as a
    bake without a Prometheus reads it, and PromQL at the same two moments, as a bake with one does."""
    start = scraped_after("lab-gpu-1", time.time())
    address = on("lab-gpu-1", "hostname", "-I").stdout.split()[0]
    for n in range(25):  # users' requests of mixed lengths through the host's metrics proxy (it forwards any)
        body = json.dumps({"model": "m", "max_tokens": 16 + 4 * n,
                           "messages": [{"role": "user", "content": "w " * 99}]})
        urllib.request.urlopen(urllib.request.Request(
            f"http://{address}:9400/v1/chat/completions", data=body.encode(), method="POST",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {LAB_SECRETS[0].decode()}"}),
            timeout=60).read()
    end = scraped_after("lab-gpu-1", time.time())
    scraped = bake_metrics.window(start, end)
    asked = bake_metrics.window(*[bake_metrics.prometheus_reading(PROMETHEUS, "sglang", {"host": "lab-gpu-1"}, r["at"])
                                  for r in (start, end)])
    assert scraped["ok"] and scraped["latency_requests"] == 25 and scraped["requests"] == 25, scraped
    assert asked == scraped


def test_a_prometheus_stopped_mid_bake_fails_the_bake_naming_it(fleet, tmp_path):
    """bake.yml watches lab-gpu-1's unit, its window to be read from a Prometheus of its own (the lab's configuration,
    another port; the lab's shared one stays up for the other tests) that is stopped while the bake runs: the unit is
    healthy, the window cannot be read, and the fleet promotion's comparison fails it, naming Prometheus and why."""
    own = subprocess.Popen(["prometheus", f"--config.file={REPO / 'lab' / '.prometheus' / 'prometheus.yml'}",
                            f"--storage.tsdb.path={tmp_path / 'data'}", "--web.listen-address=127.0.0.1:9392",
                            "--log.level=error"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = "http://127.0.0.1:9392"
    options = {"rollout_hosts": "lab-gpu-1", "rollout_bake_s": 6, "rollout_bake_interval_s": 1,
               "rollout_bake_phase": "original", "rollout_evidence_dir": str(tmp_path), "rollout_prometheus_url": url}
    try:
        bake = subprocess.Popen(["ansible-playbook", "-i", "inventory/lab-fleet", "playbooks/bake.yml", "-e",
                                 json.dumps(options)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        own.terminate()  # while the bake runs
        own.wait(timeout=60)
        out, _ = bake.communicate(timeout=300)
        assert bake.returncode == 0, out[-3000:]  # the unit itself is healthy: systemd and the journal say so
    finally:
        if own.poll() is None:
            own.kill()
    record = json.loads(next(tmp_path.glob("lab-gpu-1/bake-*/bake.json")).read_text())
    assert record["prometheus"]["url"] == url
    window = fleet_promotion.window_of(record)
    assert not window["ok"] and window["error"].startswith(f"Prometheus at {url} did not answer "), window
    judged = bake_metrics.judge(window, window, {})
    assert judged["verdict"] == "fail" and judged["reasons"][0].startswith(
        f"the window before the promotion cannot be read: Prometheus at {url} did not answer"), judged


CREDENTIALS = "http://ops:prom-pw-plant-3310@127.0.0.1:9391"  # a password in the URL


@pytest.mark.parametrize(("prometheus", "expected"), [
    ({"rollout_prometheus_url": PROMETHEUS, "rollout_prometheus_labels": {}},
     f"rollout_prometheus_url is {PROMETHEUS} but rollout_prometheus_labels is {{}}: name the labels that select "
     "this host's engine series"),
    ({"rollout_prometheus_url": CREDENTIALS, "rollout_prometheus_labels": {"host": "lab-gpu-1"}},
     "rollout_prometheus_url http://<redacted>@127.0.0.1:9391 holds credentials: give the controller "
     "SERVING_ROLLOUT_PROMETHEUS_TOKEN (a bearer token) or SERVING_ROLLOUT_PROMETHEUS_BASIC_AUTH (user:password) "
     "instead"),
], ids=["labels-missing", "credentials-in-the-url"])
def test_a_prometheus_the_bake_cannot_use_safely_is_refused_before_the_watch(fleet, tmp_path, prometheus, expected):
    """bake.yml told of a Prometheus but not which series are this host's, or with a password in its URL (it would
    reach the records and the console): refused at its first tasks, naming the value (the password never), before
    the unit is watched or any record written; the unit is as it was."""
    before = identity("lab-gpu-1")
    options = {"rollout_hosts": "lab-gpu-1", "rollout_bake_s": 6, "rollout_evidence_dir": str(tmp_path), **prometheus}
    baked = subprocess.run(["ansible-playbook", "-i", "inventory/lab-fleet", "playbooks/bake.yml", "-e",
                            json.dumps(options)], cwd=REPO, capture_output=True, text=True, timeout=300)
    text = re.sub(r"\s+", " ", baked.stdout)
    assert baked.returncode != 0
    assert expected in text, text[-3000:]
    assert "prom-pw-plant-3310" not in baked.stdout + baked.stderr
    assert "TASK [rollout : Bake the serving unit" not in baked.stdout and not list(tmp_path.glob("*/bake-*"))
    assert identity("lab-gpu-1") == before
