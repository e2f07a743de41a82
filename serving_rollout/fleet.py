"""A fleet run on the controller: canary then batches, stop at the first host that does not pass.

Every host of a run has one record in <evidence>/fleet-<run_id>/hosts/<host>.json; the summary
(summary.json, summary.md) and the run's entry in <evidence>/index.json are rendered again from
the records after every change, under one lock, so they are current even when the playbook stops.

  begin EVIDENCE RUN_ID ALL_HOSTS BATCH_HOSTS   (comma-separated host lists)
        before a batch touches anything: if a host of an earlier batch did not pass (or never
        finished: killed or unreachable), the batch is not started (its hosts are recorded
        not-started) and {"stop": true, ...} is printed; else its hosts are recorded started
  record EVIDENCE RUN_ID HOST   (the host's outcome as JSON on stdin)
  lost EVIDENCE RUN_ID HOST     (why, as text on stdin) a host whose row still says started - its run was
        killed, and a rollback took its lock over - is recorded lost; any other row is left as it is
  summary EVIDENCE RUN_ID       print summary.json
"""

import fcntl
import json
import secrets
import time
from contextlib import contextmanager
from pathlib import Path

SCHEMA = "serving-rollout.fleet-summary/v1"
# What a host's run ended as; only "acceptable" lets the next batch start.
OUTCOMES = ("acceptable", "not acceptable", "refused", "failed, restored", "failed, NOT restored",
            "interrupted", "started", "not-started")
PASSING = ("acceptable",)


def new_run_id(prefix=""):
    """A run id unique per run: the UTC second and a random tail (two runs in the same second never share their
    fleet, runner, capture or evidence folders). playbooks/tasks/run_id.yml makes the same shape."""
    return f"{prefix}{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{secrets.token_hex(2)}"


def outcome_of(record):
    """The outcome of a host's rollout from the facts the rollout role leaves.

    record: failure (str or None), entered_candidate_phase (bool), restored (bool), decision
    (the A/B decision dict or None)."""
    if record.get("interrupted"):  # the controller was stopped mid-run (callback_plugins/interrupted.py)
        return "interrupted"
    if record.get("lost"):  # the controller lost the host mid-run; its watchdog holds the duty
        return "lost"
    if record.get("failure"):
        if not record.get("entered_candidate_phase"):
            return "refused"
        return "failed, restored" if record.get("restored") else "failed, NOT restored"
    decision = (record.get("decision") or {}).get("decision")
    return "acceptable" if decision == "acceptable" else "not acceptable"


def stop_reason(records, batch):
    """The first earlier-batch host that did not pass, as (host, outcome), or None."""
    for host, record in sorted(records.items(), key=lambda item: item[1].get("started_at") or ""):
        if host in batch or record["outcome"] == "not-started":
            continue
        if record["outcome"] not in PASSING:
            return host, record["outcome"]
    return None


def summary(run_id, all_hosts, records):
    """Every host of the run in inventory order, with its outcome (never reached: not-started)."""
    hosts = []
    for host in all_hosts:
        record = records.get(host, {"outcome": "not-started"})
        hosts.append({"host": host, "outcome": record["outcome"],
                      "verdict": record.get("verdict"), "decision": record.get("decision_reasons"),
                      "evidence": record.get("evidence"), "duration_s": record.get("duration_s"),
                      "failure": record.get("failure"), "stopped_by": record.get("stopped_by")})
    counts = {}
    for host in hosts:
        counts[host["outcome"]] = counts.get(host["outcome"], 0) + 1
    stopped = next((h for h in hosts if h["outcome"] not in PASSING + ("started", "not-started")), None)
    return {"schema": SCHEMA, "run_id": run_id, "hosts": hosts, "counts": counts,
            "stopped_at": stopped["host"] if stopped else None}


def render_markdown(doc):
    lines = [f"# Fleet run {doc['run_id']}", ""]
    if doc["stopped_at"]:
        lines += [f"Stopped at **{doc['stopped_at']}**: hosts after it were not touched.", ""]
    lines += ["| host | outcome | verdict | evidence | duration | note |", "| --- | --- | --- | --- | --- | --- |"]
    for h in doc["hosts"]:
        note = h["failure"] or (f"not started: {h['stopped_by']} did not pass" if h["stopped_by"] else "") \
            or ("; ".join(h["decision"] or []) if h["outcome"] == "not acceptable" else "")
        duration = f"{h['duration_s']:.0f} s" if isinstance(h["duration_s"], (int, float)) else ""
        lines.append(f"| {h['host']} | {h['outcome']} | {h['verdict'] or ''} | {h['evidence'] or ''} | {duration} "
                     f"| {note.replace('|', '/')[:300]} |")
    return "\n".join(lines) + "\n"


@contextmanager
def locked(evidence):
    """One writer at a time: hosts of a batch finish in parallel."""
    Path(evidence).mkdir(parents=True, exist_ok=True)
    with open(Path(evidence) / ".fleet.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def write_json(path, doc):
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def load_records(fleet):
    return {p.stem: json.loads(p.read_text()) for p in sorted((fleet / "hosts").glob("*.json"))}


def refresh(evidence, run_id, records, all_hosts):
    fleet = Path(evidence) / f"fleet-{run_id}"
    doc = summary(run_id, all_hosts, records)
    write_json(fleet / "summary.json", doc)
    (fleet / "summary.md").write_text(render_markdown(doc))
    index_path = Path(evidence) / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {"runs": []}
    fleets = [f for f in index.get("fleets", []) if f["run_id"] != run_id]
    fleets.append({"run_id": run_id, "path": f"fleet-{run_id}", "stopped_at": doc["stopped_at"],
                   "hosts": {h["host"]: h["outcome"] for h in doc["hosts"]}})
    index["fleets"] = fleets
    write_json(index_path, index)
    return doc


def begin(evidence, run_id, all_hosts, batch):
    fleet = Path(evidence) / f"fleet-{run_id}"
    (fleet / "hosts").mkdir(parents=True, exist_ok=True)
    write_json(fleet / "hosts.json", {"hosts": all_hosts})
    records = load_records(fleet)
    reason = stop_reason(records, batch)
    now = time.time()
    for host in batch:
        record = {"host": host, "outcome": "not-started" if reason else "started", "started_at": f"{now:.3f}"}
        if reason:
            record["stopped_by"] = reason[0]
        write_json(fleet / "hosts" / f"{host}.json", record)
        records[host] = record
    refresh(evidence, run_id, records, all_hosts)
    return {"stop": bool(reason), "stopped_by": reason[0] if reason else None,
            "outcome": reason[1] if reason else None}


def record(evidence, run_id, host, facts):
    fleet = Path(evidence) / f"fleet-{run_id}"
    records = load_records(fleet)
    started = float((records.get(host) or {}).get("started_at") or time.time())
    decision = facts.get("decision") or {}
    doc = {"host": host, "outcome": outcome_of(facts), "started_at": f"{started:.3f}",
           "duration_s": round(time.time() - started, 1), "verdict": decision.get("decision"),
           "decision_reasons": decision.get("reasons"),
           # only a folder that exists (a run refused before its evidence has none to link to)
           "evidence": facts.get("evidence") if facts.get("evidence") and Path(facts["evidence"]).is_dir() else None,
           "failure": facts.get("failure")}
    write_json(fleet / "hosts" / f"{host}.json", doc)
    records[host] = doc
    all_hosts = json.loads((fleet / "hosts.json").read_text())["hosts"]
    refresh(evidence, run_id, records, all_hosts)
    return doc


def mark_lost(evidence, run_id, host, why):
    """A killed run's host row that still says started, recorded lost with why; None when there is no such row
    (not a fleet run here, or the row already ended: interrupted, refused, an outcome)."""
    fleet = Path(evidence) / f"fleet-{run_id}"
    if not (fleet / "hosts.json").exists() or (load_records(fleet).get(host) or {}).get("outcome") != "started":
        return None
    return record(evidence, run_id, host, {"lost": True, "failure": why})
