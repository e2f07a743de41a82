"""serving-rollout: run the playbooks through ansible-runner, show what an operator needs.

  serving-rollout run candidate-p2p -i INVENTORY [--canary N] [--batch-size N] [-e K=V|JSON|@FILE]...
  serving-rollout rollback -i INVENTORY [-e ...]
  serving-rollout capture -i INVENTORY [-e ...]
  serving-rollout propose -i INVENTORY [-e ...]
  serving-rollout render -i INVENTORY [-e serving_recipe_candidate_id=ID ...]   (--check --diff: changes nothing)
  serving-rollout promote RUN_ID --approve -i INVENTORY [-e ...]
  serving-rollout renew -i INVENTORY [-e ...]
  serving-rollout plan PLAN.json -i INVENTORY [--policy stop|skip-dependents] [-e ...]
  serving-rollout status [--evidence DIR] [--json]

Exit codes: 0 every host acceptable (restored, for rollback; done, for capture, propose, render, promote,
renew); 1 a candidate not acceptable, every original restored; 2 a host failed and was restored and proven;
3 refused before any change; 4 a host failed and was NOT proven restored, unreachable, or the run did not
finish (for capture, propose, render, promote and renew: any host not ok); 64 usage error.

Progress lines come from runner events (host, phase, cell, outcome), not the raw task stream;
runner's artifacts go to <evidence>/runner/<kind>-<run_id>/ and the structured result to
<evidence>/runner/<kind>-<run_id>/result.json (printed with --json). ansible-playbook works as
before; this is a second door to the same playbooks.
"""

import argparse
import json
import os
import re
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from serving_rollout import fleet

REPO = Path(__file__).resolve().parent.parent
PLAYBOOKS = {"candidate-p2p": "candidate-p2p.yml", "candidate": "candidate.yml", "rollback": "rollback.yml",
             "capture": "capture.yml", "peer-path": "peer-path.yml", "propose": "propose.yml",
             "render": "candidate-render.yml", "promote": "promote.yml", "renew": "renew.yml"}
# Exit codes: the worst host decides (a failed host that was not restored outranks everything).
EXIT = {"acceptable": 0, "not acceptable": 1, "failed, restored": 2, "refused": 3, "failed, NOT restored": 4}
EXIT_ERROR = 4  # a host unreachable, a runner error, or an outcome nobody recorded
EXIT_USAGE = 64
REFUSED = "refused before any"  # how a refusal begins ("... change", "... GPU work"): its asserts and actions say so
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,79}")  # playbooks/tasks/run_id.yml's rule
CHECKABLE = ("capture", "propose", "renew", "peer-path")  # --check (render always runs so)
# What a command did, said per host on success (a promotion and a renewal say more in their own closing lines).
DONE = {"capture": "captured", "propose": "proposed", "render": "rendered (nothing changed)",
        "renew": "renewed", "promote": "promoted", "rollback": "restored and proven", "peer-path": "peer path checked",
        "bake": "baked"}
MEANING = {0: "every host acceptable (or restored, for rollback; done, for capture, propose, render, promote, renew)",
           1: "a candidate was not acceptable (reject or inconclusive); every original restored",
           2: "a host failed and was restored and proven", 3: "refused before any change",
           4: "a host failed and was NOT proven restored, was unreachable, or the run did not finish",
           64: "usage error"}
# The plays tell the controller their progress in one fact (set_fact), read here from runner's
# events: a task's name is for people and may change freely.
# one per role that reports (ansible-lint's role prefix)
PROGRESS_FACTS = ("rollout_progress", "fleet_progress", "promotion_progress")


def parse_extra_vars(values):
    """-e K=V, -e JSON, -e @FILE (YAML or JSON), merged left to right."""
    import yaml

    merged = {}
    for value in values or []:
        if value.startswith("@"):
            path = Path(value[1:])
            if not path.is_file():
                raise ValueError(f"extra vars file {value[1:]!r} does not exist")
            loaded = yaml.safe_load(path.read_text())
        elif value.lstrip().startswith("{"):
            try:
                loaded = json.loads(value)
            except ValueError as exc:
                raise ValueError(f"extra vars {value!r} are not valid JSON: {exc}") from None
        elif "=" in value:
            loaded = dict(pair.split("=", 1) for pair in value.split())
        else:
            raise ValueError(f"extra vars {value!r}: use K=V, a JSON object or @FILE")
        if not isinstance(loaded, dict):
            raise ValueError(f"extra vars {value!r} are not a mapping")
        merged.update(loaded)
    return merged


def progress_text(progress):
    """The line for one progress fact, None for a kind this CLI does not know."""
    kind = progress.get("kind")
    if kind == "phase":
        return f"phase {progress.get('phase')}"
    if kind == "cell":
        failed = f", {progress['failures']} failed" if str(progress.get("failures", "0")) not in ("0", "") else ""
        return f"cell {progress.get('cell')} ({progress.get('arm')}) measured{failed}"
    if kind == "outcome":
        verdict = f", verdict {progress['verdict']}" if progress.get("verdict") else ""
        return f"{progress.get('outcome')}{verdict} ({progress.get('duration_s')} s)"
    return str(progress["message"]) if progress.get("message") else None  # a closing line: rollback, renew, ...


def progress_line(event):
    """One line for the events an operator follows, None for the rest."""
    data = event.get("event_data", {})
    host, task, kind = data.get("host"), data.get("task", ""), event.get("event")
    if kind == "playbook_on_play_start":
        return f"== {data.get('play', '')}"
    if kind in ("runner_on_ok", "runner_item_on_ok"):  # a looped task (the arm's cells) reports per item
        facts = data.get("res", {}).get("ansible_facts") or {}
        for progress in (facts.get(name) for name in PROGRESS_FACTS):
            text = progress_text(progress) if isinstance(progress, dict) else None
            if text:
                return f"{host}: {text}"
    if kind == "runner_on_failed" and not data.get("ignore_errors"):
        msg = failure_text(data.get("res", {}).get("msg", ""))
        if data.get("role") and msg:
            return f"{host}: {msg}" if msg.startswith(REFUSED) else f"{host}: FAILED at '{task}': {msg}"
    if kind == "runner_on_unreachable":
        return f"{host}: UNREACHABLE: {str(data.get('res', {}).get('msg', ''))[:200]}"
    return None


def failure_text(msg):
    """A task's failure message as one plain line (an assert's list of messages joined)."""
    parts = msg if isinstance(msg, list) else [msg]
    return " ".join("; ".join(str(part) for part in parts if part not in (None, "")).split())


def meaning_of(kind, code):
    """The exit line's words: what a success did for this command, else what the code means."""
    if code == EXIT_ERROR and kind not in ("run", "rollback", "promote"):  # nothing of these needs a restore
        return "a host failed or was unreachable (each host's line above says why)"
    return f"every host {DONE[kind]}" if code == 0 and kind in DONE else MEANING[code]


def exit_code(kind, rc, hosts):
    """The process exit code from the per-host outcomes (run) or the runner's stats: a host refused before any
    change (and none worse) is 3."""
    if kind != "run":
        if rc == 0 and hosts and all(h["outcome"] == "ok" for h in hosts):
            return 0
        return EXIT["refused"] if hosts and all(h["outcome"] in ("ok", "refused") for h in hosts) else EXIT_ERROR
    started = [h for h in hosts if h["outcome"] != "not-started"]
    if not started:
        return EXIT_ERROR
    return max(EXIT.get(h["outcome"], EXIT_ERROR) for h in started)


def host_outcomes(kind, evidence, run_id, stats, failures=None):
    """Per host: the fleet record for a rollout; ok/refused/failed/unreachable from runner stats otherwise (refused:
    its first failure says it was refused before any change)."""
    if kind == "run":
        path = Path(evidence) / f"fleet-{run_id}" / "summary.json"
        if path.exists():
            return json.loads(path.read_text())["hosts"]
    hosts = sorted(set().union(*[set((stats or {}).get(k) or {}) for k in ("ok", "failures", "dark", "skipped")]))
    out = []
    for host in hosts:
        why = (failures or {}).get(host, "")
        outcome = "unreachable" if host in (stats.get("dark") or {}) else \
            ("refused" if why.startswith(REFUSED) else "failed") if host in (stats.get("failures") or {}) else "ok"
        folder = Path(evidence) / host / f"proposal-{run_id}"
        out.append({"host": host, "outcome": outcome, **({"why": why} if outcome != "ok" and why else {}),
                    **({"evidence": str(folder)} if kind == "propose" and folder.is_dir() else {})})
    return out


def ansible_children():
    """This process's ansible-playbook children (runner's pexpect spawns them directly)."""
    from serving_rollout.holder import children, cmdline

    return [pid for pid in children(os.getpid()) if "ansible-playbook" in cmdline(pid)]


def run_playbook(kind, playbook, inventory, extravars, evidence, quiet=False, listen=None, cmdline=None, limit=None):
    """Run one playbook through ansible-runner; listen(event) sees every event; cmdline: ansible-playbook's own
    options (render: --check --diff); limit: these hosts only (a fleet promotion's batch)."""
    import ansible_runner

    run_id = extravars.setdefault("run_id", fleet.new_run_id())
    extravars.setdefault("rollout_evidence_dir", str(evidence))
    extravars.setdefault("observation_writer_dir", str(evidence))
    extravars.setdefault("promotion_evidence_dir", str(evidence))  # promote reads the run's evidence there
    private = Path(evidence) / "runner" / f"{Path(playbook).stem}-{run_id}"
    private.mkdir(parents=True, exist_ok=True)

    failures = {}  # each host's first failure, in one line

    def on_event(event):
        if listen:
            listen(event)
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_failed" and not data.get("ignore_errors"):
            failures.setdefault(data.get("host"), failure_text(data.get("res", {}).get("msg", "")))
        line = progress_line(event)
        if line and not quiet:
            print(line, flush=True)
        return True

    # runner sets ANSIBLE_CALLBACK_PLUGINS (its own display), which hides ansible.cfg's callback_plugins: name ours
    env = {"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_CALLBACK_PLUGINS": str(REPO / "callback_plugins"),
           "ANSIBLE_NOCOLOR": "1", "ANSIBLE_DEPRECATION_WARNINGS": "0",  # the render's output is read by a person
           "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    interrupted = []

    def on_signal(signum, frame):
        # ansible-playbook runs in its own session (runner's pty): pass the interrupt on as SIGTERM, on which
        # its interrupted callback records each host's phase, stops the workers and exits.
        interrupted.append(signum)
        for pid in ansible_children():  # a second interrupt does not wait for it any longer
            os.kill(pid, signal.SIGTERM if len(interrupted) == 1 else signal.SIGKILL)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    # Runner writes its artifacts' `command` file with the whole environment of this process (an operator's
    # tokens among it): the artifacts are written outside the evidence and kept there without it (keep_artifacts).
    scratch = Path(tempfile.mkdtemp(prefix="serving-rollout-runner-"))
    try:
        runner = ansible_runner.run(
            private_data_dir=str(private), project_dir=str(REPO), playbook=str(REPO / "playbooks" / playbook),
            inventory=str(Path(inventory).resolve()), extravars=extravars, envvars=env, quiet=True,
            event_handler=on_event, ident=run_id, cmdline=cmdline, limit=",".join(limit) if limit else None,
            artifact_dir=str(scratch),
            cancel_callback=lambda: False)  # not runner's own handler, which SIGKILLs the playbook at once
        stats, rc, status = runner.stats or {}, runner.rc, runner.status  # read from the artifacts: before the move
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        keep_artifacts(scratch / run_id, private / "artifacts" / run_id, env)
        shutil.rmtree(scratch, ignore_errors=True)
    hosts = host_outcomes(kind, evidence, run_id, stats, failures)
    code = exit_code(kind, rc, hosts)
    result = {"schema": "serving-rollout.cli-result/v1", "command": kind, "playbook": playbook, "run_id": run_id,
              "ansible_rc": rc, "status": status, "exit_code": code, "meaning": meaning_of(kind, code),
              "hosts": hosts, "artifacts": str(private / "artifacts" / run_id), "interrupted": bool(interrupted),
              "fleet_summary": str(Path(evidence) / f"fleet-{run_id}" / "summary.json") if kind == "run" else None}
    (private / "result.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return result


def keep_artifacts(scratch, kept, ours):
    """Runner's artifacts moved from `scratch` into the evidence (`kept`), its `command` file with the values of
    the variables this tool set (`ours`) and only the names of the environment it inherited."""
    if not scratch.is_dir():
        return
    kept.mkdir(parents=True, exist_ok=True)
    for entry in scratch.iterdir():
        if entry.name == "command":
            record = json.loads(entry.read_text())
            record["env"] = {name: value if name in ours else "<not kept>"
                             for name, value in sorted(record.get("env", {}).items())}
            (kept / "command").write_text(json.dumps(record, indent=1) + "\n")
        else:
            shutil.move(str(entry), str(kept / entry.name))


def identities(inventory, extravars, evidence):
    """{host: sha256 of the serving unit file}, read-only (playbooks/original-identity.yml)."""
    from serving_rollout.plan import PlanError

    found = {}

    def listen(event):
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and data.get("task") == "Report the original's identity":
            found[data["host"]] = data.get("res", {}).get("msg")

    result = run_playbook("identity", "original-identity.yml", inventory,
                          {**extravars, "run_id": fleet.new_run_id("identity-")},
                          evidence, quiet=True, listen=listen)
    if result["ansible_rc"] != 0 or not found or "missing" in found.values():
        raise PlanError(f"cannot read the serving unit on every host (ansible rc {result['ansible_rc']}, read: "
                        f"{found}); see {result['artifacts']}")
    return found


def fleet_promotion_command(args, extravars):
    """promote --fleet RUN_ID: the plan (--dry-run), or the plan carried out batch by batch (--approve PLAN_ID)."""
    from serving_rollout import fleet_promotion

    bake_vars = {"rollout_bake_s": args.bake_s, "rollout_bake_interval_s": args.bake_interval_s}
    try:
        rule = {"min_effect": args.bake_min_effect, "min_requests": args.bake_min_requests}
        plan = fleet_promotion.plan_of(args.evidence, args.run_id, args.canary, args.batch_size, args.bake_s, rule)
        if args.dry_run:
            print("\n".join(fleet_promotion.plan_lines(plan)))
            print(f"to carry it out: bin/serving-rollout promote --fleet {args.run_id} --approve {plan['plan_id']} "
                  f"-i {args.inventory} --canary {args.canary} --batch-size {args.batch_size} --bake-s {args.bake_s:g} "
                  f"--bake-min-effect {args.bake_min_effect:g} --bake-min-requests {args.bake_min_requests}")
            return 0
        approved = args.approve if isinstance(args.approve, str) else None

        def step(kind, playbook, more):
            return lambda hosts: {h["host"]: h for h in run_playbook(
                kind, playbook, args.inventory, {**extravars, **more}, args.evidence, quiet=args.json,
                limit=hosts)["hosts"]}

        def bake(hosts, phase):  # each host's answer with its bake record, what the metric comparison reads
            result = run_playbook("bake", "bake.yml", args.inventory, {**extravars, **bake_vars,
                                  "rollout_bake_phase": phase}, args.evidence, quiet=args.json, limit=hosts)
            answers = {h["host"]: h for h in result["hosts"]}
            for host, answer in answers.items():
                record = Path(args.evidence) / host / f"bake-{result['run_id']}" / "bake.json"
                if record.is_file():
                    answer["record"], answer["record_path"] = json.loads(record.read_text()), str(record)
            return answers

        state = fleet_promotion.run(
            plan, args.evidence, approved,
            step("promote", "promote.yml", {"promotion_run_id": args.run_id, "promotion_approved_run_id": args.run_id}),
            bake, step("rollback", "rollback.yml", {}), say=(lambda line: None) if args.json else print)
    except fleet_promotion.PromotionError as exc:
        print(f"serving-rollout: refused before any change: {exc}", file=sys.stderr)
        return EXIT["refused"]
    states = {h["state"] for h in state["hosts"].values()}
    code = EXIT_ERROR if "rollback FAILED" in states else EXIT["failed, restored"] if state["ended"].startswith(
        "stopped") else 0
    if args.json:
        print(json.dumps({**state, "exit_code": code}, indent=2, sort_keys=True))
        return code
    for host, h in state["hosts"].items():
        print(f"{host}: {h['state']}" + (f" ({h['why']})" if h.get("why") else ""))
        if h.get("metrics", {}).get("verdict") == "pass":  # what a passed bake measured, against which window
            print(f"  bake against its original's window ({h['metrics']['source']}): " + "; ".join(
                h["metrics"]["judged"]))
    print(f"fleet promotion {state['ended']}; report {state['folder']}/report.md (sealed: bin/evidence verify "
          f"{state['folder']})")
    if state["promoted_left"] and code:
        print(f"promoted and left so: {', '.join(state['promoted_left'])}; to roll them back too: bin/serving-rollout "
              f"rollback -i {args.inventory} -e rollout_hosts={','.join(state['promoted_left'])}")
    print(f"exit {code}: " + ("every batch promoted and baked" if code == 0 else MEANING[code]))
    return code


def run_plan_command(args, extravars):
    from serving_rollout import plan as plan_executor

    def run_candidate(cid, run_id, candidate_vars):
        result = run_playbook("run", "candidate.yml", args.inventory,
                              {**extravars, **candidate_vars, "run_id": run_id,
                               "rollout_canary": args.canary, "rollout_batch_size": args.batch_size},
                              args.evidence, quiet=args.json)
        return result["hosts"]

    def rollback():
        run_playbook("rollback", "rollback.yml", args.inventory, dict(extravars), args.evidence, quiet=args.json)

    try:
        doc = plan_executor.run_plan(args.plan_file, args.evidence, lambda: identities(args.inventory, extravars,
                                                                                        args.evidence),
                                     run_candidate, rollback, policy=args.policy,
                                     say=(lambda line: None) if args.json else print)
    except plan_executor.PlanError as exc:
        print(f"serving-rollout: {exc}", file=sys.stderr)
        return EXIT["refused"]
    decided = [c["outcome"] for c in doc["candidates"] if c.get("status") == "decided"]
    code = max([EXIT.get(o, EXIT_ERROR) for o in decided] or [0])
    if args.json:
        print(json.dumps({**doc, "exit_code": code}, indent=2, sort_keys=True))
    else:
        order = ", ".join(f"{row['id']} (run {row['run_id']})" for row in plan_executor.recommended(doc))
        print(f"plan report: {doc['folder']}/report.md; recommended promotion order: {order or 'none'}")
        print(f"exit {code}: {MEANING[code]}")
        print(plan_next_step(doc, args))
    return code


def read_json(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}


def host_story(host_dir):
    """A host's promotions and rollbacks from its evidence folder: the original in place and the last rollback."""
    promotions = sorted((read_json(path) for path in host_dir.glob("promotion-*/promotion.json")),
                        key=lambda record: str(record.get("promoted_at")))
    rollbacks = sorted(host_dir.glob("rollback-*"))
    last = rollbacks[-1].name.removeprefix("rollback-") if rollbacks else None
    story = {}
    if last:
        said = read_json(rollbacks[-1] / "restoration.json")
        story["last_rollback"] = {"id": last, "restored": said.get("restored"), "failure": said.get("failure"),
                                  "undid_promotion_of_run": said.get("undid_promotion_of_run")}
    renewals = sorted((read_json(path) for path in host_dir.glob("renew-*/renewal.json")),
                      key=lambda record: str(record.get("renewed_at")))
    renewed = str(renewals[-1].get("renewed_at")) if renewals else ""
    if renewals and (not promotions or renewed > str(promotions[-1].get("promoted_at"))):
        story["original"] = {"renewed_at": renewed, "changed": renewals[-1].get("changed") or []}
    elif promotions:
        newest = promotions[-1]
        when = str(newest.get("promoted_at", ""))
        # undone by a later rollback that says it restored the original and undid this run's promotion
        undone = [r.name.removeprefix("rollback-") for r in rollbacks if r.name.removeprefix("rollback-") > when
                  and (said := read_json(r / "restoration.json")).get("restored")
                  and said.get("undid_promotion_of_run") == newest.get("run_id")]
        story["original"] = ({"promoted_from_run": newest.get("run_id"), "promoted_at": when,
                              "mode": newest.get("mode", "adopted")}
                             if not undone else {"promotion_undone": newest.get("run_id"), "by_rollback": undone[0]})
    return story


def plan_next_step(doc, args):
    """After a plan: promote its first recommended candidate, or run the plan again once its stop is dealt with."""
    from serving_rollout.plan import recommended

    first = next(iter(recommended(doc)), None)
    if first:
        return (f"next: review {first['id']}'s card, then promote it: bin/serving-rollout promote {first['run_id']} "
                f"--approve -i {args.inventory} (then run the plan again against the new original)")
    return (f"next: read {doc['folder']}/report.md; nothing to promote. After dealing with what stopped it: "
            f"bin/serving-rollout plan {args.plan_file} -i {args.inventory}")


def status(evidence):
    index_path = Path(evidence) / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {}
    latest = {}
    for run in index.get("runs", []):
        latest[run["host"]] = run  # index order is finishing order
    hosts = {path.name: host_story(path) for path in sorted(Path(evidence).glob("*/"))
             if path.is_dir() and not path.name.startswith(("fleet-", "plan-", "runner"))}
    promotions = sorted(Path(evidence).glob("fleet-promotion-*/state.json"), key=lambda p: p.stat().st_mtime)
    return {"latest_per_host": latest, "fleets": index.get("fleets", [])[-5:],
            "hosts": {host: story for host, story in hosts.items() if story},
            "fleet_promotions": [json.loads(p.read_text()) for p in promotions[-5:]]}


def on_the_hosts(inventory, evidence):
    """{host: what it holds now} from playbooks/host-status.yml (read-only): a live lock, a promotion in place."""
    said = {}

    def listen(event):
        line = progress_line(event) if event.get("event") in ("runner_on_ok", "runner_on_unreachable",
                                                              "runner_on_failed") else None
        if line:
            host, text = line.split(": ", 1)
            said[host] = text

    run_playbook("host-status", "host-status.yml", inventory, {"run_id": fleet.new_run_id("status-")}, evidence,
                 quiet=True, listen=listen)
    return said


def story_lines(host, story):
    """A host's original in place and its last rollback, one line each."""
    lines = []
    original = story.get("original")
    if original and original.get("mode") == "managed":
        lines.append(f"{host}: original: the inventory's recipe patched from run {original['promoted_from_run']} at "
                     f"{original['promoted_at']} (converge.yml renders it on the host)")
    elif original and "promoted_from_run" in original:
        lines.append(f"{host}: original: promoted from run {original['promoted_from_run']} at "
                     f"{original['promoted_at']}; undo: bin/serving-rollout rollback -i INVENTORY")
    elif original and "renewed_at" in original:
        lines.append(f"{host}: original: renewed at {original['renewed_at']} ("
                     + ("; ".join(original["changed"]) or "nothing had changed") + ")")
    elif original:
        lines.append(f"{host}: original: the pre-promotion original (run {original['promotion_undone']}'s promotion "
                     f"undone by rollback {original['by_rollback']})")
    rollback = story.get("last_rollback")
    if rollback:
        ended = "restored and proven" if rollback["restored"] else f"NOT restored: {rollback['failure']}"
        undid = f", the promotion of run {rollback['undid_promotion_of_run']} undone" \
            if rollback["restored"] and rollback.get("undid_promotion_of_run") else ""
        lines.append(f"{host}: last rollback {rollback['id']}: {ended}{undid}")
    return lines


def status_table(found):
    """The latest run per host and the latest fleet runs, for a person."""
    rows = [("host", "run", "candidate", "outcome", "evidence")]
    rows += [(host, str(run.get("run_id")), str(run.get("candidate_id")), str(run.get("outcome") or run.get("verdict")),
              str(run.get("path") or "")) for host, run in sorted(found.get("latest_per_host", {}).items())]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    if len(rows) == 1:
        lines = ["no runs recorded yet"]
    for host, story in sorted(found.get("hosts", {}).items()):
        lines += story_lines(host, story)
    lines += [f"{host}: {text}" for host, text in sorted((found.get("on_the_hosts") or {}).items())]
    for fleet_run in found.get("fleets", []):
        hosts = ", ".join(f"{host} {outcome}" for host, outcome in sorted((fleet_run.get("hosts") or {}).items()))
        stopped = f"; stopped at {fleet_run['stopped_at']}" if fleet_run.get("stopped_at") else ""
        lines.append(f"fleet {fleet_run.get('run_id')}: {hosts}{stopped}")
    from serving_rollout.fleet_promotion import states_text

    for promotion in found.get("fleet_promotions", []):  # saved after every step: a running one shows where it is
        lines.append(f"fleet promotion of run {promotion['run_id']} (plan {promotion['plan_id']}, "
                     f"{promotion['ended']}): {states_text(promotion)}")
    return "\n".join(lines)


def diff_lines(text):
    """The diffs of a --check --diff run's output (each from its '--- before' line, or the render's 'host: ---'
    line, to the next task's result):
    what a render shows a person, without the task stream around it."""
    shown, inside = [], False
    for line in text.splitlines():
        if line.startswith("--- before") or re.match(r"[\w.-]+: --- ", line):  # Ansible's diff; the render's own
            inside = True
        elif line.startswith(("TASK [", "PLAY ", "changed: ", "ok: ", "skipping: ", "fatal: ")):
            inside = False
        if inside:
            shown.append(line)
    return shown


def print_output(result):
    """A render's own output (the candidate against the original), from runner's stdout artifact."""
    stdout = Path(result["artifacts"]) / "stdout"
    if stdout.exists():
        print("\n".join(diff_lines(stdout.read_text(errors="replace"))))


def interrupted_run(args, extravars):
    """Ctrl-C during a rollout: restore the original on the run's hosts before exiting (rollback.yml,
    which takes each host's lock over); a second Ctrl-C leaves them to their watchdogs, and says so."""
    run_id = extravars.get("run_id")
    print(f"serving-rollout: interrupted (run {run_id}); restoring the original on every host of the inventory "
          "with rollback.yml - Ctrl-C again to leave them to their host watchdogs", file=sys.stderr, flush=True)
    kept = {k: v for k, v in extravars.items() if k not in ("run_id", "rollout_canary", "rollout_batch_size")}
    result = run_playbook("rollback", PLAYBOOKS["rollback"], args.inventory, kept, args.evidence, quiet=args.json)
    if result["interrupted"]:
        print("serving-rollout: rollback interrupted too. Where the run had stopped an original, the host's watchdog "
              "holds the duty: the rollback renewed its lease when it took the lock over, so the watchdog restores the "
              "original when that lease runs out (rollout_lease_s; the host's journal: journalctl -u "
              "'serving-rollout-watchdog-*'). To restore and prove it now: "
              f"bin/serving-rollout rollback -i {args.inventory}", file=sys.stderr)
        return EXIT_ERROR
    for host in result["hosts"]:
        print(f"{host['host']}: interrupted, rollback {host['outcome']}")
    print(f"exit {EXIT_ERROR}: the run was interrupted; rollback exit {result['exit_code']} "
          f"({'every original restored and proven' if result['exit_code'] == 0 else result['meaning']})")
    return EXIT_ERROR


def parser_of():
    parser = argparse.ArgumentParser(prog="serving-rollout", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="roll a candidate out: canary, then batches")
    run.add_argument("playbook", choices=["candidate-p2p", "candidate"])
    plan = sub.add_parser("plan", help="run a plan's candidates in order, each gated, resumable")
    plan.add_argument("plan_file")
    plan.add_argument("--policy", choices=["stop", "skip-dependents"], default="stop",
                      help="at a candidate that does not pass: stop, or skip only the candidates that depend on it")
    for name, help_text in (("rollback", "restore the original on every host"),
                            ("capture", "capture the host facts (read-only)"),
                            ("propose", "propose each host's pins and candidate plan from its facts (read-only)"),
                            ("render", "show the candidate against the original (--check --diff: changes nothing)"),
                            ("renew", "adopt the current original as the restore recipe after an intended change"),
                            ("peer-path", "prove the GPU peer path: byte-checked copies, NCCL all-reduce A/B "
                                          "(read-only, two GPUs or more)")):
        sub.add_parser(name, help=help_text)
    promote = sub.add_parser("promote", help="make a run's acceptable candidate the original (a human's approval); "
                                              "--fleet: across a fleet run's hosts in baked batches")
    promote.add_argument("run_id")
    promote.add_argument("--approve", nargs="?", const=True, default=False,
                         help="the human approval: for one run, promote.yml's (promotion_approved_run_id = RUN_ID); "
                              "with --fleet, the plan id --dry-run shows")
    promote.add_argument("--fleet", action="store_true", help="RUN_ID is a fleet run: promote each of its hosts on "
                                                              "its own run, canary then batches, each baked")
    promote.add_argument("--dry-run", action="store_true", help="with --fleet: show the plan, change nothing")
    promote.add_argument("--bake-s", type=float, default=600.0, help="with --fleet: each batch's bake, in seconds")
    promote.add_argument("--bake-interval-s", type=float, default=15.0, help="with --fleet: seconds between samples")
    promote.add_argument("--bake-min-effect", type=float, default=0.02,
                         help="with --fleet: a latency worse by this fraction (and significant) fails a bake")
    promote.add_argument("--bake-min-requests", type=int, default=20,
                         help="with --fleet: finished requests each window needs to be judged (else the bake fails)")
    for p in (run, plan, promote, *(sub.choices[name] for name in ("rollback", "capture", "propose", "render",
                                                                   "renew", "peer-path"))):
        p.add_argument("-i", "--inventory", required=True)
        p.add_argument("-e", "--extra-vars", action="append", default=[])
        p.add_argument("--evidence", default=str(REPO / "evidence"))
        p.add_argument("--json", action="store_true", help="print the structured result as JSON")
    for name in CHECKABLE:
        sub.choices[name].add_argument("--check", action="store_true",
                                       help="ansible-playbook's check mode: show what would change, change nothing")
    for p in (run, plan, promote):
        p.add_argument("--canary", type=int, default=1)
        p.add_argument("--batch-size", type=int, default=1)
    st = sub.add_parser("status", help="the latest run per host and the latest fleet runs, as a table")
    st.add_argument("--evidence", default=str(REPO / "evidence"))
    st.add_argument("--json", action="store_true", help="print them as JSON")
    st.add_argument("-i", "--inventory", help="also read each host's live lock and promotion in place (read-only)")
    return parser


def run_id_problem(args, extravars):
    """A run id given on the command line that is not a plain name (it names folders under the evidence folder),
    or whose evidence exists already: checked before anything is written (the playbooks' own rule, tasks/run_id.yml)."""
    given = [value for value in (extravars.get("run_id"), getattr(args, "run_id", None)) if value is not None]
    for value in given:
        if not isinstance(value, str) or not RUN_ID.fullmatch(value):
            return (f"run id {value!r} refused before anything was written: 1-80 letters, digits, '_', '.' or '-', "
                    "starting with a letter or digit (it names folders under the evidence folder)")
    if args.command == "run" and extravars.get("run_id"):
        taken = sorted(Path(args.evidence).glob(f"*/rollout-{extravars['run_id']}")) + sorted(
            Path(args.evidence).glob(f"fleet-{extravars['run_id']}"))
        if taken:
            return (f"run id {extravars['run_id']!r} is taken: {taken[0]} exists (another run's evidence); leave "
                    "-e run_id out (a new one is made) or name an unused one. Nothing was changed")
    return None


def fleet_usage_problem(args):
    """What is wrong with a promote --fleet command line, or None."""
    if args.dry_run == bool(args.approve):
        return (f"promote --fleet {args.run_id} needs --dry-run (show the plan) or --approve PLAN_ID (the plan id the "
                "dry run shows), one of them")
    if args.approve is True:
        return f"promote --fleet {args.run_id} --approve needs the plan id --dry-run shows (--approve PLAN_ID)"
    if args.bake_s <= 0 or args.bake_interval_s <= 0:
        return f"--bake-s and --bake-interval-s must be above 0, got {args.bake_s:g} and {args.bake_interval_s:g}"
    return None


def usage_problem(args, extravars):
    """What is wrong with the command line before anything runs, or None."""
    problem = run_id_problem(args, extravars)
    if problem:
        return problem
    if not Path(args.inventory).exists():
        return f"inventory {args.inventory!r} does not exist"
    if args.command in ("run", "plan", "promote") and (args.canary < 1 or args.batch_size < 1):
        return f"--canary and --batch-size must be at least 1, got {args.canary} and {args.batch_size}"
    if args.command == "plan" and not Path(args.plan_file).is_file():
        return f"plan file {args.plan_file!r} does not exist"
    if args.command == "promote" and args.fleet:
        return fleet_usage_problem(args)
    if args.command == "promote" and (args.dry_run or isinstance(args.approve, str)):
        return "--dry-run and --approve PLAN_ID are for --fleet; one run is promoted with a bare --approve"
    if args.command == "promote" and not args.approve:
        return (f"promote {args.run_id} needs --approve: promotion is a human's step (promote.yml checks "
                "promotion_approved_run_id against the run)")
    return None


def host_line(kind, host):
    """A host's closing line: what was done, or why not."""
    outcome = host["outcome"]
    said = DONE.get(kind, outcome) if outcome == "ok" else host.get("why") or outcome
    if outcome == "refused" or said.startswith(REFUSED):
        said = "refused, nothing changed (the reason above)"
    elif outcome not in ("ok", "refused") and host.get("why"):
        said = f"{outcome}: {host['why']}"
    return f"{host['host']}: {said}" + (f" ({host['evidence']})" if host.get("evidence") else "")


def next_step(kind, result, args):
    """The next command an operator takes after this one, or None."""
    acceptable = [h["host"] for h in result["hosts"] if h.get("outcome") == "acceptable"]
    if kind == "run" and acceptable and len(result["hosts"]) > 1:  # a fleet: its promotion's plan first
        return (f"next: review the cards (bin/evidence card {args.evidence}/<host>/rollout-{result['run_id']}), then "
                f"see the fleet promotion's plan: bin/serving-rollout promote {result['run_id']} --fleet --dry-run "
                f"-i {args.inventory}")
    if kind == "run" and acceptable:
        return (f"next: review the card (bin/evidence card {args.evidence}/{acceptable[0]}/rollout-{result['run_id']}),"
                f" then promote: bin/serving-rollout promote {result['run_id']} --approve -i {args.inventory}")
    if kind == "propose" and result["exit_code"] == 0:
        return "next: read each host's report.md above, then run its plan with the command the report gives"
    return None


def show(result, as_json, after=None):
    if as_json:
        print(json.dumps(result, indent=2, sort_keys=True))
        return
    for host in result["hosts"]:
        print(host_line(result["command"], host) if result["command"] != "run" else
              f"{host['host']}: {host['outcome']}" + (f" ({host['evidence']})" if host.get("evidence") else ""))
    print(f"exit {result['exit_code']}: {result['meaning']} (artifacts {result['artifacts']})")
    if after:
        print(after)


def main(argv=None):
    try:
        args = parser_of().parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else 0
    if args.command == "status":
        found = status(args.evidence)
        if args.inventory:
            found["on_the_hosts"] = on_the_hosts(args.inventory, args.evidence)
        print(json.dumps(found, indent=2, sort_keys=True) if args.json else status_table(found))
        return 0
    try:
        extravars = parse_extra_vars(args.extra_vars)
        problem = usage_problem(args, extravars)
    except ValueError as exc:
        problem = str(exc)
    if problem:
        print(f"serving-rollout: {problem}", file=sys.stderr)
        return EXIT_USAGE
    if args.command == "plan":
        return run_plan_command(args, extravars)
    if args.command == "promote" and args.fleet:
        return fleet_promotion_command(args, extravars)
    if args.command == "run":
        extravars.update({"rollout_canary": args.canary, "rollout_batch_size": args.batch_size})
        kind, playbook = "run", PLAYBOOKS[args.playbook]
    else:
        kind, playbook = args.command, PLAYBOOKS[args.command]
    if kind == "promote":
        extravars.update({"promotion_run_id": args.run_id, "promotion_approved_run_id": args.run_id})
    checking = kind == "render" or getattr(args, "check", False)
    result = run_playbook(kind, playbook, args.inventory, extravars, args.evidence, quiet=args.json,
                          cmdline=("--check --diff" if kind == "render" else "--check" if checking else None))
    if kind == "render" and not args.json:
        print_output(result)
    if result["interrupted"] and kind == "run":
        return interrupted_run(args, extravars)
    show(result, args.json, next_step(kind, result, args))
    return result["exit_code"]


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # before any playbook started (during one, run_playbook handles it)
        print("serving-rollout: interrupted before any playbook started; nothing was changed", file=sys.stderr)
        sys.exit(130)
