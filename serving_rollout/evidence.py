"""Run directories on the controller: decision record, result card, plot, manifest, index.

  finalize RUN_DIR   write decision.json, result-card.md, cells.png, then manifest.json, and
                     add the run to <evidence>/index.json (never overwriting a finalized run)
  card RUN_DIR       print the result card re-rendered from the run directory
  verify RUN_DIR     check every file against manifest.json (and its seal, when there is one);
                     exit 1 naming each changed file
  trust RUN_DIR      what promotion acts on: verify, the seal required, the index's verdict the
                     same as decision.json's; prints {verdict, promotion_allowed, decision_sha256}
                     or exits 1 naming every problem
  check-dir DIR MIN_FREE_MIB
                     before any change: DIR is writable and has MIN_FREE_MIB free
  predict HOST_DIR MIN_EFFECT [DECODE_MS_PER_TOKEN]
                     the decode-size probe's prediction for this host (its newest peer-path
                     evidence) against the A/B's minimum effect, before GPU time is spent;
                     the baseline's time per token comes from the argument or the host's
                     newest finished rollout
"""

import hashlib
import hmac
import json
import os
import secrets
import statistics
import sys
from pathlib import Path

from serving_rollout import fleet  # the lock and the atomic writer of index.json
from serving_rollout.module_utils import decode_model, engine_metrics
from serving_rollout.module_utils.host_files import free_mib
from serving_rollout.play import capacity  # pure, shared with the hosts' modules

DECISION_SCHEMA = "serving-rollout.decision/v1"
MANIFEST = "manifest.json"
# The seal: an HMAC of manifest.json with a key the controller keeps outside the evidence tree.
# Whoever can write an evidence folder (a shared store, a copied artifact) but cannot read that
# key cannot recompute it after editing a file and its hash. It does not defend against the
# controller's own user; the host's record of the decision (promotion checks both) does.
SEAL = "manifest.hmac"
KEY_ENV = "SERVING_ROLLOUT_EVIDENCE_KEY"
ARMS = ("baseline-1", "candidate", "baseline-2")  # the bracket, in the order it ran


def load(run, name, default=None):
    path = Path(run) / name
    return json.loads(path.read_text()) if path.exists() else default


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def decision_record(run):
    outcome = load(run, "outcome.json", {})
    verdict = load(run, "ab-verdict.json", {}).get("decision", {"decision": "inconclusive", "reasons": []})
    reasons = list(verdict.get("reasons", []))
    if outcome.get("failure"):
        reasons.insert(0, f"candidate failed: {outcome['failure']}")
    if not outcome.get("restored"):
        reasons.insert(0, "restoration not proven")
    final = verdict.get("decision", "inconclusive") if not outcome.get("failure") else "reject"
    kv = kv_capacity(run)
    if kv and kv["verdict"] != "unknown":
        reasons.append(kv["reason"])
    if kv and kv["verdict"] == "lost" and not kv["accepted"]:
        final = "reject"  # fewer tokens fit: under load it serves fewer requests, whatever its latency
    same = numerics(run)
    if same and same.get("original_self") and same["original_self"]["verdict"] == "fail":
        reasons.append(same["reason"])
        if final == "acceptable":  # the host's numbers move with no change: the candidate's cannot be judged
            final = "inconclusive"
    return {"schema": DECISION_SCHEMA, "run_id": outcome.get("run_id"), "host": outcome.get("host"),
            "candidate_id": outcome.get("candidate_id"), "verdict": final, "rule": verdict.get("rule"),
            "method": verdict.get("method"), "requests_per_arm": requests_per_arm(run),
            "reasons": reasons, "restored": bool(outcome.get("restored")),
            "promotion_allowed": final == "acceptable" and bool(outcome.get("restored")),
            "promotion": "a separate, explicit human step (promote.yml with the run id)",
            "predicted_vs_measured": (load(run, "prediction.json") or {}).get("comparison"),
            "kv_capacity": kv, "numerics": same, "single_stream_decode_tps": single_stream_decode(run),
            "cells_under_load": cells_under_load(run), "speculation": speculation(run),
            "endurance": (load(run, "endurance.json") or {}).get("verdict"),
            "versions": versions(run)}


def _figures(record):
    comparison = (record or {}).get("comparison") or {}
    return {"verdict": record.get("verdict"), "identical": comparison.get("identical"),
            "prompts": comparison.get("prompts"), "agreement": comparison.get("agreement"),
            "first_divergence": comparison.get("first_divergence"),
            "max_logprob_drift": comparison.get("max_logprob_drift"), "reason": record.get("reason")}


def numerics(run):
    """The numerical-equivalence probe (numerics.json): the candidate against the original's greedy
    answers, and the restored original against them (its A/A); None for a run without the probe."""
    record = load(run, "numerics.json") or {}
    if not record.get("enabled") or not record.get("reference"):
        return None
    tolerance = record.get("tolerance")
    out = {"tolerance": tolerance if tolerance not in ("", {}) else None,
           "prompts": record["reference"].get("prompts"), "tokens": record["reference"].get("tokens"),
           "candidate": _figures(record["candidate"]) if record.get("candidate") else None,
           "original_self": _figures(record["restored"]) if record.get("restored") else None}
    candidate, itself = out["candidate"], out["original_self"]
    if candidate is None:
        out["reason"] = "numerics: the candidate was not probed (it failed before its gates passed)"
    elif itself and itself["verdict"] == "fail":
        out["reason"] = (f"numerics not to be trusted on this host: the restored original disagreed with its own "
                         f"reference ({itself['reason']})")
    else:
        out["reason"] = f"numerics {candidate['verdict']}: {candidate['reason']}" + (
            f"; the restored original agreed with itself ({itself['identical']}/{itself['prompts']} identical)"
            if itself else "")
    return out


def versions(run):
    """An engine upgrade's versions on each side as the engines reported them (versions.json); None
    for any other control."""
    record = load(run, "versions.json", {})
    return {key: record.get(key) for key in ("original", "candidate", "delta")} if record.get("candidate") else None


def _percentile(values, q):
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, -(-q * len(ordered) // 100) - 1))]


def cells_under_load(run):
    """{cell: {concurrency, arms: {arm: figures}}} of every cell: the client's output tokens/s (all
    completion tokens over the cell's wall time), TTFT and E2E p50/p90/p99, and the engine's own
    account from /metrics (module_utils/engine_metrics.py) beside them; {} when no cell ran."""
    out = {}
    for arm, cells in load(run, "cells.json", {}).get("arms", {}).items():
        for cell in cells:
            answered = [r for r in cell.get("requests", []) if r.get("error") is None]
            figures = {"requests": len(answered),
                       "output_tps": round(sum(r.get("completion_tokens") or 0 for r in answered)
                                           / cell["elapsed_s"], 1) if cell.get("elapsed_s") else None}
            for key in ("ttft_s", "e2e_s"):
                values = [r[key] for r in answered if isinstance(r.get(key), int | float)]
                figures[key] = {f"p{q}": round(_percentile(values, q), 4) for q in (50, 90, 99)} if values else None
            if cell.get("engine_metrics") is not None:
                figures["engine"] = engine_metrics.figures(cell["engine_metrics"])
            if cell.get("engine_log"):  # what the engine's own log said (accept length without /metrics)
                figures["engine_log"] = cell["engine_log"]
            entry = out.setdefault(cell["name"], {"concurrency": cell.get("concurrency", 1), "arms": {}})
            entry["arms"][arm] = figures
    return out


def speculation(run):
    """A speculative candidate's economics per single-stream cell: the accept length its engine
    reported (/metrics), the verify step it implies (accept length / the candidate's decode tokens/s),
    and the break-even accept length (that step x the baseline's decode tokens/s): speculation pays
    only above it. None for any other control. Whether the baseline had no speculation (the only
    arm a speed-up of speculation may be claimed against) is said too."""
    recipes = load(run, "recipes.json", {})
    change = (recipes.get("change") or {}).get("change") or {}
    if change.get("kind") != "speculative" and change.get("name") != "--speculative-config":
        return None
    args = (recipes.get("original") or {}).get("engine_args") or {}
    out = {"baseline_has_speculation": any(str(flag).startswith("--speculative-") for flag in args), "cells": {}}
    decode = single_stream_decode(run)
    for name, cell in cells_under_load(run).items():
        if cell["concurrency"] != 1:
            continue
        rates = decode.get(name, {})
        baseline = [rates[arm] for arm in ("baseline-1", "baseline-2") if rates.get(arm)]
        accept, source = accept_length(cell["arms"].get("candidate") or {})
        candidate = rates.get("candidate")
        row = {"accept_length": accept, "accept_length_source": source, "candidate_decode_tps": candidate,
               "baseline_decode_tps": round(statistics.mean(baseline), 1) if baseline else None}
        if accept and candidate and baseline:
            step_s = accept / candidate
            row.update(verify_step_ms=round(step_s * 1000, 2), break_even=round(step_s * row["baseline_decode_tps"], 2))
            row["pays"] = accept > row["break_even"]
        else:
            reason = ((cell["arms"].get("candidate") or {}).get("engine") or {}).get("reason")
            row["reason"] = ("the engine reported no accept length, in /metrics or its log"
                             + (f" ({reason})" if reason else "")) if not accept else "no decode rate in an arm"
        out["cells"][name] = row
    return out


def accept_length(figures):
    """(accept length, its source) of an arm's figures: the engine's /metrics first, else its own log line."""
    metrics = (figures.get("engine") or {}).get("accept_length")
    if metrics:
        return metrics, "/metrics"
    logged = ((figures.get("engine_log") or {}).get("accept_length") or {}).get("value")
    return (logged, "engine log") if logged else (None, None)


def single_stream_decode(run):
    """{cell: {arm: median decode tokens/s}} of the cells run one request at a time (the figure an
    operator quotes for a server's speed), from the requests that answered; {} when none ran."""
    out = {}
    for arm, cells in load(run, "cells.json", {}).get("arms", {}).items():
        for cell in cells:
            rates = [r["decode_tps"] for r in cell.get("requests", [])
                     if r.get("error") is None and r.get("decode_tps")]
            if cell.get("concurrency", 1) == 1 and rates:
                out.setdefault(cell["name"], {})[arm] = round(statistics.median(rates), 1)
    return out


def kv_capacity(run):
    """The candidate's KV capacity against the original's (serving_rollout/play/capacity.py), from the
    engines' own reports in capacity.json; None for a run without that record."""
    record = load(run, "capacity.json")
    if not record:
        return None
    policy = record.get("policy") or {}
    limit = {"max_loss": float(policy["kv_max_loss"])} if "kv_max_loss" in policy else {}
    return capacity.kv_judgement(record.get("arms"), accepted=bool(policy.get("kv_loss_accepted")), **limit)


def requests_per_arm(run):
    """Requests each arm spent, over its cells (sequential cells stop early; re-measured chunks
    are counted too, since they were spent)."""
    arms = load(run, "cells.json", {}).get("arms", {})
    return {arm: sum(len(c.get("requests", [])) + sum(len(r.get("e2e_s", [])) for r in c.get("remeasured") or [])
                     for c in cells) for arm, cells in arms.items()}


def latest_capture(host_dir):
    """The newest capture of a host as the proposal reads it ({iommu, nvml, verdict, evidence}), or None."""
    found = sorted(Path(host_dir).glob("capture-*/p2p-support-observation.json"), reverse=True)
    if not found:
        return None
    support = json.loads(found[0].read_text())
    iommu_path = found[0].parent / "iommu-observation.json"
    iommu = json.loads(iommu_path.read_text()).get("iommu") if iommu_path.exists() else None
    return {"iommu": iommu, "nvml": support.get("nvml"), "verdict": support.get("verdict"),
            "evidence": str(found[0].relative_to(Path(host_dir).parent))}


def latest_prediction(host_dir):
    """The newest peer-path observation of a host that carries a decode prediction, or None."""
    for path in sorted(Path(host_dir).glob("peer-path-*/peer-path-observation.json"), reverse=True):
        decode = (json.loads(path.read_text()).get("peer_path") or {}).get("decode") or {}
        if decode.get("prediction"):
            return {"evidence": str(path.relative_to(Path(host_dir).parent)), **decode}
    return None


def baseline_ms_per_token(host_dir):
    """The newest finished rollout's baseline decode time per token (median over its cells)."""
    for run in sorted(Path(host_dir).glob("rollout-*"), reverse=True):
        cells = load(run, "ab-verdict.json", {}).get("cells", [])
        rates = [c["metrics"]["decode_tps"]["baseline"]["median"] for c in cells
                 if c.get("eligible", True) and "decode_tps" in c.get("metrics", {})]
        if rates:
            return {"ms_per_token": 1000.0 / sorted(rates)[len(rates) // 2], "run": run.name}
    return None


def predict_flag(host_dir, min_effect, decode_ms_per_token=None):
    """Whether the candidate's predicted decode gain clears the A/B's minimum effect."""
    prediction = latest_prediction(host_dir)
    if not prediction:
        return {"flag": False, "known": False, "reason": "no peer-path evidence with a decode prediction"}
    baseline = {"ms_per_token": decode_ms_per_token, "run": "given"} if decode_ms_per_token else \
        baseline_ms_per_token(host_dir)
    if not baseline:
        return {"flag": False, "known": False, "prediction": prediction["prediction"],
                "reason": "no baseline decode time per token (no finished rollout, none given)"}
    flag = decode_model.below_min_effect(prediction["prediction"], baseline["ms_per_token"], min_effect)
    return {**flag, "known": True, "baseline": baseline, "evidence": prediction["evidence"],
            "saved_per_token_ms": prediction["prediction"]["saved_per_token_ms"]}


def prediction_record(run):
    """prediction.json of a run: the host's decode prediction beside this run's measured deltas."""
    run = Path(run)
    prediction = latest_prediction(run.parent)
    if not prediction:
        return None
    cells = load(run, "ab-verdict.json", {}).get("cells", [])
    return {"schema": "serving-rollout.prediction/v1", "evidence": prediction["evidence"],
            "source": prediction.get("source"), "call": prediction.get("call"),
            "prediction": prediction["prediction"],
            "comparison": decode_model.compare_with_cells(prediction["prediction"], cells)}


def pct(value):
    return "n/a" if value is None else f"{value * 100:+.1f}%"


def telemetry_text(telemetry):
    """One arm of one cell: NVML readings over all its GPUs and chunks, or why there are none."""
    chunks = telemetry if isinstance(telemetry, list) else [telemetry or {}]
    missing = [c.get("reason") or "no readings" for c in chunks if not c.get("available")]
    if missing or not chunks:
        return f"not recorded ({missing[0] if missing else 'no readings'})"
    gpus = [g for c in chunks for g in (c.get("gpus") or {}).values()]
    if not gpus:
        return "no samples"
    events = sorted({e for g in gpus for e in g.get("clock_events") or []}) or \
        sorted({hex(g["clock_events_mask"]) for g in gpus if g.get("clock_events_mask")})
    sm = [g["sm_mhz"]["median"] for g in gpus]
    return (f"power max {max(g['power_w']['max'] for g in gpus):.0f} W, temperature max "
            f"{max(g['temp_c']['max'] for g in gpus):.0f} C, SM clock medians {min(sm):.0f}-{max(sm):.0f} MHz, "
            f"clock events {', '.join(events) or 'none'}")


def hardware_text(outcome, preflight):
    """GPU model, count and interconnect: as the run recorded them, else from the preflight's
    NVML facts, else why they are unknown."""
    if (outcome.get("hardware") or {}).get("gpus"):
        return outcome["hardware"]["gpus"]
    gpu = next((c.get("observed") or {} for c in preflight.get("checks", [])
                if c.get("check") == "GPU set and count"), {})
    if gpu.get("gpu_models"):
        links = gpu.get("active_nvlinks") or [0]
        link = f"NVLink x{max(links)} per GPU" if max(links) else "no active NVLink (PCIe)"
        return f"{gpu.get('gpu_count')}x {', '.join(gpu['gpu_models'])}, {link}"
    return "not observed (no NVML readings on the host)"


def restoration_text(outcome, restoration):
    after = restoration.get("state_after") or {}
    if not after:
        why = outcome.get("note") or outcome.get("failure") or "no restoration proof was recorded"
        return f"Restoration: not proven ({why})."
    errors = restoration.get("journal_errors") or []
    return (f"Restoration: original {after.get('ActiveState')}/{after.get('UnitFileState')}, NRestarts "
            f"{after.get('NRestarts')}, new invocation {after.get('InvocationID')}, journal errors: "
            f"{('; '.join(map(str, errors)) if isinstance(errors, list) else str(errors)) or 'none'}; "
            f"{len(restoration.get('files', []))} files equal to the snapshot.")


METRIC_WORDS = {"ttft_s": "TTFT", "e2e_s": "E2E", "decode_tps": "decode tokens/s", "output_tps": "output tokens/s"}
EVIDENCE_FOLDERS = {"capture": "capture-*", "peer_path": "peer-path-*"}  # what each assumed prerequisite would be


def rule_text(rule):
    """A verdict rule in words: which metrics must be better, which must not be worse, and any other setting."""
    def metrics(names):
        return " and ".join(METRIC_WORDS.get(name, name) for name in names)

    said = [f"{metrics(rule['need_better'])} better" if rule.get("need_better") else "no metric needs to be better"]
    if rule.get("guard"):
        said.append(f"{metrics(rule['guard'])} not worse")
    said += [f"{key.replace('_', ' ')} {value}" for key, value in rule.items() if key not in ("need_better", "guard")]
    return ", ".join(said)


def setting_text(value, absent):
    """A control's setting as a person reads it: the value itself, or what its absence means."""
    return absent if value is None else str(value)


def counts_text(counts):
    """{'baseline': 0, 'candidate': 2} as 'baseline 0, candidate 2'."""
    return ", ".join(f"{name} {n}" for name, n in counts.items()) if isinstance(counts, dict) else str(counts)


def assumed_text(assumed, host_dir):
    """The prerequisites the inventory assumed, each checked against the host's evidence folder."""
    said = []
    for name in assumed:
        found = sorted(Path(host_dir).glob(EVIDENCE_FOLDERS.get(name, f"{name}-*")))
        said.append(f"{name} (" + (f"this host has {found[-1].name}, which the run did not rely on" if found
                                   else "no such evidence on this host") + ")")
    return ("Prerequisites the inventory assumed (serving_recipe_assumed_evidence), not observed: "
            + "; ".join(said) + ".")


def looked(cell):
    """'; judged at look k of K against ...' for a sequential cell, '' otherwise."""
    look = cell.get("look") or {}
    if look.get("looks", 1) <= 1:
        return ""
    against = {"both brackets": "both baseline brackets", "first bracket": "the first baseline bracket"}.get(
        look["against"], look["against"])
    return f"; judged at look {look['look']} of {look['looks']} against {against}"


def speculation_lines(spec):
    """The card's lines of a speculative candidate: accept length, verify step, break-even."""
    if not spec:
        return []
    lines = []
    for name, row in spec["cells"].items():
        if "break_even" in row:
            source = "the engine's log" if row.get("accept_length_source") == "engine log" else "the engine's /metrics"
            lines.append(f"Speculation ({name}): accept length {row['accept_length']:g} ({source}), verify step "
                         f"{row['verify_step_ms']:g} ms, break-even accept length {row['break_even']:g} against the "
                         f"baseline's {row['baseline_decode_tps']:g} tokens/s: "
                         + ("it pays." if row["pays"] else "it does not pay (accept length below break-even)."))
        else:
            lines.append(f"Speculation ({name}): not computed: {row['reason']}.")
    if spec["baseline_has_speculation"]:
        lines.append("The original already speculates: this compares two speculation settings, never a "
                     "speed-up of speculation (that needs a no-spec original).")
    return [*lines, ""]


def load_lines(cells):
    """The card's lines of the cells run under load (throughput at the cell's concurrency, latency
    percentiles) and of the engine's own account beside the client's."""
    lines = []
    for name, cell in cells.items():
        arms = [a for a in ARMS if a in cell["arms"]]
        if cell["concurrency"] > 1:
            tps = ", ".join(f"{arm} {cell['arms'][arm]['output_tps']}" for arm in arms)
            e2e = "; ".join(f"{arm} " + "/".join(f"{v * 1000:.0f}" for v in (cell["arms"][arm]["e2e_s"] or {}).values())
                            for arm in arms)
            lines += [f"Throughput at C{cell['concurrency']} ({name}): output tokens/s {tps}; E2E p50/p90/p99 ms "
                      f"{e2e}.", ""]
        engine = {arm: cell["arms"][arm].get("engine") for arm in arms if cell["arms"][arm].get("engine")}
        if engine:
            said = "; ".join(
                f"{arm} " + (f"{e['requests']:.0f} requests, mean TTFT {e['ttft_mean_s'] * 1000:.1f} ms, mean E2E "
                             f"{e['e2e_mean_s'] * 1000:.1f} ms, {e['generated_tokens']:.0f} tokens"
                             + (f", accept length {e['accept_length']}" if e.get("accept_length") else "")
                             if e.get("available") and e.get("ttft_mean_s") is not None and e.get("e2e_mean_s")
                             is not None else f"not read ({e.get('reason')})")
                for arm, e in engine.items())
            lines += [f"Engine's own /metrics ({name}): {said}.", ""]
    return lines


def decision_lines(decision):
    """What the decision rests on, beyond its verdict: error control, spend, load, KV, numerics, versions."""
    lines = []
    if decision.get("method"):
        lines += [f"Error control: {decision['method'].rstrip('.')}.", ""]
    if decision.get("requests_per_arm"):
        spent = ", ".join(f"{arm} {n}" for arm, n in decision["requests_per_arm"].items())
        lines += [f"Requests spent per arm: {spent}.", ""]
    if decision.get("single_stream_decode_tps"):
        lines += ["Single-stream decode (median tokens/s per arm): " + "; ".join(
            f"{cell} " + ", ".join(f"{arm} {rate:g}" for arm, rate in arms.items())
            for cell, arms in decision["single_stream_decode_tps"].items()) + ".", ""]
    lines += load_lines(decision.get("cells_under_load") or {}) + speculation_lines(decision.get("speculation"))
    if decision.get("endurance"):
        lines += [f"{decision['endurance']['reason'][0].upper()}{decision['endurance']['reason'][1:]}.", ""]
    if decision.get("kv_capacity"):
        kv = decision["kv_capacity"]
        stated = ", ".join(f"{arm} {value}" for arm, value in kv["max_concurrency"].items() if value is not None)
        lines += [f"{kv['reason']}." + (f" Concurrency the engine states: {stated}." if stated else ""), ""]
    if decision.get("numerics"):
        same, tolerance = decision["numerics"], decision["numerics"]["tolerance"]
        judged = tolerance if isinstance(tolerance, str) else json.dumps(tolerance) if tolerance else \
            "none (recorded, not judged)"
        lines += [f"Numerical equivalence ({same['prompts']} fixed prompts x {same['tokens']} greedy tokens, "
                  f"tolerance {judged}): {same['reason']}.", ""]
    if decision.get("versions"):
        lines += [upgrade_text(decision["versions"]), ""]
    return lines


def upgrade_text(versions):
    """An engine upgrade as each side reported it: the engines' own version reports, NCCL from their logs, and the
    image or the build (its own package's report, read before any stop)."""
    before, after = versions["original"], versions["candidate"]
    moved = (f"image {before['image']} -> {after['image']}" if not after.get("build") else
             f"build {before['build']['program']} -> {after['build']['program']} ({versions.get('delta')})")
    logged = f"; its start-up line named {', '.join(after['logged'])}" if after.get("logged") else ""
    return (f"Engine upgrade (each side's own report): engine {before['engine']} -> {after['engine']}{logged}; "
            f"NCCL {', '.join(before['nccl']) or 'not logged'} -> {', '.join(after['nccl']) or 'not logged'}; "
            f"{moved}.")


def cell_rows(verdict, cells):
    """One result-card row per judged cell: actual prompt tokens, spend per arm, median deltas, drift, failures."""
    lines = []
    for cell in verdict.get("cells", []):
        tokens = sorted(r["prompt_tokens"] for arm in cells.values() for c in arm if c["name"] == cell["cell"]
                        for r in c["requests"] if r.get("prompt_tokens"))
        p50 = tokens[len(tokens) // 2] if tokens else None
        if not cell.get("eligible", True):
            lines.append(f"| {cell['cell']} target | {p50} actual prompt tokens p50; not timed: "
                         f"{'; '.join(cell['reasons'])} |")
            continue
        metrics = cell["metrics"]
        parts = [f"{name} {pct(metrics[key].get('delta'))} [{pct((metrics[key].get('ci') or [None])[0])}, "
                 f"{pct((metrics[key].get('ci') or [None, None])[1])}] {metrics[key]['verdict']}"
                 for key, name in (("ttft_s", "TTFT"), ("e2e_s", "E2E"), ("decode_tps", "decode"))
                 if key in metrics and "delta" in metrics[key]]
        spent = {arm: sum(len(c["requests"]) for c in arm_cells if c["name"] == cell["cell"])
                 for arm, arm_cells in cells.items()}
        lines.append(f"| {cell['cell']} target | {p50} actual prompt tokens p50; n: candidate "
                     f"{spent.get('candidate')}, baseline {spent.get('baseline-1')} + {spent.get('baseline-2')} "
                     f"(bracketed): median {'; '.join(parts)}; baseline drift "
                     f"{pct(cell.get('baseline_drift'))}; failed requests: {counts_text(cell['failures'])}"
                     f"{looked(cell)} |")
    return lines


def gate_text(record):
    """One gate's verdict and, where it has one, its reason ("needle not qualified (random weights: ...)")."""
    verdict = record["verdict"].replace("-", " ")
    reason = str(record.get("reason") or "").removeprefix(f"{verdict}: ")
    return f"{record['gate']} {verdict}" + (f" ({reason})" if reason else "")


def gate_lines(preflight, gates, verdict, outcome):
    """Preflight, the candidate's and the restored original's gates, and every failure kept."""
    lines = []
    checks = preflight.get("checks", [])
    if checks:
        skipped = [f"'{c['check']}'" for c in checks if c["verdict"] == "skipped"]
        lines.append(f"Preflight: {sum(c['verdict'] == 'pass' for c in checks)} of {len(checks)} checks passed"
                     + (f"; {len(skipped)} skipped: {' and '.join(skipped)}" if skipped else "") + ".")
    else:
        lines.append(f"Preflight: not run{' (' + outcome['note'] + ')' if outcome.get('note') else ''}.")
    for phase in ("candidate", "restored"):
        records = gates.get(phase, [])
        lines.append(f"{phase.capitalize()} gates: " + ("; ".join(gate_text(r) for r in records) or "none run") + ".")
    violations = [c for c in verdict.get("cells", []) if not c.get("eligible", True)]
    failures = [f"{c['cell']} " + ", ".join(f"{arm} {n}" + (f" of {c['sent'][arm]}" if c.get("sent") else "")
                                        for arm, n in c["failures"].items())
                for c in verdict.get("cells", []) if any(c["failures"].values())]
    failed_run = ("the run failed: " + outcome["failure"]) if outcome.get("failure") else "the run did not fail"
    lines.append(f"Retained failures: {failed_run}; "
                 f"contract violations in {len(violations)} cell(s); failed requests: {'; '.join(failures) or 'none'}.")
    return lines


def prediction_lines(prediction):
    """The decode model's prediction beside what the cells measured."""
    p = prediction["prediction"]
    lines = ["", "## Predicted vs measured (decode-size all-reduce probe)", "",
             f"From {prediction['evidence']} ({prediction.get('source')}): {p['per_step']} all-reduces of "
             f"{p['bytes']:,} B per step, {p['baseline_us']:.1f} -> {p['candidate_us']:.1f} us each: "
             f"{p['saved_per_step_ms']:.3f} ms saved per step, {p['saved_per_token_ms']:.3f} ms per output "
             "token. TTFT is not predicted (prefill all-reduces are larger).", "",
             "| Cell | Baseline ms/token | Decode predicted | Decode measured | E2E predicted | E2E measured |",
             "|---|---|---|---|---|---|"]
    for row in prediction["comparison"]:
        if not row["compared"]:
            lines.append(f"| {row['cell']} | not compared: {row['reason']} | | | | |")
            continue
        lines.append(f"| {row['cell']} | {row['baseline_ms_per_token']:.2f} | {pct(row['predicted_decode_delta'])} "
                     f"| {pct(row['measured_decode_delta'])} | {pct(row['predicted_e2e_delta'])} | "
                     f"{pct(row['measured_e2e_delta'])} |")
    return lines


def render_card(run):
    run = Path(run)
    outcome, recipes = load(run, "outcome.json", {}), load(run, "recipes.json", {})
    verdict, gates = load(run, "ab-verdict.json", {}), load(run, "gates.json", {})
    preflight, restoration = load(run, "preflight.json", {}), load(run, "restoration.json", {})
    cells, journal = load(run, "cells.json", {}).get("arms", {}), load(run, "journal-excerpts.json", {})
    decision = decision_record(run)
    original = recipes.get("original", {})
    difference = recipes.get("difference") or {}
    double = bool(outcome.get("engine_double")) or any("engine_double" in str(word)
                                                       for word in original.get("argv") or [])
    assumed = sorted(k for k, v in ((recipes.get("evidence_used") or {}).get("assumed") or {}).items() if v)
    rule = (f"under the rule: {rule_text(decision['rule'])}" if decision.get("rule")
            else f"(no verdict rule applied: {outcome.get('failure') or 'no cells were judged'})")
    concurrency = sorted({c.get("concurrency") for arm in cells.values() for c in arm if c.get("concurrency")})
    lines = [f"# {outcome.get('candidate_id')} candidate A/B on {outcome.get('host')}", "",
             f"Run: {outcome.get('run_id')}", "",
             f"Decision: **{decision['verdict']}** {rule}. "
             f"Promotion: {'allowed' if decision['promotion_allowed'] else 'not allowed'}"
             f"{' (a separate human step)' if decision['promotion_allowed'] else ''}.", ""]
    if double:
        lines += ["Engine: a TEST DOUBLE, not SGLang or vLLM. Its timings show what this tool measures "
                  "and decides, never the real engine's performance.", ""]
    # As the reference card: the decision, the setup/delta/cells table, then gates and failures; the method last.
    lines += ["## Result card", "", "| Setup | Value |", "|---|---|",
              f"| Model | {original.get('model')} "
              f"{'@ ' + str(original['revision']) if original.get('revision') else '(no revision pinned)'} |",
              f"| Engine/runtime | {original.get('engine')}"
              f"{' (TEST DOUBLE)' if double and 'DOUBLE' not in str(original.get('engine')) else ''}"
              f" / {original.get('runtime')}; image {original.get('image') or 'none (process)'} |",
              f"| Hardware | {hardware_text(outcome, preflight)} |",
              f"| TP, context, GPUs | TP={original.get('tp_size')}, {original.get('context_length')} tokens, "
              f"GPUs {original.get('gpus') or 'not named in the unit'} |",
              f"| Concurrency | {', '.join(f'C{c}' for c in concurrency) or 'no cells ran'} |",
              f"| Delta | {(decision.get('versions') or {}).get('delta') or ''}"
              f"{' - ' if (decision.get('versions') or {}).get('delta') else ''}"
              f"{difference.get('control')}: {setting_text(difference.get('before'), 'not set')} -> "
              f"{setting_text(difference.get('after'), 'removed')} |"]
    lines += cell_rows(verdict, cells)
    lines += ["| Evidence | manifest.json, decision.json, cells.png |", "", "![cells](cells.png)", "",
              "## Gates and retained failures", ""]
    lines += gate_lines(preflight, gates, verdict, outcome)
    lines += ["", "## What the decision rests on", ""] + decision_lines(decision)
    if assumed:
        lines += [assumed_text(assumed, run.parent), ""]
    lines += ["## Telemetry (NVML on the host, over the cell's GPUs and chunks)", ""]
    for arm in [a for a in ARMS if a in cells]:
        lines += [f"- {cell.get('name')} {arm}: {telemetry_text(cell.get('telemetry'))}" for cell in cells[arm]]
    prediction = load(run, "prediction.json")
    if prediction:
        lines += prediction_lines(prediction)
    nccl = (journal.get("candidate") or {}).get("nccl") or {}
    lines += ["", "## Evidence boundary", "",
              f"The candidate's own start-up log reported NCCL {', '.join(nccl.get('versions', [])) or 'n/a'} "
              f"and {'; '.join(nccl.get('summary', [])) or 'no transport lines'}.",
              "Claims are limited to these cells: fixed-length contract output, unique prefixes, the stated "
              "concurrency; no p99 or service-tail claim where n is small, no throughput claim.",
              restoration_text(outcome, restoration), ""]
    return "\n".join(lines)


def _median_interval(values, seed=0, rounds=1000):
    """(median, low, high): the median and its 95 % bootstrap interval (fixed seed: the same figure each time)."""
    import numpy as np

    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return None
    rng = np.random.default_rng(seed)
    medians = np.median(rng.choice(data, size=(rounds, data.size), replace=True), axis=1)
    return float(np.median(data)), float(np.percentile(medians, 2.5)), float(np.percentile(medians, 97.5))


def _arm_panel(ax, arms, name, key, title):
    """Every request's value per arm as points (a little horizontal jitter), each arm's median with its 95 %
    interval as a bar beside them; the two baseline brackets stand either side of the candidate, so the drift
    between them shows. The axis spans the data (not from zero): a few-percent difference stays visible."""
    import numpy as np

    rng = np.random.default_rng(1)
    shown = []
    for x, arm in enumerate(ARMS):
        cell = next((c for c in arms.get(arm, []) if c["name"] == name), None)
        values = [r[key] * 1000 for r in (cell or {}).get("requests", []) if r.get("error") is None
                  and isinstance(r.get(key), int | float)]
        if not values:
            continue
        shown.append(arm)
        ax.scatter(x + rng.uniform(-0.12, 0.12, len(values)), values, s=10, alpha=0.5,
                   color="tab:orange" if arm == "candidate" else "tab:blue")
        median, low, high = _median_interval(values)
        ax.errorbar(x + 0.28, median, yerr=[[median - low], [high - median]], fmt="D", color="black", capsize=4)
        ax.annotate(f"{median:.1f}", (x + 0.34, median), fontsize=8, va="center")
    ax.set_xticks(range(len(ARMS)), ARMS)
    ax.set_xlim(-0.5, len(ARMS) - 0.3)
    ax.set_title(title)
    ax.set_ylabel("ms")
    return shown


def figure(arms, decision=None):
    """The cells figure: per cell, every request's TTFT (top) and E2E (middle) per arm - the first baseline bracket,
    the candidate, the second bracket - with each arm's median and its 95 % interval, on axes that span the data so
    a few-percent difference and the brackets' drift are visible; and each arm's output tokens/s over the cell
    (bottom, from zero: a throughput compares sizes). The title carries the decision the card states. None without
    cells."""
    import matplotlib.pyplot as plt

    names = [c["name"] for c in arms.get("baseline-1", [])]
    if not names:
        return None
    fig, axes = plt.subplots(3, len(names), figsize=(max(5.5 * len(names), 7), 10.5), squeeze=False)
    for column, name in enumerate(names):
        _arm_panel(axes[0][column], arms, name, "ttft_s", f"cell {name}: TTFT per request")
        _arm_panel(axes[1][column], arms, name, "e2e_s", f"cell {name}: E2E per request")
        labels, rates = [], []
        for arm in ARMS:
            cell = next((c for c in arms.get(arm, []) if c["name"] == name), None)
            if cell:
                answered = [r for r in cell["requests"] if r.get("error") is None]
                labels.append(arm)
                tokens = sum(r.get("completion_tokens") or 0 for r in answered)
                rates.append(tokens / cell["elapsed_s"] if cell.get("elapsed_s") else 0.0)
        concurrency = next((c.get("concurrency", 1) for arm in ARMS for c in arms.get(arm, []) if c["name"] == name), 1)
        bottom = axes[2][column]
        bottom.bar(labels, rates)
        bottom.set_title(f"cell {name}: output tokens/s at C{concurrency}")
        bottom.set_ylabel("tokens/s")
        bottom.set_ylim(0, max(rates, default=0.0) * 1.1 or 1.0)
    fig.suptitle((f"Decision: {decision}.\n" if decision else "") + "Points: every request; diamond: the arm's "
                 "median with its 95 % interval", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return fig


def plot(run, dest):
    try:
        import matplotlib
    except ImportError:  # a machine without matplotlib still gets its decision and card
        return False

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    decision = load(run, "decision.json", {})
    said = (f"{decision['verdict']} (promotion allowed: {decision.get('promotion_allowed')})"
            if decision.get("verdict") else None)  # the card's decision line, word for word in its verdict
    fig = figure(load(run, "cells.json", {}).get("arms", {}), said)
    if fig is None:
        return False
    fig.savefig(dest, dpi=80)
    plt.close(fig)
    return True


def key_path():
    return Path(os.environ.get(KEY_ENV) or Path.home() / ".config" / "serving-rollout" / "evidence.key")


def seal_key(create=False):
    """The controller's sealing key (32 random bytes, mode 0600), made on first use when `create`."""
    path = key_path()
    if not path.exists():
        if not create:
            return None
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(secrets.token_bytes(32))
    return path.read_bytes()


def seal_of(manifest_bytes, key):
    return {"schema": "serving-rollout.manifest-seal/v1", "key_id": hashlib.sha256(key).hexdigest()[:12],
            "hmac_sha256": hmac.new(key, manifest_bytes, hashlib.sha256).hexdigest()}


def check_seal(run, required=False):
    """[(file, problem)] of the seal: [] when it matches the manifest (or is absent and not required)."""
    run = Path(run)
    seal = load(run, SEAL)
    if seal is None:
        return [(SEAL, "missing (the run was not sealed on this controller)")] if required else []
    key = seal_key()
    if key is None:
        return [(SEAL, f"cannot be checked: no sealing key at {key_path()}")]
    expected = seal_of((run / MANIFEST).read_bytes(), key)
    if seal.get("key_id") != expected["key_id"]:
        return [(SEAL, f"sealed with another key ({seal.get('key_id')}, this controller's is {expected['key_id']})")]
    if not hmac.compare_digest(str(seal.get("hmac_sha256")), expected["hmac_sha256"]):
        return [(SEAL, "does not match manifest.json (the manifest was edited after the run)")]
    return []


def build_manifest(run):
    run = Path(run)
    files = sorted(p for p in run.rglob("*") if p.is_file() and p.name not in (MANIFEST, SEAL))
    return {"schema": "serving-rollout.manifest/v1",
            "files": {str(p.relative_to(run)): sha256(p) for p in files}}


def changed_files(run):
    """[(file, problem)] for every file that differs from the manifest; [] when intact."""
    run = Path(run)
    manifest = load(run, MANIFEST)
    if manifest is None:
        return [(MANIFEST, "missing")]
    current = build_manifest(run)["files"]
    problems = [(name, "changed") for name, digest in manifest["files"].items()
                if name in current and current[name] != digest]
    problems += [(name, "missing") for name in manifest["files"] if name not in current]
    problems += [(name, "not in manifest") for name in current if name not in manifest["files"]]
    return sorted(problems)


def verify(run, sealed=False):
    """changed_files, then the seal: checked when there is one, required when `sealed`."""
    problems = changed_files(run)
    return problems + (check_seal(run, required=sealed) if (Path(run) / MANIFEST).exists() else [])


def trust(run):
    """What promotion acts on, or every reason not to: the files match the manifest, the manifest
    its seal (required), and the index names the same verdict as decision.json."""
    run = Path(run)
    problems = [f"{name}: {problem}" for name, problem in verify(run, sealed=True)]
    decision = load(run, "decision.json") or {}
    index = load(run.parent.parent, "index.json", {"runs": []})
    listed = [r for r in index.get("runs", []) if r.get("path") == str(run.relative_to(run.parent.parent))]
    if not listed:
        problems.append(f"index.json: no entry for {run.parent.name}/{run.name}")
    elif listed[-1].get("verdict") != decision.get("verdict"):
        problems.append(f"index.json says {listed[-1].get('verdict')!r}, "
                        f"decision.json says {decision.get('verdict')!r}")
    return {"verdict": decision.get("verdict"), "promotion_allowed": decision.get("promotion_allowed"),
            "decision_sha256": sha256(run / "decision.json") if (run / "decision.json").exists() else None,
            "problems": problems}


def seal(folder):
    """The folder's manifest (every file's sha256) and its seal with the controller's key: what verify() checks."""
    folder = Path(folder)
    manifest = (json.dumps(build_manifest(folder), indent=2, sort_keys=True) + "\n").encode()
    (folder / MANIFEST).write_bytes(manifest)
    (folder / SEAL).write_text(json.dumps(seal_of(manifest, seal_key(create=True)), indent=2) + "\n")


def finalize(run):
    run = Path(run)
    if (run / MANIFEST).exists():
        raise SystemExit(f"{run} is already finalized; run directories are never overwritten")
    outcome = load(run, "outcome.json", {})
    outcome.setdefault("run_id", run.name.split("-", 1)[-1])
    outcome.setdefault("host", run.parent.name)
    (run / "outcome.json").write_text(json.dumps(outcome, indent=2, sort_keys=True) + "\n")
    prediction = prediction_record(run)
    if prediction:
        (run / "prediction.json").write_text(json.dumps(prediction, indent=2, sort_keys=True) + "\n")
    decision = decision_record(run)
    (run / "decision.json").write_text(json.dumps(decision, indent=2, sort_keys=True) + "\n")
    plot(run, run / "cells.png")
    (run / "result-card.md").write_text(render_card(run))
    seal(run)
    with fleet.locked(run.parent.parent):  # hosts of one batch finish in parallel
        index_path = run.parent.parent / "index.json"
        index = json.loads(index_path.read_text()) if index_path.exists() else {"runs": []}
        index["runs"] = [r for r in index["runs"] if r["path"] != str(run.relative_to(run.parent.parent))]
        index["runs"].append({"path": str(run.relative_to(run.parent.parent)), "run_id": decision["run_id"],
                              "host": decision["host"], "candidate_id": decision["candidate_id"],
                              "verdict": decision["verdict"], "outcome": run_outcome(outcome, decision)})
        fleet.write_json(index_path, index)
    # what the host keeps of this run, where the evidence's writer cannot reach (promotion checks it)
    host_record = {"run_id": decision["run_id"], "verdict": decision["verdict"],
                   "promotable": decision["promotion_allowed"], "decision_sha256": sha256(run / "decision.json")}
    return {**decision, "host_record": host_record}


def run_outcome(outcome, decision):
    """The run's outcome in the fleet's words: a failed candidate with the original restored or not, else its
    verdict as acceptable or not."""
    if outcome.get("failure"):
        return "failed, restored" if outcome.get("restored") else "failed, NOT restored"
    return "acceptable" if decision["verdict"] == "acceptable" else "not acceptable"


def check_dir(folder, min_free_mib):
    """Before any change: the evidence folder exists or can be made, takes a file, and has room."""
    import tempfile

    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-"):
            pass
    except OSError as exc:
        return f"evidence folder {folder} is not writable: {exc.strerror}"
    free = free_mib(folder)
    if free < min_free_mib:
        return f"evidence folder {folder} has {free:.0f} MiB free, under the {min_free_mib:.0f} MiB a run needs"
    return None


def finalized(run):
    """finalize, with a full or read-only disk named by its path and error (SystemExit, no traceback), as a
    finalized run is refused (the CLI and the run_evidence action both say it so)."""
    try:
        return finalize(run)
    except OSError as exc:
        raise SystemExit(f"cannot finalize {run}: {exc.filename or run}: {exc.strerror}") from None


def on_run(command, run):
    """finalize, card, trust or verify one run's evidence folder."""
    if command == "finalize":
        print(json.dumps(finalized(run)))
    elif command == "card":
        sys.stdout.write(render_card(run))
    elif command == "trust":
        record = trust(run)
        print(json.dumps(record))
        if record["problems"]:
            raise SystemExit(f"run {run} cannot be trusted: " + "; ".join(record["problems"]))
    else:
        problems = verify(run)
        for name, problem in problems:
            print(f"{name}: {problem}")
        if problems:
            raise SystemExit(1)
        print(f"{run}: every file matches manifest.json")


def main(argv):
    if argv and argv[0] == "check-dir" and len(argv) == 3:
        problem = check_dir(argv[1], float(argv[2]))
        if problem:
            raise SystemExit(problem)
        print(f"{argv[1]}: writable, room enough")
        return
    if argv and argv[0] == "predict" and len(argv) in (3, 4):
        print(json.dumps(predict_flag(argv[1], float(argv[2]), float(argv[3]) if len(argv) == 4 else None)))
        return
    if len(argv) != 2 or argv[0] not in ("finalize", "card", "verify", "trust"):
        raise SystemExit(__doc__)
    command, run = argv
    if not Path(run).is_dir():
        raise SystemExit(f"no run directory at {run}")
    on_run(command, run)


if __name__ == "__main__":
    main(sys.argv[1:])
