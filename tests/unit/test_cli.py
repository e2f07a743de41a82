"""bin/serving-rollout: extra vars, progress lines from runner events, exit codes, usage errors."""

import json
import tempfile
from pathlib import Path

import pytest

from serving_rollout import cli


def test_extra_vars_in_three_forms(tmp_path):
    file = tmp_path / "vars.yml"
    file.write_text("rollout_cell_requests: 4\n")
    assert cli.parse_extra_vars(["a=1 b=2", '{"c": [1]}', f"@{file}"]) == \
        {"a": "1", "b": "2", "c": [1], "rollout_cell_requests": 4}
    with pytest.raises(ValueError, match="'@/nope.yml'|/nope.yml"):
        cli.parse_extra_vars(["@/nope.yml"])
    with pytest.raises(ValueError, match="'{bad' are not valid JSON"):
        cli.parse_extra_vars(["{bad"])


def event(kind, task="", **data):
    return {"event": kind, "event_data": {"host": "h1", "task": task, **data}}


def progress(task, **fact):
    return event("runner_on_ok", task, res={"ansible_facts": {cli.PROGRESS_FACTS[0]: fact}})


def test_progress_lines_from_the_plays_progress_fact_whatever_the_task_is_called():
    record = {"outcome": "failed, restored", "verdict": None, "duration_s": 31.5}
    assert cli.progress_line(progress("any name at all", kind="phase", phase="candidate-running")) == \
        "h1: phase candidate-running"
    assert cli.progress_line(progress("renamed", kind="cell", cell="4k", arm="baseline-2", requests="4",
                                      failures="0")) == "h1: cell 4k (baseline-2) measured"
    assert cli.progress_line(progress("x", kind="cell", cell="1k", arm="candidate", requests="8", failures="5")) == \
        "h1: cell 1k (candidate) measured, 5 failed"
    # The arm's cells are one looped task: each item reports its cell.
    item = dict(progress("Measure the cells one by one, arm candidate", kind="cell", cell="4k", arm="candidate",
                         requests=12, failures=0), event="runner_item_on_ok")
    assert cli.progress_line(item) == "h1: cell 4k (candidate) measured"
    assert cli.progress_line(progress("y", kind="outcome", **record)) == "h1: failed, restored (31.5 s)"
    assert cli.progress_line(progress("z", kind="rollback", message="ROLLBACK: sglang.service restored")) == \
        "h1: ROLLBACK: sglang.service restored"
    failed = event("runner_on_failed", "Run the gate json", role="rollout", res={"msg": "gate json failed"})
    assert cli.progress_line(failed) == "h1: FAILED at 'Run the gate json': gate json failed"
    # a task named like an old progress task says nothing without the fact: names are not data
    assert cli.progress_line(event("runner_on_ok", "Record the phase on the host (candidate-running)")) is None
    assert cli.progress_line(event("runner_on_ok", "Read the unit's state")) is None  # the raw stream stays out


def test_every_progress_kind_the_plays_emit_has_a_line():
    """Each set_fact of the progress fact in a role or playbook is a kind the CLI renders."""
    import re

    import yaml
    from conftest import REPO

    kinds = set()
    for path in list((REPO / "roles").rglob("tasks/*.yml")) + list((REPO / "playbooks").glob("*.yml")):
        def walk(node):
            if isinstance(node, dict):
                fact = (node.get("ansible.builtin.set_fact") or {}) if isinstance(node.get("ansible.builtin.set_fact"),
                                                                                   dict) else {}
                for value in (fact.get(name) for name in cli.PROGRESS_FACTS):
                    if isinstance(value, dict):
                        kinds.add(value["kind"])
                    elif isinstance(value, str):
                        kinds.update(re.findall(r"'kind': '([a-z-]+)'", value))
                for child in node.values():
                    walk(child)
            elif isinstance(node, list):
                for child in node:
                    walk(child)
        walk(yaml.safe_load(path.read_text()))
    # actions and modules that report (latency_arm: each cell; rollout_phase: each phase)
    for path in list((REPO / "action_plugins").glob("*.py")) + list((REPO / "library").glob("*.py")):
        kinds.update(re.findall(r'"rollout_progress": \{\s*"kind": "([a-z-]+)"', path.read_text()))
    assert {"phase", "cell", "outcome", "not-started", "rollback"} <= kinds
    for kind in kinds:
        assert cli.progress_text({"kind": kind, "message": "m", "phase": "p"}) is not None, kind


@pytest.mark.parametrize("outcomes, code", [
    (["acceptable", "acceptable"], 0),
    (["acceptable", "not acceptable", "not-started"], 1),
    (["acceptable", "failed, restored", "not-started"], 2),
    (["refused", "not-started"], 3),
    (["failed, restored", "failed, NOT restored"], 4),
    (["started"], 4),  # never finished: killed or unreachable
    (["not-started"], 4),
])
def test_exit_codes_distinguish_outcomes(outcomes, code):
    assert cli.exit_code("run", 2, [{"host": f"h{i}", "outcome": o} for i, o in enumerate(outcomes)]) == code
    assert code in cli.MEANING


def test_rollback_exit_code_from_runner_stats():
    stats = {"ok": {"h1": 3, "h2": 3}, "failures": {"h2": 1}, "dark": {}}
    hosts = cli.host_outcomes("rollback", "/nowhere", "R", stats)
    assert hosts == [{"host": "h1", "outcome": "ok"}, {"host": "h2", "outcome": "failed"}]
    assert cli.exit_code("rollback", 2, hosts) == 4
    assert cli.exit_code("rollback", 0, [{"host": "h1", "outcome": "ok"}]) == 0


def test_usage_errors_name_the_bad_value(capsys, tmp_path):
    assert cli.main(["run", "candidate-p2p", "-i", str(tmp_path / "nope")]) == cli.EXIT_USAGE
    assert "inventory" in capsys.readouterr().err
    assert cli.main(["run", "candidate-p2p", "-i", str(tmp_path), "--canary", "0"]) == cli.EXIT_USAGE
    assert "got 0 and 1" in capsys.readouterr().err
    assert cli.main(["run", "nonsense", "-i", str(tmp_path)]) == cli.EXIT_USAGE


def test_status_is_a_table_by_default_and_json_when_asked(capsys, tmp_path):
    assert cli.main(["status", "--evidence", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == "no runs recorded yet"
    (tmp_path / "index.json").write_text(json.dumps({"runs": [
        {"candidate_id": "p2p", "host": "gpu-1", "path": "gpu-1/rollout-R1", "run_id": "R1", "verdict": "reject"},
        {"candidate_id": "cumem", "host": "gpu-1", "path": "gpu-1/rollout-R2", "run_id": "R2",
         "verdict": "acceptable"}],
        "fleets": [{"hosts": {"gpu-1": "acceptable", "gpu-2": "not-started"}, "run_id": "R2", "stopped_at": None}]}))
    assert cli.main(["status", "--evidence", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["host", "run", "candidate", "outcome", "evidence"]
    assert lines[1].split() == ["gpu-1", "R2", "cumem", "acceptable", "gpu-1/rollout-R2"]  # the latest per host
    assert lines[2] == "fleet R2: gpu-1 acceptable, gpu-2 not-started"
    assert cli.main(["status", "--evidence", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["latest_per_host"]["gpu-1"]["run_id"] == "R2"


def test_promote_needs_the_humans_approval_and_every_new_command_its_inventory(capsys, tmp_path):
    assert cli.main(["promote", "R1", "-i", str(tmp_path)]) == cli.EXIT_USAGE
    assert "promote R1 needs --approve" in capsys.readouterr().err
    for command in ("propose", "render", "renew"):
        assert cli.main([command, "-i", str(tmp_path / "nope")]) == cli.EXIT_USAGE
        assert f"inventory {str(tmp_path / 'nope')!r} does not exist" in capsys.readouterr().err
    assert cli.main(["promote", "-i", str(tmp_path)]) == cli.EXIT_USAGE  # no RUN_ID


def test_render_asks_ansible_for_check_and_diff_and_promote_passes_the_approval(monkeypatch, tmp_path):
    """What each new command hands the playbook (the runner itself is replaced: these read only the call)."""
    calls = []

    def fake_run(kind, playbook, inventory, extravars, evidence, quiet=False, listen=None, cmdline=None):
        calls.append((kind, playbook, dict(extravars), cmdline))
        return {"exit_code": 0, "meaning": cli.MEANING[0], "hosts": [], "artifacts": str(tmp_path),
                "interrupted": False}

    monkeypatch.setattr(cli, "run_playbook", fake_run)
    assert cli.main(["render", "-i", str(tmp_path), "-e", "serving_recipe_candidate_id=cumem"]) == 0
    assert cli.main(["promote", "R7", "--approve", "-i", str(tmp_path)]) == 0
    assert cli.main(["renew", "-i", str(tmp_path)]) == 0
    assert calls == [("render", "candidate-render.yml", {"serving_recipe_candidate_id": "cumem"}, "--check --diff"),
                     ("promote", "promote.yml", {"promotion_run_id": "R7", "promotion_approved_run_id": "R7"}, None),
                     ("renew", "renew.yml", {}, None)]


def test_a_path_escaping_or_reused_run_id_is_refused_before_anything_is_written(capsys, tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(cli, "run_playbook", lambda *a, **k: ran.append(a))
    evidence, inventory = tmp_path / "evidence", tmp_path / "inventory"
    evidence.mkdir()
    inventory.mkdir()
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    for bad in ("../../../../x", "a/b", ".hidden", "x" * 81):
        assert cli.main(["run", "candidate-p2p", "-i", str(inventory), "--evidence", str(evidence),
                         "-e", f"run_id={bad}"]) == cli.EXIT_USAGE
        assert f"run id {bad!r} refused before anything was written" in capsys.readouterr().err
    assert cli.main(["promote", "../x", "--approve", "-i", str(inventory), "--evidence", str(evidence)]) \
        == cli.EXIT_USAGE
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before and ran == []
    (evidence / "lab-gpu-1" / "rollout-R1").mkdir(parents=True)
    assert cli.main(["run", "candidate-p2p", "-i", str(inventory), "--evidence", str(evidence),
                     "-e", "run_id=R1"]) == cli.EXIT_USAGE
    assert "run id 'R1' is taken: " in capsys.readouterr().err and ran == []


def test_a_refusal_before_any_change_is_exit_3_with_the_hosts_reason_and_a_success_says_what_was_done():
    stats = {"ok": {"h1": 3, "h2": 2}, "failures": {"h2": 1}, "dark": {}}
    why = "refused before any change: run R1 is promoted on this host (/var/lib/serving-rollout/x/promoted.json)"
    hosts = cli.host_outcomes("renew", "/nowhere", "R", stats, {"h2": why})
    assert hosts == [{"host": "h1", "outcome": "ok"}, {"host": "h2", "outcome": "refused", "why": why}]
    assert cli.exit_code("renew", 2, hosts) == 3
    assert [cli.host_line("renew", h) for h in hosts] == ["h1: renewed", "h2: refused, nothing changed (the reason "
                                                                          "above)"]
    line = cli.progress_line(event("runner_on_failed", "Adopt", role="rollout", res={"msg": why}))
    assert line == f"h1: {why}"  # the reason, said once, as the host's failure line
    # a failure that changed something is never a refusal
    failed = cli.host_outcomes("promote", "/nowhere", "R", stats, {"h2": "promotion of run R1 failed and ..."})
    assert failed[1]["outcome"] == "failed" and cli.exit_code("promote", 2, failed) == 4
    assert cli.host_line("promote", failed[1]) == "h2: failed: promotion of run R1 failed and ..."
    assert cli.meaning_of("capture", 0) == "every host captured" and cli.meaning_of("capture", 3) == cli.MEANING[3]


def test_an_asserts_list_of_messages_is_one_plain_line_never_cut():
    long = "x " * 400
    assert cli.failure_text(["refused before any change:", "  two\n lines", None]) == \
        "refused before any change:; two lines"
    line = cli.progress_line(event("runner_on_failed", "Assert", role="promotion", res={"msg": long}))
    assert line == "h1: FAILED at 'Assert': " + long.strip() and "[" not in line


def test_run_ends_with_the_promote_command_and_check_reaches_ansible(monkeypatch, tmp_path, capsys):
    calls = []

    def fake_run(kind, playbook, inventory, extravars, evidence, quiet=False, listen=None, cmdline=None):
        calls.append((kind, playbook, cmdline))
        hosts = [{"host": "h1", "outcome": "acceptable"}] if kind == "run" else [{"host": "h1", "outcome": "ok"}]
        return {"command": kind, "run_id": "R9", "exit_code": 0, "meaning": cli.meaning_of(kind, 0), "hosts": hosts,
                "artifacts": str(tmp_path), "interrupted": False}

    monkeypatch.setattr(cli, "run_playbook", fake_run)
    assert cli.main(["run", "candidate-p2p", "-i", str(tmp_path), "--evidence", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"next: review the card (bin/evidence card {tmp_path}/h1/rollout-R9), then promote: "
        f"bin/serving-rollout promote R9 --approve -i {tmp_path}")
    for command in ("propose", "capture", "renew", "peer-path"):
        assert cli.main([command, "--check", "-i", str(tmp_path)]) == 0
    assert calls[1:] == [("propose", "propose.yml", "--check"), ("capture", "capture.yml", "--check"),
                         ("renew", "renew.yml", "--check"), ("peer-path", "peer-path.yml", "--check")]
    assert "h1: peer path checked" in capsys.readouterr().out


def test_status_tells_per_host_the_original_in_place_and_the_last_rollback(capsys, tmp_path):
    host = tmp_path / "gpu-1"
    (host / "promotion-R1").mkdir(parents=True)
    (host / "promotion-R1" / "promotion.json").write_text(json.dumps(
        {"run_id": "R1", "promoted_at": "20261207T100000Z"}))
    (host / "rollback-20261207T090000Z-ab12").mkdir()
    (host / "rollback-20261207T090000Z-ab12" / "restoration.json").write_text(json.dumps(
        {"restored": True, "failure": None, "undid_promotion_of_run": None}))
    assert cli.main(["status", "--evidence", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "no runs recorded yet",
        "gpu-1: original: promoted from run R1 at 20261207T100000Z; undo: bin/serving-rollout rollback -i "
        "INVENTORY", "gpu-1: last rollback 20261207T090000Z-ab12: restored and proven"]
    (host / "rollback-20261207T103000Z-fa11").mkdir()  # a rollback that did not restore undoes nothing
    (host / "rollback-20261207T103000Z-fa11" / "restoration.json").write_text(json.dumps(
        {"restored": False, "failure": "the original did not start", "undid_promotion_of_run": "R1"}))
    assert cli.main(["status", "--evidence", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        "gpu-1: original: promoted from run R1 at 20261207T100000Z; undo: bin/serving-rollout rollback -i INVENTORY",
        "gpu-1: last rollback 20261207T103000Z-fa11: NOT restored: the original did not start"]
    (host / "rollback-20261207T110000Z-cd34").mkdir()
    (host / "rollback-20261207T110000Z-cd34" / "restoration.json").write_text(json.dumps(
        {"restored": True, "failure": None, "undid_promotion_of_run": "R1"}))
    assert cli.main(["status", "--evidence", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        "gpu-1: original: the pre-promotion original (run R1's promotion undone by rollback 20261207T110000Z-cd34)",
        "gpu-1: last rollback 20261207T110000Z-cd34: restored and proven, the promotion of run R1 undone"]
    (host / "renew-20261207T120000Z-ef56").mkdir()
    (host / "renew-20261207T120000Z-ef56" / "renewal.json").write_text(json.dumps(
        {"renewed_at": "20261207T120000Z", "changed": ["/etc/sglang/sglang.env: variables changed: SGLANG_API_KEY"]}))
    assert cli.main(["status", "--evidence", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        "gpu-1: original: renewed at 20261207T120000Z (/etc/sglang/sglang.env: variables changed: SGLANG_API_KEY)")
    (host / "promotion-R2").mkdir()
    (host / "promotion-R2" / "promotion.json").write_text(json.dumps(
        {"run_id": "R2", "promoted_at": "20261207T130000Z", "mode": "managed"}))
    assert cli.main(["status", "--evidence", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        "gpu-1: original: the inventory's recipe patched from run R2 at 20261207T130000Z (converge.yml renders it on "
        "the host)")


def test_a_render_shows_its_diffs_without_the_task_stream():
    render = "TASK [x] ***\nh1: --- a.service\n+++ a-candidate.service\n-X=1\n+X=0\nok: [h1]\n"
    assert cli.diff_lines(render) == ["h1: --- a.service", "+++ a-candidate.service", "-X=1", "+X=0"]
    stream = ("TASK [serving_recipe : Render] ***\n--- before: /etc/a.service\n+++ after: /etc/a.service\n@@ -1 +1 @@\n"
              "-X=1\n+X=0\nchanged: [h1]\n\nPLAY RECAP ***\nh1 : ok=10 changed=1\n")
    assert cli.diff_lines(stream) == ["--- before: /etc/a.service", "+++ after: /etc/a.service", "@@ -1 +1 @@",
                                      "-X=1", "+X=0"]


def test_a_fleet_promotion_needs_its_dry_run_or_the_plan_id_and_one_run_a_bare_approve(capsys, tmp_path):
    cases = {("promote", "R1", "--fleet", "-i", str(tmp_path)): "needs --dry-run (show the plan) or --approve PLAN_ID",
             ("promote", "R1", "--fleet", "--approve", "-i", str(tmp_path)): "needs the plan id --dry-run shows",
             ("promote", "R1", "--fleet", "--dry-run", "--bake-s", "0", "-i", str(tmp_path)):
                 "--bake-s and --bake-interval-s must be above 0, got 0 and 15",
             ("promote", "R1", "--approve", "abc123", "-i", str(tmp_path)): "--dry-run and --approve PLAN_ID are for "
                                                                            "--fleet"}
    for argv, said in cases.items():
        assert cli.main(list(argv)) == cli.EXIT_USAGE, argv
        assert said in capsys.readouterr().err, argv
    assert cli.main(["promote", "R1", "--fleet", "--dry-run", "-i", str(tmp_path), "--evidence", str(tmp_path)]) == 3
    assert "refused before any change: no fleet run R1" in capsys.readouterr().err


def test_status_shows_a_fleet_promotion_per_host_while_it_runs(capsys, tmp_path):
    from serving_rollout import fleet_promotion

    fleet_promotion.save(tmp_path / "fleet-promotion-R1", {  # as run() saves it after each step
        "schema": fleet_promotion.SCHEMA, "run_id": "R1", "plan_id": "abc123", "ended": "running",
        "hosts": {"gpu-1": {"state": "passed", "batch": 1}, "gpu-2": {"state": "baking", "batch": 2},
                  "gpu-3": {"state": "planned", "batch": 3}, "gpu-4": {"state": "skipped", "why": "no run"}}})
    assert cli.main(["status", "--evidence", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "fleet promotion of run R1 (plan abc123, running): gpu-1 passed, gpu-2 baking, gpu-3 planned, gpu-4 skipped")
    assert cli.main(["status", "--evidence", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fleet_promotions"][0]["hosts"]["gpu-2"]["state"] == "baking"


def test_the_operators_environment_never_reaches_the_runners_artifacts_in_the_evidence(tmp_path, monkeypatch):
    """A real ansible-runner run of a read-only playbook (its one host unreachable): runner records the whole
    environment in its artifacts' `command` file; in the evidence it keeps only the names of what the operator's
    shell held, the values of what this tool set, and every other artifact."""
    planted = {"HF_TOKEN": "hf_plantedOperatorToken0417", "SERVING_ROLLOUT_PROMETHEUS_TOKEN": "prom-token-plant-88",
               "AWS_SECRET_ACCESS_KEY": "plant-aws-secret-9931", "MY_CORP_PROXY": "http://u:plantpw77@proxy:3128"}
    for name, value in planted.items():
        monkeypatch.setenv(name, value)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("gpu_serving_hosts:\n  hosts:\n    nowhere:\n      ansible_host: 127.0.0.1\n"
                         "      ansible_port: 9\n      ansible_connection: ssh\n")
    result = cli.run_playbook("identity", "original-identity.yml", inventory, {"run_id": "identity-t1"},
                              tmp_path / "evidence", quiet=True)
    assert result["ansible_rc"] != 0 and result["hosts"], result  # unreachable: it ran, and failed
    artifacts = Path(result["artifacts"])
    assert (artifacts / "stdout").is_file() and (artifacts / "job_events").is_dir(), sorted(artifacts.iterdir())
    env = json.loads((artifacts / "command").read_text())["env"]
    assert set(planted) <= set(env) and {env[name] for name in planted} == {"<not kept>"}, env
    assert env["ANSIBLE_NOCOLOR"] == "1"  # what this tool set is shown
    written = {p: p.read_bytes() for p in (tmp_path / "evidence").rglob("*") if p.is_file()}
    assert len(written) >= 4
    assert {str(p): name for p, data in written.items() for name, value in planted.items()
            if value.encode() in data} == {}
    assert not list(Path(tempfile.gettempdir()).glob("serving-rollout-runner-*/identity-t1"))  # scratch removed
