"""The plan executor: a plan's candidates in its order, each gated, unattended.

Each candidate is its own candidate.yml run (through ansible-runner) against the current
original, so no fact of one candidate's run can leak into the next, and each differs from the
original by its one control, never stacked. The plan's state is kept on the controller after
every step (<evidence>/plan-<name>-<sha>/state.json): a re-run skips candidates already decided
for the same originals (the unit file's sha256 on every host) and continues; a run killed with
a candidate under way is rolled back first (rollback.yml), then that candidate runs again; a
changed original starts the plan over. The report (report.json, report.md) says per candidate
which evidence met its prerequisites, its outcome and decision, predicted against measured
effect, its evidence and the GPU time it took, and the promotion order it recommends.
Promotion stays a separate human step (promote.yml).
"""

import hashlib
import json
import time
from pathlib import Path

from serving_rollout import evidence as evidence_files
from serving_rollout import proposal
from serving_rollout.candidate_plan import EVIDENCE_TEXT, PlanError, candidate_plan_errors
from serving_rollout.fleet import new_run_id
from serving_rollout.module_utils import controls

REPO = Path(__file__).resolve().parent.parent

SCHEMA = "serving-rollout.plan-report/v1"
POLICIES = ("stop", "skip-dependents")
# A candidate's outcome over its hosts: the worst one decides.
RANK = ["acceptable", "not acceptable", "refused", "failed, restored", "failed, NOT restored", "interrupted", "started",
        "not-started"]


def _setting(entry):
    """A plan entry's setting of its control: "value" (a catalog control's value) or "control"."""
    return entry.get("value", entry.get("control"))


def plan_problems(plan):
    """Every reason to refuse a plan before any change: schema errors (with their paths), ids the
    catalog does not hold, an order that breaks a control's own order (the catalog's "after"), a
    candidate without the setting it needs or with a bad one, a custom one without its proof."""
    problems = candidate_plan_errors(plan)
    if problems:
        return problems
    for n, entry in enumerate(plan["ordered_candidates"]):
        cid, where = entry["id"], f"$.ordered_candidates[{n}]"
        if cid != controls.CUSTOM and cid not in controls.BY_ID:
            problems.append(f"{where}.id: {cid!r} is not in the controls catalog ({', '.join(controls.ids())}, custom)")
            continue
        try:
            if cid == controls.CUSTOM:
                controls.custom_change(entry.get("control"))
            else:  # the value rules are the same for every engine; the engine is known only on the host
                controls.change_for(cid, next(iter(controls.entry(cid).get("set") or {"sglang": None})),
                                    _setting(entry))
        except controls.ControlError as exc:
            problems.append(f"{where}: {exc}")
        earlier = {controls.group(e["id"]) for e in plan["ordered_candidates"][:n]
                   if e["id"] == controls.CUSTOM or e["id"] in controls.BY_ID}
        for needed in controls.after(cid):
            if needed not in earlier and not _met_on_the_host(entry):
                problems.append(f"{where}: {cid} needs a {needed} candidate decided before it, and the plan has "
                                "none earlier")
    return problems


def _still_unmet(prerequisite, captures):
    """The hosts on which an unmet host change is still unmet by their newest capture (a host without a capture,
    or a prerequisite naming no fact, cannot be re-checked and counts as unmet)."""
    fact = prerequisite.get("fact")
    return [host for host, capture in sorted(captures.items())
            if not fact or capture is None or fact in {c["fact"] for c in proposal.host_changes(capture)}]


def host_change_refusals(plan, captures, say=print):
    """Why the plan must not run (a list, empty when it may): every entry with an unmet host change that the newest
    capture of a host still shows, and every prerequisite the plan marks UNMET in prose a machine cannot check.
    captures: {host: latest capture or None}. A host change a newer capture shows met is said, not refused."""
    refusals = []
    for n, entry in enumerate(plan["ordered_candidates"]):
        for prerequisite in entry.get("prerequisites") or []:
            where = f"$.ordered_candidates[{n}] ({entry['id']})"
            if isinstance(prerequisite, str):
                if "UNMET" in prerequisite:
                    refusals.append(f"{where}: prerequisite {prerequisite!r} is UNMET, in prose no machine can "
                                    "check: meet it, then write it as {kind, what, met} (schemas/candidate-plan)")
                continue
            if prerequisite.get("kind") != "host-change" or prerequisite.get("met"):
                continue
            hosts = _still_unmet(prerequisite, captures)
            if not hosts:
                say(f"plan: {entry['id']}: the host change {prerequisite.get('what')!r} is met by every host's newest "
                    "capture (changed since the proposal)")
                continue
            refusals.append(f"{where}: unmet host change on {', '.join(hosts)}: {prerequisite.get('what')} "
                            f"({prerequisite.get('to_do', 'a human changes the host first')})")
    return refusals


def _met_on_the_host(entry):
    """The evidence of a met 'transport stable' prerequisite the proposal read on the host (the engine's own NCCL
    lines), or None: such an entry needs no transport candidate before it."""
    return next((p.get("evidence") for p in entry.get("prerequisites") or [] if isinstance(p, dict)
                 and p.get("need") == "transport_stable" and p.get("met")), None)


def worst(outcomes):
    return max(outcomes, key=lambda o: RANK.index(o) if o in RANK else len(RANK)) if outcomes else "not-started"


def plan_evidence(state, cid, entry=None):
    """Evidence the plan itself provides: `transport_stable`, met by an earlier transport
    candidate (the catalog's group) decided acceptable in this plan for the same originals, or by the host's own
    NCCL lines as the proposal read them (the entry's met prerequisite)."""
    host = _met_on_the_host(entry or {})
    if host:
        return {"transport_stable": host}
    for other, entry in state["candidates"].items():
        if other != cid and controls.group(other) == "transport" and entry.get("status") == "decided" \
                and entry.get("outcome") == "acceptable":
            return {"transport_stable": f"{other} acceptable (run {entry['run_id']})"}
    return {}


def blocked_by(plan, state, cid, policy):
    """Why cid must not run now (a string), or None. stop: any earlier candidate that did not
    pass; skip-dependents: only one this candidate depends on."""
    for entry in plan["ordered_candidates"]:
        other = entry["id"]
        if other == cid:
            return None
        decided = state["candidates"].get(other) or {}
        failed = decided.get("status") in ("decided", "skipped") and decided.get("outcome") != "acceptable"
        if not failed:
            continue
        if policy == "stop":
            return f"{other} ended {decided.get('outcome')!r} (policy stop)"
        if controls.group(other) in controls.after(cid) and not plan_evidence(state, cid):
            return f"it depends on a {controls.group(other)} candidate and {other} ended {decided.get('outcome')!r}"
    return None


def new_state(plan_sha, originals):
    return {"schema": "serving-rollout.plan-state/v1", "plan_sha256": plan_sha, "originals": originals,
            "candidates": {}, "history": []}


def candidate_record(cid, run_id, hosts, evidence_dir):
    """A decided candidate from its fleet records and run directories."""
    per_host = []
    for host in hosts:
        run = Path(evidence_dir) / host["host"] / f"rollout-{run_id}"
        decision = json.loads((run / "decision.json").read_text()) if (run / "decision.json").exists() else {}
        recipes = json.loads((run / "recipes.json").read_text()) if (run / "recipes.json").exists() else {}
        tp = (recipes.get("original") or {}).get("tp_size")
        seconds = host.get("duration_s") or 0.0
        per_host.append({
            "host": host["host"], "outcome": host["outcome"], "verdict": host.get("verdict"),
            "reasons": decision.get("reasons") or host.get("decision"), "failure": host.get("failure"),
            "evidence": str(run) if run.exists() else None, "duration_s": seconds,
            "gpu_seconds": round(seconds * int(tp), 1) if str(tp or "").isdigit() else None,
            "predicted_vs_measured": decision.get("predicted_vs_measured"),
            "prerequisites_met_by": (recipes.get("evidence_used") or {})})
    outcome = worst([h["outcome"] for h in per_host if h["outcome"] != "not-started"] or ["not-started"])
    return {"status": "decided", "outcome": outcome, "run_id": run_id, "hosts": per_host,
            "gpu_seconds": round(sum(h["gpu_seconds"] or 0 for h in per_host), 1)}


def report(plan, plan_path, state, policy):
    rows = []
    for entry in plan["ordered_candidates"]:
        cid = entry["id"]
        record = state["candidates"].get(cid) or {"status": "not run"}
        rows.append({"id": cid, "change": entry.get("change"), "gate": entry.get("gate"),
                     "requires": [EVIDENCE_TEXT[r] for r in controls.requires(cid)],
                     **record})
    order = [r["id"] for r in rows if r.get("outcome") == "acceptable"]
    return {"schema": SCHEMA, "plan": str(plan_path), "plan_sha256": state["plan_sha256"], "policy": policy,
            "originals": state["originals"], "candidates": rows, "history": state["history"],
            "recommended_promotion_order": order,
            "promotion": "a separate human step: promote.yml with one run id at a time, then run the plan "
                         "again against the new original"}


def recommended(doc):
    """The report's rows of the candidates it recommends promoting, in its order (each with its run id)."""
    return [row for row in doc["candidates"] if row["id"] in doc["recommended_promotion_order"]]


def assumed_prerequisites(hosts):
    """The prerequisites the inventory assumed rather than observed for a candidate's hosts."""
    return sorted({k for h in hosts for k, v in (h["prerequisites_met_by"].get("assumed") or {}).items() if v})


def render_markdown(doc):
    lines = [f"# Plan report: {doc['plan']}", "", f"Policy: {doc['policy']}. Originals (unit sha256): "
             + ", ".join(f"{h} {s[:12]}" for h, s in sorted(doc["originals"].items())) + ".", "",
             "| # | candidate | status | outcome | prerequisites met by | predicted vs measured | GPU time "
             "| evidence |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for n, row in enumerate(doc["candidates"], 1):
        hosts = row.get("hosts") or []
        met = "; ".join(sorted({f"{k}: {'observed' if v is True else v}" for h in hosts
                                for k, v in (h["prerequisites_met_by"].get("observed") or {}).items() if v}
                               | {f"{k}: ASSUMED by the inventory, not observed"
                                  for k in assumed_prerequisites(hosts)}))
        pvm = "; ".join(str(h["predicted_vs_measured"]) for h in hosts if h.get("predicted_vs_measured")) or "-"
        note = row.get("reason") or "; ".join([*(r for h in hosts for r in (h.get("reasons") or [])[:2]),
                                               *(f"{h['host']}: {h['failure']}" for h in hosts if h.get("failure")
                                                 and not h.get("reasons"))])
        gpu = f"{row['gpu_seconds']} GPU-s" if row.get("gpu_seconds") is not None else "-"
        lines.append(f"| {n} | {row['id']} | {row['status']} | {row.get('outcome') or ''} {note} | "
                     f"{met or '-'} | {pvm} | {gpu} | {', '.join(h['evidence'] or '' for h in hosts) or '-'} |")
    lines += ["", "Recommended promotion order: " + (", ".join(f"{row['id']} (run {row['run_id']})"
                                                            for row in recommended(doc)) or "none")
              + f". {doc['promotion'][0].upper()}{doc['promotion'][1:]}.", ""]
    return "\n".join(lines)


def save(folder, state, plan, plan_path, policy):
    folder.mkdir(parents=True, exist_ok=True)
    doc = report(plan, plan_path, state, policy)
    for name, text in (("state.json", json.dumps(state, indent=2, sort_keys=True) + "\n"),
                       ("report.json", json.dumps(doc, indent=2, sort_keys=True) + "\n"),
                       ("report.md", render_markdown(doc))):
        tmp = folder / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(folder / name)
    return doc


def load_plan(plan_path):
    """The plan's text and document, refused with every problem before any change."""
    text = Path(plan_path).read_text()
    try:
        plan = json.loads(text)
    except ValueError as exc:
        raise PlanError(f"plan file {plan_path} is not valid JSON: {exc}") from None
    problems = plan_problems(plan)
    if problems:
        raise PlanError(f"plan {plan_path} refused before any change: " + "; ".join(problems))
    return text, plan


def resumed_state(folder, plan_sha, originals, rollback, say):
    """The plan's state for these originals: started over when an original changed since its decisions, and the
    candidate that was under way when the last run stopped rolled back and run again."""
    state_path = folder / "state.json"
    state = json.loads(state_path.read_text()) if state_path.exists() else new_state(plan_sha, originals)
    if state["originals"] != originals:
        changed = sorted(h for h in set(originals) | set(state["originals"])
                         if originals.get(h) != state["originals"].get(h))
        say(f"plan: the original changed on {', '.join(changed)} since the plan's decisions: starting over")
        history = state["history"] + [{"at": time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()),
                                       "event": f"original changed on {', '.join(changed)}: started over",
                                       "previous": state["candidates"]}]
        state = new_state(plan_sha, originals)
        state["history"] = history
    running = [cid for cid, c in state["candidates"].items() if c.get("status") == "running"]
    if running:
        say(f"plan: {running[0]} was under way when the last run stopped: rolling back first")
        rollback()
        state["history"].append({"at": time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()),
                                 "event": f"{running[0]} interrupted; rolled back; runs again"})
        del state["candidates"][running[0]]
    return state


def candidate_extravars(entry, plan_path, state):
    """What one candidate's run is told: its id, the plan, the evidence of its dependencies, its control."""
    cid = entry["id"]
    extravars = {"serving_recipe_candidate_id": cid, "serving_recipe_plan_file": str(Path(plan_path).resolve()),
                 "serving_recipe_plan_evidence": plan_evidence(state, cid, entry)}
    if isinstance(entry.get("control"), dict):
        extravars["serving_recipe_custom_change"] = entry["control"]
    if "value" in entry:
        extravars["serving_recipe_control_value"] = entry["value"]
    if entry.get("accept_kv_loss") is True:  # the plan accepts fewer KV tokens for this one (recorded)
        extravars["rollout_kv_loss_accepted"] = True
    return extravars


def run_plan(plan_path, evidence, identities, run_candidate, rollback, policy="stop", say=print):
    """Run the plan. identities() -> {host: unit sha256}; run_candidate(cid, run_id, extravars) ->
    [host records of the fleet summary]; rollback() restores every host. Returns the report."""
    if policy not in POLICIES:
        raise PlanError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    text, plan = load_plan(plan_path)
    plan_sha = hashlib.sha256(text.encode()).hexdigest()
    folder = Path(evidence) / f"plan-{Path(plan_path).stem}-{plan_sha[:12]}"
    originals = identities()
    captures = {host: evidence_files.latest_capture(Path(evidence) / host) for host in originals}
    refusals = host_change_refusals(plan, captures, say)
    if refusals:
        raise PlanError("the plan is refused before any change: " + "; ".join(refusals))
    state = resumed_state(folder, plan_sha, originals, rollback, say)
    save(folder, state, plan, plan_path, policy)
    for entry in plan["ordered_candidates"]:
        cid = entry["id"]
        done = state["candidates"].get(cid)
        if done and done["status"] in ("decided", "skipped"):
            say(f"plan: {cid} already {done['status']} for these originals ({done.get('outcome')}): skipped")
            continue
        reason = blocked_by(plan, state, cid, policy)
        if reason and policy == "stop":
            say(f"plan: stopping before {cid}: {reason}")
            break
        if reason:
            state["candidates"][cid] = {"status": "skipped", "outcome": "not run", "reason": reason}
            save(folder, state, plan, plan_path, policy)
            say(f"plan: {cid} skipped: {reason}")
            continue
        run_id = new_run_id()
        state["candidates"][cid] = {"status": "running", "run_id": run_id}
        save(folder, state, plan, plan_path, policy)
        say(f"plan: {cid} (run {run_id})")
        extravars = candidate_extravars(entry, plan_path, state)
        hosts = run_candidate(cid, run_id, extravars)
        state["candidates"][cid] = candidate_record(cid, run_id, hosts, evidence)
        save(folder, state, plan, plan_path, policy)
        say(f"plan: {cid} {state['candidates'][cid]['outcome']}")
        assumed = assumed_prerequisites(state["candidates"][cid]["hosts"])
        if assumed:
            say(f"plan: {cid} ran on prerequisites the inventory ASSUMED, not observed: {', '.join(assumed)} "
                "(serving_recipe_assumed_evidence)")
    doc = save(folder, state, plan, plan_path, policy)
    doc["folder"] = str(folder)
    return doc
