"""A host's proposal: the operator's pins as observed and an ordered candidate plan, each candidate with the fact
that suggests it, its prerequisites (met, naming the evidence, or unmet, naming what to run or what a human must
change), its predicted effect where a model exists, and its gate; and what was not proposed, with why.

Pure: the inputs are what the tool already read - the capture's observations (IOMMU, NVML, NCCL), systemd's reading
of the unit (serving_recipe's recipe), the engine's start-up log (journal_scan's scan), the peer-path verdict and
the host's decode prediction. The catalog (module_utils/controls.py) says which controls exist, how each is set
per engine, what each requires and after which group it runs; this file only reads the host's facts against it.
Never written into an inventory: the operator reviews pins.yml and copies it."""

import yaml

from serving_rollout.module_utils import controls

PLAN_SCHEMA = "anvil-serving.followup-candidate-plan/v1"
# A composite the catalog runs after transport: proposed (once) when the unit holds any control of these groups.
COMPOSITE = "scheduler-and-speculation"
COMPOSITE_GROUPS = ("scheduler", "speculative")


def held(recipe, change):
    """What the unit holds for a control's setting, as systemd passes it (None: not set)."""
    if change["kind"] == "env":
        return (recipe.get("env") or {}).get(change["name"])
    if change["kind"] == "arg":
        return (recipe.get("engine_args") or {}).get(change["name"])
    if change["kind"] == "image":
        return recipe.get("image")
    flags = {f: v for f, v in (recipe.get("engine_args") or {}).items() if f.startswith("--speculative-")}
    return flags or None


def setting_text(change, value):
    name = change.get("name") or "the speculative flags"
    if value is None:
        return f"{name} unset"
    return name if value is True else f"{name}={value}"


# ---- pins -------------------------------------------------------------------------------------------------------

def pins(recipe, scan, capture):
    """serving_expected as observed: {key: {value, source}} for each value the host shows."""
    nvml = capture.get("nvml") or {}
    out = {}

    def pin(key, value, source):
        if value not in (None, "", [], {}):
            out[key] = {"value": value, "source": source}

    unit = "the unit's ExecStart, as systemd reads it"
    pin("model", recipe.get("model"), unit)
    pin("model_revision", recipe.get("revision"), unit)
    pin("tp_size", recipe.get("tp_size"), unit)
    pin("context_length", recipe.get("context_length"), unit)
    pin("gpus", recipe.get("gpus"), "CUDA_VISIBLE_DEVICES or --gpus in the unit")
    if nvml.get("available"):
        pin("gpu_count", nvml.get("gpu_count"), "NVML")
        limits = sorted({g["power_w"]["enforced"] for g in nvml.get("gpus") or [] if g.get("power_w")})
        pin("power_limit_w", limits[0] if len(limits) == 1 else None, "NVML's enforced power limit (every GPU)")
    versions = (scan.get("nccl") or {}).get("versions") or []
    pin("nccl_version", versions[0] if len(versions) == 1 else None, "the engine's start-up log")
    return out


def pins_yaml(host, found):
    lines = [f"# Observed on {host}: review, then copy what you want pinned into the inventory's serving_expected.",
             "# Each value says where it was read. The tool never writes this into an inventory.",
             "serving_expected:"]
    for key, pinned in found.items():
        value = yaml.safe_dump(pinned["value"], default_flow_style=True).strip().removesuffix("...").strip()
        lines.append(f"  {key}: {value}  # {pinned['source']}")
    return "\n".join(lines) + "\n"


# ---- facts that speak for or against a control -----------------------------------------------------------------

def host_changes(capture):
    """Host changes a human must make before peer traffic may take the GPUs' PCIe path: [{fact, what}]. `fact`
    names the capture fact that decides it, so a newer capture can show it met (the plan executor re-checks it).
    Peer traffic over NVLink does not cross the PCIe fabric or the IOMMU: no IOMMU or ACS change applies there."""
    iommu, nvml = capture.get("iommu") or {}, capture.get("nvml") or {}
    pairs = nvml.get("pairs") or []
    changes = []
    bad = [f"{p['i']}-{p['j']}" for p in pairs if not p.get("p2p_ok")]
    if bad:
        changes.append({"fact": "nvml_p2p", "what": f"NVML reports P2P not OK for GPU pairs {', '.join(bad)}: a "
                                                    "driver or platform matter"})
    if pairs and all(str(p.get("topology", "")).startswith("NV") for p in pairs):
        return changes
    translated = iommu.get("translated_gpu_groups") or []
    if translated:
        kinds = sorted({str(g.get("group_type")) for g in iommu.get("gpus") or [] if g.get("translated")})
        changes.append({"fact": "iommu_translated", "what": (
            f"the GPUs' IOMMU domains are translated ({', '.join(kinds) or 'a DMA type'}, groups "
            f"{', '.join(map(str, translated))}): a host change (passthrough domains) planned outside this tool, "
            "which never changes the kernel command line, IOMMU or ACS")})
    if iommu.get("acs_redirecting_bridges"):
        changes.append({"fact": "acs_redirect", "what": (
            f"ACS redirects peer traffic at {len(iommu['acs_redirecting_bridges'])} bridge(s) above the GPUs: a host "
            "change this tool never makes")})
    return changes


def peer_facts(capture):
    """What the capture says about the GPUs' peer path: (for: [...], host changes a human must make: [{fact, what}])."""
    iommu, nvml = capture.get("iommu") or {}, capture.get("nvml") or {}
    support = []
    pairs = nvml.get("pairs") or []
    if pairs and all(p.get("p2p_ok") for p in pairs):
        kinds = sorted({p.get("topology") for p in pairs if p.get("topology")})
        support.append(f"NVML reports P2P OK for every GPU pair ({', '.join(kinds) or 'topology not read'})")
    human = host_changes(capture)
    if pairs and all(str(p.get("topology", "")).startswith("NV") for p in pairs):
        support.append("peer traffic takes NVLink, not the PCIe fabric: IOMMU and ACS are not on its path")
    elif iommu.get("gpus") and not iommu.get("acs_redirecting_bridges"):
        support.append("ACS does not redirect peer traffic above the GPUs")
    return support, human


def one_gpu(facts):
    """Why peer and collective controls do not apply on this host, or None: NVML counts one GPU, or the engine runs
    at TP 1 (no rank has a peer)."""
    nvml = (facts.get("capture") or {}).get("nvml") or {}
    if nvml.get("available") and nvml.get("gpu_count") == 1:
        return "one GPU: no peer pair; P2P controls do not apply"
    if str(facts["recipe"].get("tp_size") or "") == "1":
        return "TP 1: no rank has a peer and no collective runs; P2P and NCCL controls do not apply"
    return None


def interconnect(capture):
    pairs = (capture.get("nvml") or {}).get("pairs") or []
    if not pairs:
        return "an interconnect NVML did not read"
    return "NVLink" if all(str(p.get("topology", "")).startswith("NV") for p in pairs) else "PCIe"


def why(item, change, value, facts):
    """The fact that suggests this control on this host."""
    text = f"{setting_text(change, value)} in the unit (systemd's reading)"
    if controls.proven_by_nccl(item.get("proof") or {}) or item["group"] == "transport":
        support, _ = peer_facts(facts["capture"])
        tp = facts["recipe"].get("tp_size")
        text += f" on a TP {tp} {interconnect(facts['capture'])} host" if tp else ""
        text += "".join(f"; {fact}" for fact in support)
    return text


# ---- prerequisites -----------------------------------------------------------------------------------------------

def prerequisite(need, facts, proposed):
    """One catalog prerequisite, machine-readable (schemas/candidate-plan.schema.json):
    {kind: evidence | order | host-change, what, met, evidence | to_do}."""
    if need == "capture":
        found = facts["capture"].get("evidence")
        return {"kind": "evidence", "need": need, "what": "the host's capture (IOMMU, ACS, NVML, NCCL)",
                "met": bool(found), **({"evidence": found} if found else {"to_do": "run capture.yml"})}
    if need == "peer_path":
        peer = facts.get("peer_path") or {}
        ok = peer.get("verdict") == "ok"
        return {"kind": "evidence", "need": need,
                "what": "the peer path proven (bounded, byte-checked copies and an all-reduce A/B)", "met": ok,
                **({"evidence": peer.get("evidence")} if ok else
                   {"to_do": "run peer-path.yml" + (f" (last verdict: {peer['verdict']})" if peer.get("verdict")
                                                    else "")})}
    before = [p["id"] for p in proposed if p["group"] == "transport"]
    return {"kind": "order", "need": need, "what": "transport stable (every transport candidate decided)",
            "met": not before, **({"to_do": f"after {', '.join(before)} (each decided)"} if before else
                                  {"evidence": "no transport candidate proposed"})}


def prerequisites(item, facts, proposed):
    out = [prerequisite(need, facts, proposed) for need in item.get("requires") or []]
    if controls.uses_peer_path(item["id"]):  # every control whose traffic takes the peer path, not only p2p
        _, human = peer_facts(facts["capture"])
        out += [{"kind": "host-change", "fact": change["fact"], "what": change["what"], "met": False,
                 "to_do": "a human changes the host first, then capture.yml again (plan.yml re-checks the newest "
                          "capture)"} for change in human]
    return out


def predicted(item, facts):
    if item.get("effect_model") != "decode_probe":
        return None
    prediction = facts.get("prediction")
    if not prediction:
        return {"known": False, "reason": "no decode prediction: run peer-path.yml with its decode probe"}
    saved = prediction["prediction"].get("saved_per_token_ms")
    return {"known": True, "saved_per_token_ms": saved, "evidence": prediction.get("evidence"),
            "text": f"{saved:.3f} ms saved per decoded token (the decode model: all-reduce count x the peer-path "
                    "probe's latencies)" if isinstance(saved, int | float) else "see the evidence"}


def gate(item):
    numerics = item.get("numerics")
    proof = (item.get("proof") or {}).get("kind", "the catalog's proof")
    return (f"the engine shows the change ({proof}); every rollout gate, the bracketed A/B cells and the endurance "
            f"cell; numbers {numerics or 'recorded, not judged'}; restored exactly, promotion a human step")


# ---- the plan ----------------------------------------------------------------------------------------------------

def consider(item, facts):
    """(change, held value) for a control the host's facts suggest, or (None, reason it is not proposed)."""
    engine, recipe = facts["recipe"].get("engine"), facts["recipe"]
    backend = (facts.get("scan") or {}).get("collectives", {}).get("backend")
    if engine not in item.get("set", {}):
        return None, f"the catalog has no setter for {engine}"
    single = one_gpu(facts)
    if single and (controls.uses_peer_path(item["id"]) or controls.proven_by_nccl(item.get("proof") or {})):
        return None, single
    if controls.proven_by_nccl(item.get("proof") or {}) and backend not in (None, "nccl"):
        return None, f"the engine's collectives run on {backend}, not NCCL: an NCCL control changes nothing"
    if item["group"] == "upgrade":
        return None, f"an engine upgrade is the operator's choice of build (the catalog's {item['id']})"
    try:
        change = controls.change_for(item["id"], engine)
    except controls.ControlError:
        return None, "it takes a value no fact on this host suggests"
    value = held(recipe, change)
    if value == change.get("value") or (value is None and change.get("value") is None):
        return None, f"the unit is already at its value ({setting_text(change, value)})"
    if value is None:
        return None, f"the unit does not set {change.get('name') or 'it'}: no fact on this host suggests it"
    return change, value


def composite(facts, proposed):
    """The catalog's scheduler-and-speculation step, when the unit holds a scheduler or speculative setting."""
    recipe, item = facts["recipe"], controls.entry(COMPOSITE)
    flags = [f for f in recipe.get("engine_args") or {} if f.startswith("--speculative-")
             or f in ("--chunked-prefill-size", "--max-num-batched-tokens")]
    if not flags:
        return None
    accept = ((facts.get("scan") or {}).get("accept_length") or {}).get("value")
    return {"id": COMPOSITE, "group": item["group"],
            "why": f"the unit sets {', '.join(flags)}" + (f"; accept length {accept} in the engine's log"
                                                           if accept is not None else ""),
            "prerequisites": prerequisites(item, facts, proposed) + [
                {"kind": "setting", "what": "one setting chosen: {chunked_prefill_size: N} or {speculative: {...}}",
                 "met": False,
                 "to_do": "the operator sets the entry's control (one at a time)"}],
            "predicted": None, "gate": gate(item)}


def propose(facts):
    """{candidates, not_proposed} for one host, candidates in the catalog's order."""
    proposed, skipped = [], []
    for item in controls.CATALOG:
        if item["id"] == COMPOSITE or item["group"] in COMPOSITE_GROUPS:
            continue
        change, value = consider(item, facts)
        if change is None:
            skipped.append({"id": item["id"], "why": value})
            continue
        proposed.append({"id": item["id"], "group": item["group"], "change": change,
                         "why": why(item, change, value, facts), "predicted": predicted(item, facts),
                         "gate": gate(item)})
    for candidate in proposed:
        candidate["prerequisites"] = prerequisites(controls.entry(candidate["id"]), facts, [])
    extra = composite(facts, proposed)
    if extra:
        proposed.append(extra)
    else:
        skipped.append({"id": COMPOSITE, "why": "the unit sets no scheduler or speculative flag"})
    return {"candidates": proposed, "not_proposed": skipped}


def prerequisite_line(p):
    return f"{p['what']}: " + (f"met ({p.get('evidence')})" if p["met"] else f"UNMET - {p['to_do']}")


def plan_document(host, proposal, capture_evidence=None):
    """The proposal as a candidate plan (schemas/candidate-plan.schema.json), ready for plan.yml."""
    return {"schema": PLAN_SCHEMA, "status": "proposed-not-executed",
            "trigger": f"serving-rollout propose on {host}",
            "ordered_candidates": [{"id": c["id"], "change": f"{controls.entry(c['id'])['what']} (why: {c['why']})",
                                    "gate": c["gate"],
                                    "prerequisites": c["prerequisites"]}
                                   for c in proposal["candidates"]],
            **({"support_observation": capture_evidence} if capture_evidence else {}),
            "limitations": ["Proposed from the host's captured facts; nothing was changed on the host",
                            "Driver P2P status OK is support evidence, not proof of correct or fast transfer",
                            "Promotion remains a separate human gate"]}


def report(host, unit, found, proposal):
    """report.md: the same for a person, with what was not proposed and why."""
    lines = [f"# Proposal for {host} ({unit})", "", "Read-only: nothing on the host was changed. Review the pins, "
             "then run the plan (`bin/serving-rollout plan plan.json -i INVENTORY`) once its prerequisites are met.",
             "", "## Pins (observed; copy into the inventory's serving_expected)", "", "| pin | value | read from |",
             "|---|---|---|"]
    lines += [f"| {key} | `{pin['value']}` | {pin['source']} |" for key, pin in found.items()]
    lines += ["", "## Candidates, in the order the catalog allows", ""]
    for number, c in enumerate(proposal["candidates"], 1):
        lines += [f"### {number}. {c['id']}", "", f"- why: {c['why']}"]
        lines += [f"- prerequisite: {prerequisite_line(p)}" for p in c["prerequisites"]]
        if c.get("predicted"):
            lines.append(f"- predicted: {c['predicted'].get('text') or c['predicted'].get('reason')}")
        lines += [f"- gate: {c['gate']}", ""]
    if not proposal["candidates"]:
        lines += ["None: no fact on this host suggests a candidate.", ""]
    lines += ["## Not proposed", ""] + [f"- {s['id']}: {s['why']}" for s in proposal["not_proposed"]]
    return "\n".join(lines) + "\n"
