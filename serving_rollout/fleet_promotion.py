"""A fleet run's control promoted across the fleet: canary host(s), then batches, each batch baked (playbooks/bake.yml)
before the next is touched; a batch whose bake fails is rolled back (rollback.yml's exact, proven restore) and the
promotion stops there. A host is promoted only on its own acceptable, sealed run of that fleet run (promote.yml then
checks the original it runs now is the one that run measured, and takes the host's lock); the others are listed
and skipped. One human approval covers the plan as shown by --dry-run: the approval names the plan's id.

Outside a play: the plan comes from the evidence folder, the steps run through callbacks (bin/serving-rollout's
ansible-runner), each taking a list of hosts and answering {host: {"outcome": ok|refused|failed, "why": ...}}.
The state is kept in <evidence>/fleet-promotion-<run id>/ (state.json, report.md) after every step."""

import hashlib
import json
from pathlib import Path

from serving_rollout import evidence as evidence_tool
from serving_rollout import fleet

SCHEMA = "serving-rollout.fleet-promotion/v1"
RULES = ("a host is promoted only on its own acceptable, sealed run of this fleet run, against the original that run "
         "measured (promote.yml refuses another, taking the host's lock)",
         "a batch is promoted only after every host of the batch before it passed its bake",
         "a bake fails when the unit leaves active, restarts or begins another invocation, when its smoke completion "
         "fails twice in a row, or when its journal shows a crash",
         "a failed bake rolls its whole batch back (rollback.yml's restore, proven) and stops the promotion; earlier "
         "batches stay promoted, listed with the command that rolls them back")


class PromotionError(Exception):
    """A fleet promotion refused before any change, with why."""


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


def plan_of(evidence, run_id, canary=1, batch_size=1, bake_s=600.0):
    """The fleet promotion's plan: the fleet run's hosts in its order, batches of the promotable ones (canary first),
    the skipped ones with why, the bake and the rules; plan_id names it (what the approval must name)."""
    if canary < 1 or batch_size < 1 or bake_s <= 0:
        raise PromotionError(f"canary and batch size must be at least 1 and the bake above 0 s, got {canary}, "
                             f"{batch_size} and {bake_s}")
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
            "bake_s": float(bake_s), "rules": list(RULES)}
    plan["plan_id"] = hashlib.sha256(json.dumps(plan, sort_keys=True).encode()).hexdigest()[:12]
    return plan


def plan_lines(plan):
    """The plan for a person (--dry-run)."""
    lines = [f"fleet promotion of run {plan['run_id']}, plan {plan['plan_id']}:"]
    lines += [f"  batch {n} ({'canary' if n == 1 else 'batch'}): {', '.join(batch)}; then a {plan['bake_s']:g} s bake"
              for n, batch in enumerate(plan["batches"], 1)]
    lines += [f"  skipped {host}: {why}" for host, why in sorted(plan["skipped"].items())]
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


def run(plan, evidence, approved, promote, bake, rollback, say=print):
    """Carry the plan out; returns the final state. PromotionError when the approval does not name this plan."""
    if approved != plan["plan_id"]:
        raise PromotionError(f"the approval names plan {approved!r}, and the plan now is {plan['plan_id']!r} (the "
                             "fleet's evidence changed, or the options differ): look at --dry-run again, then approve "
                             "the plan it shows")
    if not plan["batches"]:
        raise PromotionError("no host of run " + plan["run_id"] + " can be promoted: " +
                             "; ".join(f"{h}: {why}" for h, why in sorted(plan["skipped"].items())))
    folder = Path(evidence) / f"fleet-promotion-{plan['run_id']}"
    state = {"schema": SCHEMA, "run_id": plan["run_id"], "plan_id": plan["plan_id"], "ended": "running",
             "hosts": {**{h: {"state": "planned", "batch": n} for n, b in enumerate(plan["batches"], 1) for h in b},
                       **{h: {"state": "skipped", "why": why} for h, why in plan["skipped"].items()}}}
    save(folder, state)
    for n, batch in enumerate(plan["batches"], 1):
        say(f"fleet promotion: batch {n} of {len(plan['batches'])}: promoting {', '.join(batch)}")
        mark(state, batch, promote(batch), "baking", "promotion failed, restored")
        save(folder, state)
        baking = [h for h in batch if state["hosts"][h]["state"] == "baking"]
        if baking:
            say(f"fleet promotion: batch {n}: baking {', '.join(baking)} for {plan['bake_s']:g} s")
            mark(state, baking, bake(baking), "passed", "bake failed")
            save(folder, state)
        failed = [h for h in batch if state["hosts"][h]["state"] in ("bake failed", "promotion failed, restored")]
        if failed:
            if baking:  # the hosts this batch promoted: each gets its previous original back
                say(f"fleet promotion: batch {n} failed ({', '.join(failed)}): rolling back {', '.join(baking)}")
                causes = {h: state["hosts"][h].get("why") for h in baking}
                mark(state, baking, rollback(baking), "rolled back", "rollback FAILED")
                for host in baking:  # the bake's cause stays beside the rollback's outcome
                    state["hosts"][host]["why"] = "; ".join(w for w in (causes[host], state["hosts"][host].get("why"))
                                                            if w)
            state["ended"] = f"stopped at batch {n}"
            break
    else:
        state["ended"] = "every batch passed its bake"
    state["promoted_left"] = [h for h, s in state["hosts"].items() if s["state"] == "passed"]
    for host in (h for batch in plan["batches"] for h in batch):
        if state["hosts"][host]["state"] == "planned":
            state["hosts"][host]["state"] = "not started"
    save(folder, state)
    state["folder"] = str(folder)
    return state
