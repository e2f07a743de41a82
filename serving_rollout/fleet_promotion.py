"""A fleet run's control promoted across the fleet: canary host(s), then batches, each batch baked (playbooks/bake.yml)
before the next is touched; a batch whose bake fails is rolled back (rollback.yml's exact, proven restore) and the
promotion stops there. A host is promoted only on its own acceptable, sealed run of that fleet run (promote.yml then
checks the original it runs now is the one that run measured, and takes the host's lock); the others are listed
and skipped. One human approval covers the plan as shown by --dry-run: the approval names the plan's id.

Outside a play: the plan comes from the evidence folder, the steps run through callbacks (bin/serving-rollout's
ansible-runner), each taking a list of hosts and answering {host: {"outcome": ok|refused|failed, "why": ...}}.
The state is kept in <evidence>/fleet-promotion-<run id>/ (state.json, report.md) after every step. The same approval
run again after its controller was lost resumes that state: batches that passed stay, a batch left promoting or
baking goes on from its promotion against the originals' windows it kept (the host's watchdog has meanwhile left
each host promoted or restored), one not yet begun starts from its originals' watch."""

import hashlib
import json
from pathlib import Path

from serving_rollout import bake_metrics, fleet
from serving_rollout import evidence as evidence_tool

SCHEMA = "serving-rollout.fleet-promotion/v1"
RULES = ("a host is promoted only on its own acceptable, sealed run of this fleet run, against the original that run "
         "measured (promote.yml refuses another, taking the host's lock)",
         "a batch is promoted only after every host of the batch before it passed its bake",
         "each batch's originals are watched for the bake's window first (the window each promoted unit is compared "
         "with); an original that fails its watch stops the promotion before its batch is touched",
         "a bake fails when the unit leaves active, restarts or begins another invocation, when its smoke completion "
         "fails twice in a row, or when its journal shows a crash",
         "a bake fails when the engine's own metrics regress against its original's window: TTFT or E2E worse "
         "(one-sided Mann-Whitney over the histograms' buckets at alpha, and the median or p90 worse by min_effect), "
         "or the error rate up by more than max_error_rate_rise; a window that cannot be read (Prometheus "
         "unreachable, a series missing, too few requests) fails it too",
         "a failed bake rolls its whole batch back (rollback.yml's restore, proven) and stops the promotion; earlier "
         "batches stay promoted, listed with the command that rolls them back")


class PromotionError(Exception):
    """A fleet promotion refused before any change, with why."""


def folder_of(evidence, run_id):
    """Where a fleet promotion of run_id keeps its state, report and per-host records."""
    return Path(evidence) / f"fleet-promotion-{run_id}"


def states_text(state):
    """Each host's state in one line: "h1 passed, h2 baking, ..." (the resume, a refusal and status say it)."""
    return ", ".join(f"{host} {h['state']}" for host, h in state["hosts"].items())


def why_not(evidence, host, run_id):
    """None when the host has its own acceptable, sealed run run_id that allows promotion; else why not."""
    run = Path(evidence) / host / f"rollout-{run_id}"
    if not run.is_dir():
        return f"no run {run_id} of its own ({run} is missing)"
    trusted = evidence_tool.trust(run)
    if trusted["problems"]:
        return f"its run's evidence is not trusted: {'; '.join(trusted['problems'])}"
    if not trusted["promotion_allowed"]:
        return f"its run's verdict is {trusted['verdict']}, which does not allow promotion"
    return None


def plan_of(evidence, run_id, canary=1, batch_size=1, bake_s=600.0, bake_rule=None):
    """The fleet promotion's plan: the fleet run's hosts in its order, batches of the promotable ones (canary first),
    the skipped ones with why, the bake, its metric rule (bake_metrics.DEFAULTS' keys) and the rules; plan_id names
    it (what the approval must name)."""
    if canary < 1 or batch_size < 1 or bake_s <= 0:
        raise PromotionError(f"canary and batch size must be at least 1 and the bake above 0 s, got {canary}, "
                             f"{batch_size} and {bake_s}")
    rule = {**bake_metrics.DEFAULTS, **(bake_rule or {})}
    if not 0 <= rule["min_effect"] < 1 or not 0 < rule["alpha"] < 1 or rule["min_requests"] < 1:
        raise PromotionError(f"the bake's rule needs 0 <= min_effect < 1, 0 < alpha < 1 and min_requests >= 1, got "
                             f"{rule['min_effect']}, {rule['alpha']} and {rule['min_requests']}")
    summary_path = Path(evidence) / f"fleet-{run_id}" / "summary.json"
    if not summary_path.is_file():
        raise PromotionError(f"no fleet run {run_id}: {summary_path} is missing (bin/serving-rollout status lists "
                             "the fleet runs)")
    hosts = [h["host"] for h in json.loads(summary_path.read_text())["hosts"]]
    skipped = {host: why for host in hosts if (why := why_not(evidence, host, run_id))}
    promotable = [host for host in hosts if host not in skipped]
    batches = [promotable[:canary]] + [promotable[n:n + batch_size]
                                       for n in range(canary, len(promotable), batch_size)]
    plan = {"schema": SCHEMA, "run_id": run_id, "batches": [b for b in batches if b], "skipped": skipped,
            "bake_s": float(bake_s), "bake_rule": rule, "rules": list(RULES)}
    plan["plan_id"] = hashlib.sha256(json.dumps(plan, sort_keys=True).encode()).hexdigest()[:12]
    return plan


def plan_lines(plan):
    """The plan for a person (--dry-run)."""
    lines = [f"fleet promotion of run {plan['run_id']}, plan {plan['plan_id']}:"]
    lines += [f"  batch {n} ({'canary' if n == 1 else 'batch'}): {', '.join(batch)}; then a {plan['bake_s']:g} s bake"
              for n, batch in enumerate(plan["batches"], 1)]
    lines += [f"  skipped {host}: {why}" for host, why in sorted(plan["skipped"].items())]
    rule = plan["bake_rule"]
    lines.append(f"  bake's metric rule: min_effect {rule['min_effect']:.0%}, alpha {rule['alpha']:g}, error rate rise "
                 f"at most {rule['max_error_rate_rise']:.0%} points, at least {rule['min_requests']} finished requests "
                 "in each window")
    lines += [f"  rule: {rule}" for rule in plan["rules"]]
    return lines


def save(folder, state):
    folder.mkdir(parents=True, exist_ok=True)
    fleet.write_json(folder / "state.json", state)
    (folder / "report.md").write_text("\n".join(report_lines(state)) + "\n")


def report_lines(state):
    lines = [f"# Fleet promotion of run {state['run_id']} (plan {state['plan_id']})", "",
             "| host | batch | state | why |", "| --- | --- | --- | --- |"]
    lines += [f"| {host} | {h.get('batch') or '-'} | {h['state']} | {h.get('why') or ''} |"
              for host, h in state["hosts"].items()]
    lines += [f"- {host}'s bake against its original's window ({h['metrics']['source']}): "
              f"{h['metrics']['verdict']}; " + "; ".join(h["metrics"]["judged"] or h["metrics"]["reasons"])
              for host, h in state["hosts"].items() if h.get("metrics")]
    lines += ["", f"Ended: {state['ended']}."]
    if state.get("promoted_left"):
        lines.append(f"Promoted and left so: {', '.join(state['promoted_left'])}; to roll them back too: "
                     f"bin/serving-rollout rollback -i INVENTORY -e rollout_hosts={','.join(state['promoted_left'])}")
    return lines


def mark(state, hosts, answers, ok, bad):
    """Each host's state from a step's answers: `ok` where it ended ok, `bad` (with why) otherwise."""
    for host in hosts:
        answer = answers.get(host) or {"outcome": "failed", "why": "no answer for this host"}
        state["hosts"][host].update(state=ok if answer["outcome"] == "ok" else
                                    "refused" if answer["outcome"] == "refused" else bad, why=answer.get("why"))


def rule_metrics(evidence, host, run_id):
    """The latency metrics of the host's run's decision rule (its guard metrics), the ones a bake judges."""
    path = Path(evidence) / host / f"rollout-{run_id}" / "decision.json"
    guard = (json.loads(path.read_text()).get("rule") or {}).get("guard") if path.is_file() else None
    return [m for m in (guard or bake_metrics.RULE_METRICS) if m in bake_metrics.RULE_METRICS] or \
        list(bake_metrics.RULE_METRICS)


def window_of(record, read=bake_metrics.prometheus_reading):
    """The window a bake record watched, read from the Prometheus it names or from its own /metrics readings."""
    bake, prometheus = record["bake"], record.get("prometheus") or {}
    if not bake.get("window"):
        return {"ok": False, "error": "the bake kept no window (it ended before it began)"}
    if prometheus.get("url"):
        ends = [read(prometheus["url"], record["engine"], prometheus["labels"], bake["window"][end])
                for end in ("start", "end")]
    else:
        ends = [(bake.get("metrics") or {}).get(end) or {"ok": False, "error": "no /metrics reading kept"}
                for end in ("start", "end")]
    return {**bake_metrics.window(*ends), "source": prometheus.get("url") or "the engine's /metrics"}


def compare(before, after, rule, read=bake_metrics.prometheus_reading):
    """The promoted unit's window judged against its original's (bake_metrics.judge), with both windows."""
    pre, post = window_of(before, read), window_of(after, read)
    return {**bake_metrics.judge(pre, post, rule), "before": pre, "after": post}


def _judge_metrics(state, hosts, pre, post, plan, evidence, read):
    for host in hosts:
        if state["hosts"][host]["state"] != "passed":
            continue
        if host not in pre:
            state["hosts"][host].update(state="bake failed", why="bake failed: the original's window was not kept, "
                                        "so the promoted one cannot be compared")
            continue
        rule = {**plan["bake_rule"], "metrics": rule_metrics(evidence, host, plan["run_id"])}
        result = compare(pre[host]["record"], post[host]["record"], rule, read)
        fleet.write_json(_host_record(evidence, plan, host), {  # the bake's series and verdict, sealed at the end
            "host": host, "rule": rule, "original_bake": pre[host]["record"], "promoted_bake": post[host]["record"],
            "judgement": result})
        state["hosts"][host]["metrics"] = {k: result[k] for k in ("verdict", "reasons", "shown")} | {
            "judged": [m["text"] for m in result["metrics"]], "source": result["after"].get("source")}
        if result["verdict"] != "pass":
            state["hosts"][host].update(state="bake failed", why="bake failed: " + "; ".join(result["reasons"]))


def _host_record(evidence, plan, host):
    path = folder_of(evidence, plan["run_id"]) / "hosts" / f"{host}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _set_aside(folder):
    """A finished promotion's folder, kept whole under another name before a new approval starts again."""
    if folder.is_dir():
        n = 1
        while folder.with_name(f"{folder.name}.{n}").exists():
            n += 1
        folder.rename(folder.with_name(f"{folder.name}.{n}"))


def _roll_back(state, baking, rollback, say, n):
    say(f"fleet promotion: batch {n} failed: rolling back {', '.join(baking)}")
    causes = {h: state["hosts"][h].get("why") for h in baking}
    mark(state, baking, rollback(baking), "rolled back", "rollback FAILED")
    for host in baking:  # the bake's cause stays beside the rollback's outcome
        state["hosts"][host]["why"] = "; ".join(w for w in (causes[host], state["hosts"][host].get("why")) if w)


def _watch_originals(state, plan, n, batch, bake, save_state, say):
    """The batch's originals watched for the bake's window: {host: answer with its record}, or None when one failed
    its watch (each host's state then says so; nothing was promoted)."""
    say(f"fleet promotion: batch {n} of {len(plan['batches'])}: watching the originals of {', '.join(batch)} for "
        f"{plan['bake_s']:g} s")
    for host in batch:
        state["hosts"][host]["state"] = "watching its original"
    save_state()
    pre = bake(batch, "original")
    unwell = {h: a.get("why") for h, a in pre.items() if a.get("outcome") != "ok" or not a.get("record")}
    if unwell or set(pre) != set(batch):
        for host in batch:
            state["hosts"][host].update(state="not promoted: its original failed its watch" if host in unwell
                                        else "not started", why=unwell.get(host))
        return None
    for host in batch:  # kept before anything changes: a resumed promotion judges against this window
        state["hosts"][host]["original_window"] = pre[host].get("record_path")
    return pre


def _stored_windows(state, batch):
    """The originals' windows an interrupted batch kept (resume): {host: {"record": its bake.json}}."""
    kept = {h: Path(state["hosts"][h].get("original_window") or "") for h in batch}
    return {h: {"record": json.loads(path.read_text())} for h, path in kept.items() if path.is_file()}


def _batch(state, plan, n, batch, steps, evidence, say):
    """One batch: its originals watched, promoted, baked and judged; rolled back when any failed. True: it passed.
    A batch an interrupted promotion left promoting or baking goes on from its promotion, against the originals'
    windows it kept (promote.yml finds a finished promotion in place and changes nothing)."""
    promote, bake, rollback, read = steps

    def save_state():
        save(folder_of(evidence, plan["run_id"]), state)

    begun = any(state["hosts"][h]["state"] in ("promoting", "baking") for h in batch)
    pre = _stored_windows(state, batch) if begun else _watch_originals(state, plan, n, batch, bake, save_state, say)
    if pre is None:
        return False
    say(f"fleet promotion: batch {n}: {'promoting again (resumed)' if begun else 'promoting'} {', '.join(batch)}")
    for host in batch:
        state["hosts"][host]["state"] = "promoting"
    save_state()
    mark(state, batch, promote(batch), "baking", "promotion failed, restored")
    save_state()
    baking = [h for h in batch if state["hosts"][h]["state"] == "baking"]
    if baking:
        say(f"fleet promotion: batch {n}: baking {', '.join(baking)} for {plan['bake_s']:g} s")
        post = bake(baking, "promoted")
        mark(state, baking, post, "passed", "bake failed")
        _judge_metrics(state, baking, pre, post, plan, evidence, read)
    failed = [h for h in batch if state["hosts"][h]["state"] in ("bake failed", "promotion failed, restored")]
    if failed and baking:  # the hosts this batch promoted: each gets its previous original back
        _roll_back(state, baking, rollback, say, n)
    return not failed


def _interrupted(folder, plan):
    """The state an interrupted promotion of this very plan left (its controller lost), else None. One of another
    plan is refused: its hosts may be promoted, and only its own approval goes on with them."""
    path = folder / "state.json"
    if not path.is_file():
        return None
    state = json.loads(path.read_text())
    if state.get("ended") != "running":
        return None
    if state.get("plan_id") != plan["plan_id"]:
        raise PromotionError(f"an interrupted promotion of plan {state.get('plan_id')} is in {folder} (" +
                             states_text(state) + "): resume it "
                             "with --approve " + str(state.get("plan_id")) + " and the options it was planned with, "
                             "or roll its hosts back first")
    return state


def _start(folder, plan, say):
    """The state to carry the plan out from: an interrupted promotion's of this plan (resumed), else a new one (a
    finished promotion's sealed folder set aside first)."""
    state = _interrupted(folder, plan)
    if state:
        say(f"fleet promotion: resuming plan {plan['plan_id']} where it stopped: {states_text(state)}")
        return state
    _set_aside(folder)
    return {"schema": SCHEMA, "run_id": plan["run_id"], "plan_id": plan["plan_id"], "ended": "running",
            "hosts": {**{h: {"state": "planned", "batch": n} for n, b in enumerate(plan["batches"], 1) for h in b},
                      **{h: {"state": "skipped", "why": why} for h, why in plan["skipped"].items()}}}


def run(plan, evidence, approved, promote, bake, rollback, say=print, read=bake_metrics.prometheus_reading):
    """Carry the plan out; returns the final state. PromotionError when the approval does not name this plan.
    bake(hosts, phase) answers per host with "record" (its bake.json); read: bake_metrics.prometheus_reading."""
    if approved != plan["plan_id"]:
        raise PromotionError(f"the approval names plan {approved!r}, and the plan now is {plan['plan_id']!r} (the "
                             "fleet's evidence changed, or the options differ): look at --dry-run again, then approve "
                             "the plan it shows")
    if not plan["batches"]:
        raise PromotionError("no host of run " + plan["run_id"] + " can be promoted: " +
                             "; ".join(f"{h}: {why}" for h, why in sorted(plan["skipped"].items())))
    folder = folder_of(evidence, plan["run_id"])
    state = _start(folder, plan, say)
    save(folder, state)
    for n, batch in enumerate(plan["batches"], 1):
        if all(state["hosts"][h]["state"] == "passed" for h in batch):
            continue  # baked and passed before the interruption
        passed = _batch(state, plan, n, batch, (promote, bake, rollback, read), evidence, say)
        save(folder, state)
        if not passed:
            state["ended"] = f"stopped at batch {n}"
            break
    else:
        state["ended"] = "every batch passed its bake"
    state["promoted_left"] = [h for h, s in state["hosts"].items() if s["state"] == "passed"]
    for host in (h for batch in plan["batches"] for h in batch):
        if state["hosts"][host]["state"] == "planned":
            state["hosts"][host]["state"] = "not started"
    save(folder, state)
    evidence_tool.seal(folder)  # the record of a finished promotion, checked by bin/evidence verify like a run's
    state["folder"] = str(folder)
    return state
