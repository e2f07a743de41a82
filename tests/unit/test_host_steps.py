"""The step sequences of the candidate_start, original_stop and original_restore actions: which module runs when,
a refusal before anything runs, and what a failed step leaves in the result. The host's modules are a TEST DOUBLE
here (ScriptedHost answers each module with a scripted result and records the call); the lab's real systemd runs
the same actions in every rollout and rollback (tests/integration/test_rollout_faults.py, test_fleet.py)."""

import base64
import importlib.util
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from ansible.errors import AnsibleActionFail

REPO = Path(__file__).resolve().parents[2]


def action_class(name):
    spec = importlib.util.spec_from_file_location(f"action_{name}", REPO / "action_plugins" / f"{name}.py")
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    return plugin.ActionModule


def scripted(name, args, answers):
    """The action `name` with `args`, whose modules answer from `answers` ({module: result or [results]})."""
    calls = []

    class ScriptedHost(action_class(name)):  # TEST DOUBLE of the host's modules
        def _execute_module(self, module_name=None, module_args=None, task_vars=None, **_):
            calls.append((module_name, module_args))
            answer = answers.get(module_name, {})
            return dict(answer.pop(0) if isinstance(answer, list) else answer)

    task = SimpleNamespace(args=args, async_val=0, check_mode=False, action=name)
    connection = SimpleNamespace(_shell=SimpleNamespace(tmpdir="/tmp/double"))
    action = ScriptedHost(task, connection, None, None, None)
    return action, calls


STOP_ARGS = {"unit": "sglang.service", "candidate_unit": "sglang-candidate.service", "stop_timeout_s": 180,
             "gpu_free_timeout_s": 120, "engine": "sglang", "straggler_grace_s": 10}
RESTORE_ARGS = {**STOP_ARGS, "watchdog_unit": "serving-rollout-watchdog-sglang.service",
                "state_dir": "/var/lib/serving-rollout", "run_id": "R1", "base_url": "http://127.0.0.1:30000",
                "lock_path": "/var/lib/serving-rollout/sglang.service.lock", "lock_token": "tok", "lease_s": 900,
                "ready_timeout_s": 1200, "boot_stall_s": 300,
                "snapshot_files": [{"path": "/etc/systemd/system/sglang.service", "sha256": "ab"}]}


def test_a_missing_argument_is_refused_by_name_before_any_module_runs():
    action, calls = scripted("original_stop", {**STOP_ARGS, "runtime": "podman", "container": "sglang",
                                               "unit": ""}, {})
    with pytest.raises(AnsibleActionFail, match="^original_stop needs unit, key; got "):
        action.run(task_vars={})
    assert calls == []


def test_a_failed_gpu_wait_keeps_the_processes_it_ended_and_names_its_step():
    action, calls = scripted("original_stop", STOP_ARGS, {
        "engine_stop": {"changed": True, "stopped": True, "escalated": False, "how": "stopped"},
        "gpu_free": {"failed": True, "msg": "GPU 0 still held by pid 4242 (python3)", "summary": "ended 4242",
                     "terminated": [{"pid": 4242, "name": "sglang::scheduler"}]}})
    result = action.run(task_vars={"inventory_hostname": "h1"})
    assert [name for name, _ in calls] == ["engine_stop", "gpu_free"]
    assert result["failed"] and result["msg"] == ("wait until no worker holds the GPUs: "
                                                  "GPU 0 still held by pid 4242 (python3)")
    assert result["stop_attempted"] and result["gpu"]["terminated"] == [{"pid": 4242, "name": "sglang::scheduler"}]


def test_a_failed_container_reading_ends_before_the_original_is_stopped():
    action, calls = scripted("original_stop", {**STOP_ARGS, "runtime": "podman", "container": "sglang",
                                               "key": "k"}, {"container_reading": {"failed": True,
                                                                                  "msg": "no such container"}})
    result = action.run(task_vars={})
    assert [name for name, _ in calls] == ["container_reading"]
    assert result["failed"] and result["msg"] == "read the container sglang: no such container"
    assert result["stop_attempted"] is False  # the restore then expects no new invocation of the original


def systemd(candidate, original):
    return {"ansible.builtin.systemd_service": [{"status": candidate}, {"status": original}, {"changed": True}]}


def test_a_clean_host_is_put_back_without_a_restoring_phase_or_a_stop():
    action, calls = scripted("original_restore", RESTORE_ARGS, {
        **systemd({"LoadState": "not-found", "ActiveState": "inactive"}, {"ActiveState": "active", "NRestarts": "0"}),
        "serving_snapshot": {"manifest": {"files": RESTORE_ARGS["snapshot_files"]}},
        "rollout_phase": {"ansible_facts": {"rollout_progress": {"kind": "phase", "phase": "restored"}}}})
    result = action.run(task_vars={})
    assert [name for name, _ in calls] == ["ansible.builtin.systemd_service",
                                           "ansible.builtin.systemd_service", "serving_snapshot",
                                           "ansible.builtin.systemd_service", "engine_ready", "candidate_remove",
                                           "rollout_phase", "rollout_watchdog"]
    assert calls[-1][1]["state"] == "stopped"
    assert not result.get("failed") and result["candidate_present"] is False and result["gpu"] is None
    assert result["ansible_facts"]["rollout_progress"]["phase"] == "restored"


def test_a_running_candidate_is_stopped_and_the_gpus_freed_before_the_files_are_checked():
    action, calls = scripted("original_restore", {**RESTORE_ARGS, "runtime": "podman", "container": "sglang"}, {
        **systemd({"LoadState": "loaded", "ActiveState": "active"}, {"ActiveState": "inactive", "NRestarts": "0"}),
        "rollout_lock": {"held": True},
        "engine_stop": {"changed": True, "stopped": True, "escalated": True, "how": "SIGKILL at the deadline"},
        "ansible.builtin.command": {"rc": 0, "stdout": "sglang-candidate"},
        "gpu_free": {"summary": "", "terminated": []},
        "serving_snapshot": {"failed": True, "msg": "the original changed since its snapshot; nothing was overwritten",
                             "both_versions": ["--- snapshot\n+++ now\n+# edited"],
                             "changed_files": ["/etc/systemd/system/sglang.service: snapshot 3f9a now 77ab"]}})
    result = action.run(task_vars={})
    names = [name for name, _ in calls]
    # the duty stays covered while the restore runs: the lease renewed for it, the watchdog started for it
    assert names[:5] == ["ansible.builtin.systemd_service", "ansible.builtin.systemd_service", "rollout_lock",
                         "rollout_watchdog", "rollout_phase"] and calls[4][1]["phase"] == "restoring"
    assert calls[2][1]["lease_s"] == 180 + 120 + 10 + 1200 + 900 and calls[2][1]["token"] == "tok"
    assert calls[3][1].get("state", "started") == "started" and calls[3][1]["stop_timeout_s"] == 180
    assert names[5:] == ["engine_stop", "ansible.builtin.command", "gpu_free", "serving_snapshot",
                         "ansible.builtin.systemd_service", "engine_ready", "candidate_remove", "rollout_phase",
                         "rollout_watchdog"]  # recorded restored, the watchdog stopped: nothing stale left
    assert calls[12][1]["phase"] == "restored" and calls[13][1]["state"] == "stopped"
    assert calls[5][1]["unit"] == "sglang-candidate.service"
    assert calls[6][1]["argv"] == ["podman", "rm", "-f", "sglang-candidate"]
    # an original edited during the run: never overwritten, started as it is (the operator's edit wins, after a
    # daemon-reload), the candidate removed; then the failure names the edit and the next step
    assert calls[9][1] == {"name": "sglang.service", "state": "started", "daemon_reload": True}
    assert result["failed"] and result["msg"].startswith(
        "NOT restored exactly: sglang.service was edited during the run (/etc/systemd/system/sglang.service: "
        "snapshot 3f9a now 77ab)") and "playbooks/renew.yml" in result["msg"]
    assert result["both_versions"] == ["--- snapshot\n+++ now\n+# edited"]
    assert result["candidate_stop"] == {"stopped": True, "escalated": True, "how": "SIGKILL at the deadline"}


def candidate_left():
    return systemd({"LoadState": "loaded", "ActiveState": "active"}, {"ActiveState": "inactive", "NRestarts": "0"})


RESTORE_OK = {"engine_stop": {"changed": True, "stopped": True, "escalated": False, "how": "stopped"},
              "gpu_free": {"summary": "", "terminated": []},
              "serving_snapshot": {"manifest": {"files": RESTORE_ARGS["snapshot_files"]}}}


def test_a_full_state_folder_never_stops_the_restore():
    """ENOSPC on the lease and on every phase record: said, and the candidate is still stopped and the original
    started; without a renewed lease the watchdog is stopped, so it never acts beside the restore."""
    full = {"failed": True, "msg": "cannot renew the lease: No space left on device (0.0 MiB free)"}
    action, calls = scripted("original_restore", RESTORE_ARGS, {
        **candidate_left(), **RESTORE_OK, "rollout_lock": full,
        "rollout_phase": {"failed": True, "msg": "Failed to replace state.json: No space left on device"}})
    result = action.run(task_vars={})
    names = [name for name, _ in calls]
    assert not result.get("failed"), result
    assert names[2:5] == ["rollout_lock", "rollout_watchdog", "rollout_phase"]
    assert calls[3][1]["state"] == "stopped"
    assert names[5:] == ["engine_stop", "gpu_free", "serving_snapshot", "ansible.builtin.systemd_service",
                         "engine_ready", "candidate_remove", "rollout_phase", "ansible.builtin.file",
                         "rollout_watchdog"]
    # 'restored' not written: the state file goes rather than keep a stale earlier phase
    assert calls[-2][1] == {"path": "/var/lib/serving-rollout/sglang.service/state.json", "state": "absent"}


def test_a_lock_taken_over_meanwhile_puts_nothing_back():
    action, calls = scripted("original_restore", RESTORE_ARGS, {
        **candidate_left(), **RESTORE_OK, "rollout_lock": {"held": False, "lock": {"run_id": "other"}}})
    result = action.run(task_vars={})
    assert [name for name, _ in calls][2:] == ["rollout_lock"]
    assert result["failed"] and "is no longer this run's" in result["msg"] and "'run_id': 'other'" in result["msg"]


def test_the_candidate_start_keeps_only_the_identity_and_compares_a_container():
    args = {"candidate_unit": "sglang-candidate.service", "base_url": "http://127.0.0.1:30000",
            "ready_timeout_s": 1200, "engine": "sglang", "boot_stall_s": 300, "lock_path": "/l", "lock_token": "t",
            "lease_s": 300, "runtime": "podman", "container": "sglang", "original_container": {"env": {}},
            "change": {"kind": "env", "name": "NCCL_P2P_DISABLE"}}
    status = {"MainPID": "77", "InvocationID": "abc", "NRestarts": "0", "Environment": "HF_TOKEN=secret"}
    action, calls = scripted("candidate_start", args, {
        "ansible.builtin.systemd_service": [{"changed": True}, {"status": status}]})
    result = action.run(task_vars={})
    assert [name for name, _ in calls] == ["ansible.builtin.systemd_service", "engine_ready", "rollout_lock",
                                           "ansible.builtin.systemd_service", "container_reading"]
    assert result["identity"] == {"MainPID": "77", "InvocationID": "abc", "NRestarts": "0"}
    assert "secret" not in str(result) and result["container_compared"] is True
    assert calls[4][1]["name"] == "sglang-candidate" and calls[4][1]["compare_with"] == {"env": {}}


# ---- candidate_gates: every gate runs, the first failure is named, not-qualified gates never run -------------

GATE_ARGS = {"base_url": "http://127.0.0.1:30000", "gates": ["smoke", "json", "needle"], "model": "default",
             "timeout_s": 120, "env_files": ["/etc/sglang/sglang.env"], "api_key_var": "SGLANG_API_KEY"}


def gate_record(gate, phase, verdict="pass", reason="ok", content="Paris"):
    return {"gate": gate, "phase": phase, "verdict": verdict, "reason": reason, "observed": {"content": content}}


def gate_records(*records):
    """engine_gate's answer to runs: one module run, the records in order."""
    return {"record": None, "records": list(records)}


def test_every_candidate_gate_runs_after_one_fails_and_the_first_failure_is_named():
    action, calls = scripted("candidate_gates", {**GATE_ARGS, "router_url": "http://127.0.0.1:8080"}, {
        "engine_gate": gate_records(gate_record("smoke", "candidate"),
                                    gate_record("json", "candidate", "fail", "HTTP 500", None),
                                    gate_record("needle", "candidate", "fail", "needle not recalled", "no idea"),
                                    gate_record("smoke", "candidate-routed"), gate_record("json", "candidate-routed"))})
    result = action.run(task_vars={"inventory_hostname": "h1"})
    # one module run: the candidate's gates, then smoke and JSON through the router
    assert len(calls) == 1 and (calls[0][1]["base_url"], calls[0][1]["phase"]) == ("http://127.0.0.1:30000",
                                                                                   "candidate")
    assert calls[0][1]["runs"] == [{"gate": "smoke"}, {"gate": "json"}, {"gate": "needle"},
                                   {"gate": "smoke", "base_url": "http://127.0.0.1:8080", "phase": "candidate-routed"},
                                   {"gate": "json", "base_url": "http://127.0.0.1:8080", "phase": "candidate-routed"}]
    assert result["failed"] and result["msg"] == "gate json failed (candidate): HTTP 500; observed None"
    assert [(r["gate"], r["verdict"]) for r in result["records"]] == [
        ("smoke", "pass"), ("json", "fail"), ("needle", "fail"), ("smoke", "pass"), ("json", "pass")]
    assert all(args["api_key_var"] == "SGLANG_API_KEY" and "api_key" not in args for _, args in calls)


def test_a_candidate_that_crashed_during_its_gates_is_named_the_cause_not_the_refused_connection():
    identity = {"MainPID": "77", "InvocationID": "inv1", "NRestarts": "0"}
    args = {**GATE_ARGS, "candidate_unit": "sglang-candidate.service", "candidate_identity": identity}
    refused = "[Errno 111] Connection refused"
    action, calls = scripted("candidate_gates", args, {
        "engine_gate": gate_records(gate_record("smoke", "candidate"),
                                    gate_record("json", "candidate", "fail", refused, None),
                                    gate_record("needle", "candidate", "fail", refused, None)),
        "ansible.builtin.systemd_service": {"status": {"ActiveState": "failed", "MainPID": "0",
                                                       "InvocationID": "inv1", "NRestarts": "0"}}})
    result = action.run(task_vars={})
    assert result["failed"] and result["msg"].startswith("the candidate engine exited during the gates: ActiveState "
                                                         "failed, MainPID 77 -> 0")
    assert result["msg"].endswith(f"(first failed gate: gate json failed (candidate): {refused}; observed None)")
    assert calls[-1] == ("ansible.builtin.systemd_service", {"name": "sglang-candidate.service"})
    # a gate that fails against the same living engine is the gate's own failure
    action, _ = scripted("candidate_gates", args, {
        "engine_gate": gate_records(gate_record("smoke", "candidate"),
                                    gate_record("json", "candidate", "fail", "HTTP 500", None),
                                    gate_record("needle", "candidate")),
        "ansible.builtin.systemd_service": {"status": {"ActiveState": "active", **identity}}})
    assert action.run(task_vars={})["msg"] == "gate json failed (candidate): HTTP 500; observed None"


def test_a_not_qualified_gate_is_a_record_and_never_runs():
    action, calls = scripted("candidate_gates", {**GATE_ARGS, "not_qualified": {"needle": "random weights"}},
                             {"engine_gate": gate_records(gate_record("smoke", "candidate"),
                                                          gate_record("json", "candidate"))})
    result = action.run(task_vars={})
    assert not result.get("failed"), result
    assert [run["gate"] for run in calls[0][1]["runs"]] == ["smoke", "json"] and len(calls) == 1
    assert result["records"][-1] == {"gate": "needle", "phase": "candidate", "verdict": "not-qualified",
                                     "reason": "not qualified: random weights", "inputs": {}, "observed": {},
                                     "expected": None}


def test_a_not_qualified_gate_without_a_reason_is_refused_before_any_gate_runs():
    action, calls = scripted("candidate_gates", {**GATE_ARGS, "not_qualified": {"needle": " "}}, {})
    result = action.run(task_vars={})
    assert result["failed"] and "not_qualified must map each gate to the reason" in result["msg"]
    assert "'needle': ' '" in result["msg"] and calls == []


# ---- snapshot_renew: refused while a candidate is loaded or running, before anything is written --------------

RENEW_ARGS = {"unit": "sglang.service", "candidate_unit": "sglang-candidate.service",
              "dest": "/var/lib/serving-rollout/sglang.service"}


def test_renew_is_refused_while_a_candidate_is_loaded_and_writes_nothing():
    action, calls = scripted("snapshot_renew", RENEW_ARGS, {"ansible.builtin.systemd_service": {
        "status": {"LoadState": "loaded", "ActiveState": "active"}}})
    result = action.run(task_vars={})
    assert result["failed"] and result["msg"] == (
        "sglang-candidate.service is loaded/active: run rollback.yml first, then renew")
    assert [name for name, _ in calls] == ["ansible.builtin.systemd_service"] and not result["changed"]


def test_renew_adopts_the_current_original_and_returns_both_versions():
    files = [{"path": "/etc/systemd/system/sglang.service", "kind": "unit"}]
    action, calls = scripted("snapshot_renew", RENEW_ARGS, {
        "ansible.builtin.systemd_service": {"status": {"LoadState": "not-found", "ActiveState": "inactive"}},
        "serving_recipe": {"files": files, "unit": {"UnitFileState": "enabled", "ActiveState": "active"}},
        "serving_snapshot": {"changed": True, "manifest": {"files": files, "taken_at": "2026-12-04T17:00:00Z"},
                             "both_versions": ["/etc/sglang/sglang.env: variables changed: SGLANG_API_KEY"]}})
    result = action.run(task_vars={})
    assert not result.get("failed") and result["changed"], result
    assert calls[-1] == ("serving_snapshot", {"unit": "sglang.service", "files": files, "replace": True,
                                             "state": {"UnitFileState": "enabled", "ActiveState": "active"},
                                             "dest": "/var/lib/serving-rollout/sglang.service"})
    assert result["both_versions"] == ["/etc/sglang/sglang.env: variables changed: SGLANG_API_KEY"]


NOT_A_CANDIDATE = {"status": {"LoadState": "not-found", "ActiveState": "inactive"}}
PROMOTED = {"content": base64.b64encode(b'{"run_id": "20261207T071336Z", "unit": "sglang.service"}').decode()}


def test_renew_over_a_promotion_in_place_is_refused_before_anything_is_written_naming_the_run():
    action, calls = scripted("snapshot_renew", RENEW_ARGS, {
        "ansible.builtin.systemd_service": NOT_A_CANDIDATE,
        "serving_recipe": {"files": [], "unit": {}},
        "ansible.builtin.stat": {"stat": {"exists": True}}, "ansible.builtin.slurp": PROMOTED})
    result = action.run(task_vars={})
    assert result["failed"] and result["msg"].startswith(
        "refused before any change: run 20261207T071336Z is promoted on this host "
        "(/var/lib/serving-rollout/sglang.service/promoted.json)"), result
    assert "rollback.yml" in result["msg"] and "-e rollout_renew_over_promotion=true" in result["msg"]
    assert [name for name, _ in calls if name not in ("ansible.builtin.stat", "ansible.builtin.slurp",
                                                      "ansible.builtin.systemd_service", "serving_recipe")] == []


def test_an_unreadable_promotion_record_still_refuses_renew_by_name():
    action, calls = scripted("snapshot_renew", RENEW_ARGS, {
        "ansible.builtin.systemd_service": NOT_A_CANDIDATE, "serving_recipe": {"files": [], "unit": {}},
        "ansible.builtin.stat": {"stat": {"exists": True}},
        "ansible.builtin.slurp": {"content": base64.b64encode(b"{half a record").decode()}})
    result = action.run(task_vars={})
    assert result["failed"] and result["msg"].startswith("refused before any change: run unreadable is promoted on "
                                                         "this host"), result
    assert "serving_snapshot" not in [name for name, _ in calls]


def test_renew_told_to_go_over_a_promotion_keeps_the_pre_promotion_snapshot_checked_then_replaces_it():
    keep = "/var/lib/serving-rollout/sglang.service.pre-promotion-20261207T071336Z"
    action, calls = scripted("snapshot_renew", {**RENEW_ARGS, "over_promotion": True}, {
        "ansible.builtin.systemd_service": NOT_A_CANDIDATE,
        "serving_recipe": {"files": [], "unit": {}},
        "ansible.builtin.stat": [{"stat": {"exists": True}}, {"stat": {"exists": True, "checksum": "ab"}},
                                 {"stat": {"exists": True, "checksum": "ab"}}],
        "ansible.builtin.slurp": PROMOTED, "ansible.builtin.copy": {"changed": True},
        "ansible.builtin.file": {"changed": True},
        "serving_snapshot": {"changed": True, "manifest": {"files": []}, "both_versions": ["unit: diff"]}})
    result = action.run(task_vars={})
    assert not result.get("failed") and result["kept_pre_promotion"] == keep, result
    order = [name for name, _ in calls]
    assert order.index("ansible.builtin.copy") < order.index("ansible.builtin.file") < order.index("serving_snapshot")
    assert dict(calls)["ansible.builtin.copy"]["dest"] == keep + "/"


def test_renew_over_a_promotion_whose_copy_does_not_match_adopts_nothing():
    action, calls = scripted("snapshot_renew", {**RENEW_ARGS, "over_promotion": True}, {
        "ansible.builtin.systemd_service": NOT_A_CANDIDATE,
        "serving_recipe": {"files": [], "unit": {}},
        "ansible.builtin.stat": [{"stat": {"exists": True}}, {"stat": {"exists": True, "checksum": "ab"}},
                                 {"stat": {"exists": False}}],
        "ansible.builtin.slurp": PROMOTED, "ansible.builtin.copy": {"changed": True}})
    result = action.run(task_vars={})
    assert result["failed"] and "does not match it" in result["msg"] and "nothing was adopted" in result["msg"]
    assert "serving_snapshot" not in [name for name, _ in calls] and "ansible.builtin.file" not in dict(calls)


def test_a_refused_snapshot_names_its_step():
    action, _ = scripted("snapshot_renew", RENEW_ARGS, {
        "ansible.builtin.systemd_service": {"status": {"LoadState": "not-found", "ActiveState": "inactive"}},
        "serving_recipe": {"failed": True,
                           "msg": "serving unit 'sglang.service' not found on this host (no FragmentPath)"}})
    result = action.run(task_vars={})
    assert result["failed"] and result["msg"] == (
        "read the current sglang.service: serving unit 'sglang.service' not found on this host (no FragmentPath)")


# ---- latency_arm's endurance cell: judged with the candidate's journal read after it ---------------------------

ENDURANCE_ARGS = {"arm": "candidate", "cell": {"name": "endurance", "prompt_tokens": 256}, "requests": 4, "chunk": 2,
                  "bracket": 2, "sequential": False, "duration_s": 1e-6, "lock_path": "/run/l", "lock_token": "t",
                  "candidate_unit": "sglang-candidate.service", "base_url": "http://127.0.0.1:30000",
                  "timeout_s": 5, "engine": "sglang", "drift_limit": 0.1,
                  "candidate_identity": {"MainPID": "41", "InvocationID": "abc", "NRestarts": "0"}}


def endurance_chunk(first=0):
    return {"name": "endurance", "arm": "candidate", "failures": 0, "elapsed_s": 0.2, "requests": [
        {"index": i, "e2e_s": 0.1, "ttft_s": 0.02, "prompt_tokens": 256, "error": None}
        for i in range(first, first + 2)]}


def test_an_endurance_cell_fails_on_a_crash_its_journal_shows_and_keeps_its_verdict():
    # the host ran the cell's chunks one after another in one module run (its slice of the cell's time)
    action, calls = scripted("latency_arm", ENDURANCE_ARGS, {
        "latency_cell": [{"cell": None, "chunks": [endurance_chunk(0), endurance_chunk(2), endurance_chunk(4)]}],
        "journal_scan": {"scan": {"crashed": True, "cause": "CUDA error: an illegal memory access", "errors": []}}})
    result = action.run(task_vars={"inventory_hostname": "h1"})
    assert result["failed"] and result["msg"] == "endurance: CUDA error: an illegal memory access", result
    assert result["verdict"]["ok"] and result["verdict"]["requests"] == 6 and result["scan"]["crashed"]
    assert result["verdict"]["drift"] == 0.0, result["verdict"]  # three chunks: the first third against the last
    assert [name for name, _ in calls] == ["latency_cell", "journal_scan"]
    assert calls[0][1]["first_index"] == 0 and calls[0][1]["requests"] == 2 and 0 < calls[0][1]["for_s"] <= 10
    assert calls[-1] == ("journal_scan", {"unit": "sglang-candidate.service", "engine": "sglang", "known_noise": [],
                                          "extra_error_patterns": [], "env_files": []})


# ---- latency_arm: the lease covers a chunk's worst case; a stalled candidate is named a hang -----------------

def test_a_stalled_candidate_is_named_a_hang_after_one_chunk_its_lease_renewed_while_the_chunk_ran():
    timed_out = {"error": "TimeoutError: timed out", "e2e_s": None, "ttft_s": None}
    chunk = {"name": "1k", "arm": "candidate", "requests": [dict(timed_out, index=i) for i in range(2)],
             "failures": 2, "contract_violations": [], "elapsed_s": 60.0}
    args = {"arm": "candidate", "cell": {"name": "1k", "prompt_tokens": 1000}, "requests": 12, "chunk": 2,
            "bracket": 4, "sequential": False, "base_url": "http://127.0.0.1:30000", "timeout_s": 30,
            "remeasure_max": 0, "lock_path": "/l", "lock_token": "tok", "lease_s": 15,
            "candidate_unit": "sglang-candidate.service",
            "candidate_identity": {"MainPID": "7", "NRestarts": "0", "InvocationID": "i1"}}
    action, calls = scripted("latency_arm", args, {"latency_cell": {"cell": chunk}})
    result = action.run(task_vars={"inventory_hostname": "h1"})
    assert result["failed"] and result["msg"] == ("cell 1k candidate, requests 1..: the engine stalled (a hang): all "
                                                  "2 requests of the last chunk timed out after 30 s each")
    # one round trip per chunk: the host checks the lock and the candidate's identity, renews the lease before
    # and while the chunk runs, as long as the lock is this run's, and asks again after it
    assert [name for name, _ in calls] == ["latency_cell"]
    assert {k: calls[0][1][k] for k in ("lock_path", "lock_token", "lease_s", "candidate_unit", "check_after")} == {
        "lock_path": "/l", "lock_token": "tok", "lease_s": 15, "candidate_unit": "sglang-candidate.service",
        "check_after": True}
    assert calls[0][1]["candidate_identity"] == args["candidate_identity"]


def test_a_chunk_the_host_refuses_stops_the_arm_with_its_reason_and_a_crash_after_the_last_chunk_too():
    lost = "the lock was taken over by root@c pid 9 (run r2); this run stops measuring"
    args = {"arm": "baseline-1", "cell": {"name": "1k", "prompt_tokens": 1000}, "requests": 4, "chunk": 2,
            "bracket": 4, "sequential": True, "base_url": "http://127.0.0.1:30000", "timeout_s": 30,
            "lock_path": "/l", "lock_token": "tok"}
    action, calls = scripted("latency_arm", args, {"latency_cell": {"cell": None, "stopped": lost}})
    with pytest.raises(AnsibleActionFail, match=re.escape(lost)):
        action.run(task_vars={"inventory_hostname": "h1"})
    # the first chunk was refused on the host: no second one, no check of a candidate in a baseline arm
    assert len(calls) == 1 and {k: v for k, v in calls[0][1].items() if k.startswith(("lock", "lease", "candidate"))} \
        == {"lock_path": "/l", "lock_token": "tok"}
    crashed = "the candidate engine exited during the last cell: ActiveState failed, MainPID 7 -> 0"
    chunk = endurance_chunk() | {"name": "1k", "contract_violations": []}
    action, calls = scripted("latency_arm", dict(args, arm="candidate", sequential=False, requests=2, lease_s=15,
                                                 candidate_unit="c.service", candidate_identity={"MainPID": "7"}),
                             {"latency_cell": {"cell": chunk | {"arm": "candidate"}, "stopped_after": crashed}})
    with pytest.raises(AnsibleActionFail, match=re.escape(crashed)):
        action.run(task_vars={"inventory_hostname": "h1"})
    assert len(calls) == 1 and calls[0][1]["check_after"] is True


def test_the_engine_connection_is_one_value_an_argument_given_on_its_own_wins():
    from serving_rollout.module_utils.engine_client import connected

    connection = {"base_url": "http://127.0.0.1:30000", "model": "tiny", "api_key_var": "",
                  "env_files": ["/etc/sglang/sglang.env"]}
    assert connected({"connection": connection}) == {
        "connection": connection, "base_url": "http://127.0.0.1:30000", "model": "tiny", "api_key_var": None,
        "env_files": ["/etc/sglang/sglang.env"]}
    assert connected({"connection": connection, "base_url": "http://127.0.0.1:8080"})["base_url"] == \
        "http://127.0.0.1:8080"
    assert connected({})["model"] == "default"  # as the modules' own default
    gates = {k: v for k, v in GATE_ARGS.items() if k not in ("base_url", "model", "env_files", "api_key_var")}
    action, calls = scripted("candidate_gates", {**gates, "connection": {**connection, "api_key_var": "KEY"}},
                             {"engine_gate": gate_records(gate_record("smoke", "candidate"),
                                                          gate_record("json", "candidate"),
                                                          gate_record("needle", "candidate"))})
    assert not action.run(task_vars={"inventory_hostname": "h1"}).get("failed")
    assert [(a["base_url"], a["model"], a["api_key_var"], a["env_files"]) for _, a in calls] == \
        [("http://127.0.0.1:30000", "tiny", "KEY", ["/etc/sglang/sglang.env"])]


def test_the_endurance_cell_runs_in_slices_until_its_time_and_is_judged_with_the_journal_read_after_it():
    def chunk(index):
        return {"name": "endurance", "arm": "candidate", "failures": 0, "contract_violations": [], "elapsed_s": 10.0,
                "requests": [{"index": 2 * index + i, "e2e_s": 0.1, "ttft_s": 0.02, "error": None} for i in range(2)]}

    args = {"arm": "candidate", "cell": {"name": "endurance", "prompt_tokens": 100, "concurrency": 2,
                                         "requests": 4}, "requests": 4, "chunk": 2, "bracket": 2,
            "sequential": False, "duration_s": 25, "base_url": "http://127.0.0.1:30000", "timeout_s": 30,
            "lock_path": "/l", "lock_token": "tok", "lease_s": 15, "candidate_unit": "sglang-candidate.service",
            "candidate_identity": {"MainPID": "7"}, "engine": "sglang", "drift_limit": 0.1}
    slices = [[chunk(0), chunk(1)], [chunk(2), chunk(3)], [chunk(4)]]
    action, calls = scripted("latency_arm", args, {
        "latency_cell": [{"chunks": c, "cell": c[-1]} for c in slices],
        "journal_scan": {"scan": {"crashed": False, "errors": [], "warnings": ["NCCL WARN Cuda failure"]}}})
    # the action's clock, a TEST DOUBLE: each slice takes the time it was given on the host (for_s)
    now = [1000.0]
    action.step.__globals__["time"] = SimpleNamespace(monotonic=lambda: now[0])
    scripted_module = action._execute_module

    def slice_takes_its_time(module_name=None, module_args=None, task_vars=None, **kwargs):
        now[0] += (module_args or {}).get("for_s") or 0
        return scripted_module(module_name=module_name, module_args=module_args, task_vars=task_vars, **kwargs)

    action._execute_module = slice_takes_its_time
    result = action.run(task_vars={"inventory_hostname": "h1"})
    # 25 s in slices of at most 10 s (10, 10, 5), no warm-up, then the journal: a warning new under load fails it
    assert [name for name, _ in calls] == ["latency_cell"] * 3 + ["journal_scan"], calls
    assert [c[1]["for_s"] for c in calls[:3]] == [10.0, 10.0, 5.0] and {c[1]["warmup"] for c in calls[:3]} == {0}
    assert [c[1]["first_index"] for c in calls[:3]] == [0, 4, 8], calls
    assert len(result["cell"]["requests"]) == 10 and result["verdict"]["ok"], result
    assert result["failed"] and result["msg"] == "endurance: error lines new against the original: NCCL WARN Cuda " \
                                                 "failure", result
