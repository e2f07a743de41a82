"""Every module of library/ run in-process through the one harness (tests/module_harness.py): it loads, builds its
AnsibleModule and refuses bad arguments - an option it does not take, or the required ones it lacks - naming them,
before it runs any command on the host."""

import json
import re
import sys

import pytest
import yaml
from conftest import FIXTURES
from module_harness import ANY, ScriptedCommands, modules, run_module

from serving_rollout.module_utils.engine_adapters import read_log


@pytest.mark.parametrize("name", modules())
def test_a_module_refuses_bad_arguments_by_name_before_any_command(name, monkeypatch, capsys):
    commands = ScriptedCommands()
    result = run_module(name, {"no_such_option": "x"}, monkeypatch, capsys, commands=commands)
    # AnsibleModule names the required arguments missing first ("missing required arguments: unit", "one of
    # the following is required: gate, runs"), else the option it does not take
    assert result["failed"] and re.search(r"missing required arguments: \w|is required: \w|no_such_option",
                                          result["msg"]), result
    assert commands.calls == [], commands.calls


def test_the_modules_are_found():
    assert {"serving_recipe", "gpu_free", "journal_scan", "p2p_check", "serving_snapshot"} <= set(modules())


# ---- journal_scan in-process on the real logs of the corpus, the journal answered as journalctl -o json prints ---

CORPUS = [e for e in yaml.safe_load((FIXTURES / "engine-logs" / "corpus.yml").read_text())
          if e["engine"] in ("sglang", "vllm") and "crashed" in e["truth"]]
BY_ID = {e["id"]: e for e in yaml.safe_load((FIXTURES / "engine-logs" / "corpus.yml").read_text())}


def journal_json(lines, start_us=1_700_000_000_000_000):
    """The lines as `journalctl -o json --all --output-fields=MESSAGE` prints them: one JSON entry a line."""
    return "\n".join(json.dumps({"__REALTIME_TIMESTAMP": str(start_us + i * 1000), "MESSAGE": line})
                     for i, line in enumerate(lines)) + "\n"


@pytest.mark.parametrize("entry", CORPUS, ids=[e["id"] for e in CORPUS])
def test_journal_scan_reads_a_real_log_from_the_journal_as_its_engine_wrote_it(entry, tmp_path, monkeypatch, capsys):
    secret = "sk-planted-0123456789abcdef"
    env = tmp_path / "engine.env"
    env.write_text(f"OPENAI_API_KEY={secret}\n")
    lines = [*entry["excerpt"].splitlines(), f"INFO using key {secret}"]
    commands = ScriptedCommands([(("systemctl", "show"), (0, "0b1d\n", "")),
                                 (("journalctl",), (0, journal_json(lines), ""))])
    context = entry.get("context") or {}
    # the original's own start, where the corpus gives one: its signatures are the known noise
    known = read_log(entry["engine"], BY_ID[context["baseline"]]["excerpt"])["signatures"] \
        if context.get("baseline") else []
    result = run_module("journal_scan", {"unit": "engine.service", "engine": entry["engine"], "env_files": [str(env)],
                                         "known_noise": known, "stop_requested": bool(context.get("stop_requested"))},
                        monkeypatch, capsys, commands=commands)
    scan = result["scan"]
    assert not result.get("failed") and result["changed"] is False, result
    assert commands.calls[1][-1] == "_SYSTEMD_INVOCATION_ID=0b1d", commands.calls  # this invocation's lines only
    truth = entry["truth"]
    assert scan["crashed"] == truth["crashed"], (entry["id"], scan["cause"], scan["errors"])
    for key, ours in (("phase", "phase"), ("ready_logged", "ready"), ("crash", "crash")):
        if key in truth:
            assert scan[ours] == truth[key], (entry["id"], key, scan[ours])
    assert secret not in json.dumps(result), entry["id"]  # an EnvironmentFile's value never leaves the host


# ---- serving_snapshot in-process on real files: check mode, the copy, idempotence, an edit refused ------------

def test_serving_snapshot_keeps_a_verified_copy_once_and_never_overwrites_it_for_an_edited_original(
        tmp_path, monkeypatch, capsys):
    unit, env = tmp_path / "sglang.service", tmp_path / "sglang.env"
    unit.write_text("[Service]\nEnvironmentFile=/etc/sglang.env\nExecStart=/usr/bin/python3 -m sglang.launch_server\n")
    env.write_text("HF_TOKEN=hf_planted_secret_value\n")
    args = {"unit": "sglang.service", "dest": str(tmp_path / "snapshot"), "state": {"ActiveState": "active"},
            "files": [{"path": str(unit), "kind": "unit"}, {"path": str(env), "kind": "EnvironmentFile"}]}
    checked = run_module("serving_snapshot", args, monkeypatch, capsys, check_mode=True)
    assert checked["changed"] and not (tmp_path / "snapshot").exists(), checked  # check mode writes nothing
    taken = run_module("serving_snapshot", args, monkeypatch, capsys)
    copies = [f["copy"] for f in taken["manifest"]["files"]]
    assert taken["changed"] and [open(c).read() for c in copies] == [unit.read_text(), env.read_text()], taken
    assert oct((tmp_path / "snapshot").stat().st_mode & 0o777) == "0o700"
    again = run_module("serving_snapshot", args, monkeypatch, capsys)
    assert again["changed"] is False, again  # idempotent: the same files, the same snapshot
    env.write_text("HF_TOKEN=hf_rotated_secret_value\n")
    refused = run_module("serving_snapshot", args, monkeypatch, capsys)
    assert refused["failed"] and "the original changed since its snapshot; nothing was overwritten" in refused["msg"]
    assert refused["both_versions"] == [f"{env}: variables changed: HF_TOKEN"], refused["both_versions"]
    assert open(copies[1]).read() == "HF_TOKEN=hf_planted_secret_value\n"  # the verified copy kept as it was
    assert "hf_rotated_secret_value" not in json.dumps(refused) and "hf_planted" not in json.dumps(refused)


# ---- gpu_free in-process with real processes (the process scan NVML's absence leaves here) ------------------

def test_gpu_free_ends_the_stopped_engines_straggler_and_never_touches_a_foreign_process(monkeypatch, capsys):
    import subprocess
    import uuid

    mark = f"gpu-worker-{uuid.uuid4().hex[:8]}"
    code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
            "time.sleep(120)  # " + mark)
    # the straggler ignores SIGTERM (SIGKILL after the grace ends it); each says when its handler is in place
    straggler = subprocess.Popen([sys.executable, "-c", code + " engine"], stdout=subprocess.PIPE, text=True)
    foreign = subprocess.Popen([sys.executable, "-c", code + " foreign"], stdout=subprocess.PIPE, text=True)
    try:
        assert [p.stdout.readline().strip() for p in (straggler, foreign)] == ["ready", "ready"]
        args = {"pattern": mark, "terminate": True, "engine_pattern": f"{mark} engine", "grace_s": 1,
                "require_free": True}
        result = run_module("gpu_free", args, monkeypatch, capsys)
        assert straggler.wait(10) == -9, result  # ended, by SIGKILL after the grace
        assert foreign.poll() is None, result  # the foreign process lives
        assert result["failed"] and f"not the engine's, so not touched: {foreign.pid}" in result["msg"], result
        assert [(p["pid"], p["ended_by"]) for p in result["terminated"]] == [(straggler.pid, "SIGKILL")], result
        assert result["source"] == "process-scan" and [p["pid"] for p in result["processes"]] == [foreign.pid]
    finally:
        for process in (straggler, foreign):
            process.kill()
            process.wait()


# ---- p2p_check in-process: refusals before any GPU work, its worker really started here (no GPU on this host) ---

def test_p2p_check_refuses_bad_arguments_and_a_host_without_gpus_before_any_gpu_work(monkeypatch, capsys):
    bad = run_module("p2p_check", {"gpus": [0, 0]}, monkeypatch, capsys)
    assert bad["failed"] and bad["msg"] == "gpus must be distinct non-negative indices, got [0, 0]", bad
    unpinned = run_module("p2p_check", {"runtime": "podman", "image": "lmsysorg/sglang:latest"}, monkeypatch, capsys)
    assert unpinned["failed"] and "image must be pinned by digest, got lmsysorg/sglang:latest" in unpinned["msg"]
    checked = run_module("p2p_check", {}, monkeypatch, capsys, check_mode=True)
    assert checked["p2p"] == {"verdict": "skipped", "reason": "check mode: nothing run"}, checked
    # the real preflight worker, started through host_commands on this GPU-less machine: refused, named
    refused = run_module("p2p_check", {"python": sys.executable, "budget_s": 60, "test_timeout_s": 60},
                         monkeypatch, capsys)
    assert refused["failed"] and refused["msg"].startswith("refused before any GPU work: "), refused


# ---- snapshot_read in-process: the restore recipe, or proof of an untouched host, systemd answered by a script ---

def test_snapshot_read_finds_the_recipe_or_proves_an_untouched_host_and_refuses_one_that_does_not_serve(
        tmp_path, monkeypatch, capsys):
    serving = "ActiveState=active\nUnitFileState=enabled\nLoadState=loaded\nNRestarts=0\nNeedDaemonReload=no\n"
    candidate_gone = "ActiveState=inactive\nUnitFileState=\nLoadState=not-found\nNRestarts=0\nNeedDaemonReload=no\n"
    commands = ScriptedCommands([(("systemctl", "show", "-p", ANY, "--", "sglang.service"),
                                  (0, serving, "")),
                                 (("systemctl", "show", "-p", ANY, "--", "sglang-candidate.service"),
                                  (0, candidate_gone, ""))])
    args = {"unit": "sglang.service", "candidate_unit": "sglang-candidate.service", "state_dir": str(tmp_path),
            "unit_dir": str(tmp_path / "units")}
    untouched = run_module("snapshot_read", args, monkeypatch, capsys, commands=commands)
    assert (untouched["found"], untouched["clean"], untouched["state"]["ActiveState"]) == (False, True, "active")
    (tmp_path / "sglang.service").mkdir()
    (tmp_path / "sglang.service" / "manifest.json").write_text(json.dumps({"files": [{"path": "/x", "sha256": "a"}]}))
    found = run_module("snapshot_read", args, monkeypatch, capsys, commands=commands)
    assert found["found"] and found["manifest"]["files"] == [{"path": "/x", "sha256": "a"}] and found["clean"]
    (tmp_path / "sglang.service" / "manifest.json").unlink()
    stopped = ScriptedCommands([(("systemctl",), (0, serving.replace("=active", "=failed"), ""))])
    refused = run_module("snapshot_read", args, monkeypatch, capsys, commands=stopped)
    assert refused["failed"] and "it is not serving: ActiveState=failed" in refused["msg"], refused
