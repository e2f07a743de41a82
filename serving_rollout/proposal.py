"""A host's proposal: the operator's pins as observed and an ordered candidate plan, each candidate with the fact
that suggests it, its prerequisites (met, naming the evidence, or unmet, naming what to run or what a human must
change), its predicted effect where a model exists, and its gate; and what was not proposed, with why.

Pure: the inputs are what the tool already read - the capture's observations (IOMMU, NVML, NCCL), systemd's reading
of the unit (serving_recipe's recipe), the engine's start-up log (journal_scan's scan), the peer-path verdict and
the host's decode prediction. The catalog (module_utils/controls.py) says which controls exist, how each is set
per engine, what each requires and after which group it runs; this file only reads the host's facts against it.
Never written into an inventory: the operator reviews pins.yml and copies it."""

import yaml

from serving_rollout.module_utils import controls, engine_adapters

PLAN_SCHEMA = "anvil-serving.followup-candidate-plan/v1"
UNIT_READING = "the unit (systemd's reading)"


def engine_sets(engine, name):
    """The value the engine sets for an environment variable itself when the unit leaves it unset (its adapter)."""
    return ((engine_adapters.ADAPTERS.get(engine) or {}).get("sets_env") or {}).get(name)


def effective_setting(facts, change):
    """(value, where it comes from, its source kind) of a control's setting as the engine really runs with it: an
    environment variable from the unit's effective NCCL configuration (every source in NCCL's precedence:
    module_utils/nccl_config.py), else the engine's own log ("set by environment"), else what the engine sets
    itself when unset; an argument or image from systemd's reading of the unit. (None, None, None) when unset."""
    recipe = facts["recipe"]
    if change["kind"] != "env":
        value = held(recipe, change)
        return (value, UNIT_READING, "unit") if value is not None else (None, None, None)
    name = change["name"]
    found = (((recipe.get("nccl_config") or {}).get("effective") or {}).get(name))
    if found:
        return found["value"], f"{found['source']} ({found['path']})", found["source"]
    value = held(recipe, change)
    if value is not None:
        return value, UNIT_READING, "process-env"
    logged = (((facts.get("scan") or {}).get("nccl") or {}).get("settings") or {}).get(name)
    if logged is not None:
        return logged, "the engine's log (NCCL: set by environment)", "log"
    own = engine_sets(recipe.get("engine"), name)
    if own is not None:
        return own, f"the engine itself ({recipe.get('engine')} sets it when unset)", "engine"
    return None, None, None


def held(recipe, change):
    """What the unit holds for a control's setting, as systemd passes it (None: not set)."""
    if change["kind"] == "env":
        return (recipe.get("env") or {}).get(change["name"])
    if change["kind"] == "arg":
        return (recipe.get("engine_args") or {}).get(change["name"])
    if change["kind"] == "image":
        return recipe.get("image")
    flags = {f: v for f, v in (recipe.get("engine_args") or {}).items() if f.startswith(controls.SPECULATIVE_PREFIX)}
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
    elif iommu.get("gpus") and not iommu.get("acs_redirecting_bridges") and not acs_unread(iommu):
        support.append("ACS does not redirect peer traffic above the GPUs")
    return support, human


def acs_unread(iommu):
    """The bridges above the GPUs whose ACS could not be read (a capture without root)."""
    return sorted({bdf for gpu in iommu.get("gpus") or [] for bdf in gpu.get("acs_unknown") or []})


def unknown_facts(capture):
    """The facts a peer-path control's prerequisites depend on that were not read: [{what, to_do}] (unknown is never
    clear: each is an unmet prerequisite naming what to run)."""
    nvml, iommu = capture.get("nvml"), capture.get("iommu")
    out = []
    if not nvml:
        out.append({"what": "NVML readings (driver P2P status, topology): missing from the capture",
                    "to_do": "run capture.yml"})
    elif not nvml.get("available"):
        out.append({"what": f"NVML readings (driver P2P status, topology): NVML did not load ({nvml.get('reason')})",
                    "to_do": "is the driver installed (nvidia-smi)? then capture.yml again"})
    nvlink = bool(nvml) and bool(nvml.get("pairs")) and all(
        str(p.get("topology", "")).startswith("NV") for p in nvml["pairs"])
    if nvlink:  # peer traffic does not cross the PCIe fabric: IOMMU and ACS are not on its path
        return out
    if not iommu:
        out.append({"what": "IOMMU and ACS facts: missing from the capture", "to_do": "run capture.yml"})
    elif acs_unread(iommu):
        out.append({"what": f"ACS on bridge(s) {', '.join(acs_unread(iommu))} above the GPUs: unreadable",
                    "to_do": "capture as root (become), which can read the bridges' ACS registers"})
    return out


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
        return None
    return "NVLink" if all(str(p.get("topology", "")).startswith("NV") for p in pairs) else "PCIe"


def why(item, change, value, facts, where=None):
    """The fact that suggests this control on this host: its effective setting and where it comes from, and for a
    control on the peer path what the capture read (only what was read)."""
    text = f"{setting_text(change, value)} from {where or UNIT_READING}"
    if controls.proven_by_nccl(item.get("proof") or {}) or controls.uses_peer_path(item["id"]):
        support, _ = peer_facts(facts["capture"])
        tp, link = facts["recipe"].get("tp_size"), interconnect(facts["capture"])
        text += f" on a TP {tp}{' ' + link if link else ''} host" if tp else ""
        text += "".join(f"; {fact}" for fact in support)
    return text


# ---- prerequisites -----------------------------------------------------------------------------------------------

def prerequisite(need, facts, proposed, after=()):
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
    return transport_stable(facts, proposed, after)


def transport_stable(facts, proposed, after):
    """The order prerequisite 'transport stable': unmet while a candidate of a group it comes after is proposed;
    else read from the host - the original engine's own NCCL lines show P2P in effect - never from the absence of a
    proposal (P2P off or unread in its log is no stable transport)."""
    what = "transport stable (every transport candidate decided, or the engine's own NCCL lines show P2P in effect)"
    before = [p["id"] for p in proposed if p["group"] in after]
    if before:
        return {"kind": "order", "need": "transport_stable", "what": what, "met": False,
                "to_do": f"after {', '.join(before)} (each decided)"}
    nccl = (facts.get("scan") or {}).get("nccl") or {}
    if nccl.get("p2p_in_effect") is True:
        return {"kind": "order", "need": "transport_stable", "what": what, "met": True,
                "evidence": "the original engine's NCCL lines: P2P in effect between its ranks"}
    seen = "P2P off" if nccl.get("p2p_in_effect") is False else "no NCCL transport lines (NCCL_DEBUG=INFO unset?)"
    return {"kind": "order", "need": "transport_stable", "what": what, "met": False,
            "to_do": f"the original engine's log shows {seen}: decide the transport first (a p2p candidate), or "
                     "run the engine with NCCL_DEBUG=INFO so its transport can be read"}


def prerequisites(item, facts, proposed, source=None):
    out = [prerequisite(need, facts, proposed, item.get("after") or []) for need in item.get("requires") or []]
    if controls.uses_peer_path(item["id"]):  # every control whose traffic takes the peer path, not only p2p
        _, human = peer_facts(facts["capture"])
        out += [{"kind": "host-change", "fact": change["fact"], "what": change["what"], "met": False,
                 "to_do": "a human changes the host first, then capture.yml again (plan.yml re-checks the newest "
                          "capture)"} for change in human]
        out += [{"kind": "evidence", "what": fact["what"], "met": False, "to_do": fact["to_do"]}
                for fact in unknown_facts(facts["capture"])]
    needs = item.get("needs_effective")
    if needs:  # its proof shows only once another control's setting is in effect
        value = effective_setting(facts, {"kind": "env", "name": needs["name"]})[0]
        if value == needs["not"]:
            out.append({"kind": "order", "what": f"{needs['name']}={value} in the original: {item['id']}'s proof "
                                                 f"cannot appear before {needs['after']} is in effect",
                        "met": False, "to_do": f"after {needs['after']} is decided acceptable and promoted"})
    if source and source.get("kind") == "python-hook":  # it wins over anything a candidate unit sets
        out.append({"kind": "host-change", "what": f"{source['where']} sets it over the unit's environment",
                    "met": False, "to_do": "a human removes it from that start-up hook (the candidate cannot "
                                           "override it), then propose again"})
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
    probe = (f"the numerical-equivalence probe within its {numerics} tolerance" if numerics
             else "the numerical-equivalence probe recorded, not judged")
    return (f"the engine shows the change ({proof}); every rollout gate, the bracketed A/B cells and the endurance "
            f"cell; {probe}; restored exactly, promotion a human step")


# ---- the plan ----------------------------------------------------------------------------------------------------

def engine_switches_off(item, facts):
    """Why the engine switches this control off itself on this host (the catalog's engine_off), or None."""
    rule = item.get("engine_off")
    tp = facts["recipe"].get("tp_size")
    if not rule or not str(tp or "").isdigit():
        return None
    if interconnect(facts["capture"]) == rule["interconnect"] and int(tp) > rule["tp_over"]:
        return (f"the engine switches it off itself on more than {rule['tp_over']} GPUs over "
                f"{rule['interconnect']} (TP {tp} here): the candidate would change nothing")
    return None


def consider(item, facts):
    """(change, (value, where, kind)) for a control the host's facts suggest, or (None, reason it is not proposed)."""
    engine = facts["recipe"].get("engine")
    backend = (facts.get("scan") or {}).get("collectives", {}).get("backend")
    if engine not in item.get("set", {}):
        return None, f"the catalog has no setter for {engine}"
    single = one_gpu(facts)
    if single and (controls.uses_peer_path(item["id"]) or controls.proven_by_nccl(item.get("proof") or {})):
        return None, single
    if controls.proven_by_nccl(item.get("proof") or {}) and backend not in (None, "nccl"):
        return None, f"the engine's collectives run on {backend}, not NCCL: an NCCL control changes nothing"
    if item.get("operator_choice"):
        return None, f"{item['operator_choice']} (the catalog's {item['id']})"
    try:
        change = controls.change_for(item["id"], engine)
    except controls.ControlError:
        return None, "it takes a value no fact on this host suggests"
    value, where, kind = effective_setting(facts, change)
    if value == change.get("value") or (value is None and change.get("value") is None):
        return None, f"already at its value ({setting_text(change, value)}{' from ' + where if where else ''})"
    if value is None:
        return None, (f"no source sets {change.get('name') or 'it'} (the unit, its EnvironmentFiles, start-up hooks, "
                      "nccl.conf, the image, the engine's log): the engine's default runs, no fact suggests a change")
    off = engine_switches_off(item, facts)
    if off:
        return None, off
    return change, (value, where, kind)


def composite(facts, proposed):
    """The catalog's composite step (one of its member controls' settings per candidate), when the unit holds a
    setting of one of its members (each member's setter for this engine, from the catalog)."""
    recipe, item = facts["recipe"], controls.composite()
    engine = recipe.get("engine")
    members = [controls.entry(cid) for cid in item["one_of"].values()]
    setters = [m["set"][engine] for m in members if engine in m.get("set", {})]
    names = {s["name"] for s in setters if s.get("name")}
    groups = any(s["kind"] == controls.SPECULATIVE_KIND for s in setters)
    flags = [f for f in recipe.get("engine_args") or {}
             if f in names or (groups and f.startswith(controls.SPECULATIVE_PREFIX))]
    if not flags:
        return None
    accept = ((facts.get("scan") or {}).get("accept_length") or {}).get("value")
    return {"id": item["id"], "group": item["group"],
            "why": f"the unit sets {', '.join(flags)}" + (f"; accept length {accept} in the engine's log"
                                                           if accept is not None else ""),
            "prerequisites": prerequisites(item, facts, proposed) + [
                {"kind": "setting", "what": "one setting chosen: " + " or ".join(
                    f"{{{key}: ...}}" for key in item["one_of"]), "met": False,
                 "to_do": "the operator sets the entry's control (one at a time)"}],
            "predicted": None, "gate": gate(item)}


def original_problem(facts):
    """Why the original is no baseline to try anything against, or None: systemd says it is not active, or its
    last start crashed or never reached ready (its own log)."""
    state, scan = facts.get("unit_state") or {}, facts.get("scan") or {}
    if state and state.get("ActiveState") != "active":
        return (f"the original is not serving (ActiveState={state.get('ActiveState')}, "
                f"SubState={state.get('SubState')}): make it start cleanly first, then propose again")
    if scan.get("crashed"):
        return (f"the original's last start crashed ({scan.get('crash')}: {scan.get('cause')}): fix that first, "
                "then propose again")
    if scan and scan.get("lines") and not scan.get("ready"):
        return (f"the original's last start never logged ready (phase {scan.get('phase')}): make it reach ready "
                "first, then propose again")
    return None


def propose(facts):
    """{candidates, not_proposed, blocked} for one host, candidates in the catalog's order; every catalog control is
    either a candidate or not proposed with its reason."""
    blocked = original_problem(facts)
    if blocked:
        return {"candidates": [], "blocked": blocked,
                "not_proposed": [{"id": item["id"], "why": blocked} for item in controls.CATALOG]}
    item_of_composite = controls.composite()
    members = {controls.group(cid) for cid in item_of_composite["one_of"].values()}
    proposed, skipped = [], []
    for item in controls.CATALOG:
        if item is item_of_composite or item["group"] in members:
            continue
        change, found = consider(item, facts)
        if change is None:
            skipped.append({"id": item["id"], "why": found})
            continue
        value, where, kind = found
        proposed.append({"id": item["id"], "group": item["group"], "change": change, "source": {"kind": kind,
                                                                                          "where": where},
                         "why": why(item, change, value, facts, where), "predicted": predicted(item, facts),
                         "gate": gate(item)})
    for candidate in proposed:
        candidate["prerequisites"] = prerequisites(controls.entry(candidate["id"]), facts, [], candidate["source"])
    extra = composite(facts, proposed)
    if extra:
        proposed.append(extra)
    else:
        skipped.append({"id": item_of_composite["id"], "why": "the unit sets none of its members' settings"})
    listed = {c["id"] for c in proposed} | {s["id"] for s in skipped}
    skipped += [{"id": item["id"], "why": f"measured inside {item_of_composite['id']} (one of its settings)"}
                for item in controls.CATALOG if item["id"] not in listed]
    return {"candidates": proposed, "not_proposed": skipped, "blocked": None}


def prerequisite_line(p):
    return f"{p['what']}: " + (f"met ({p.get('evidence')})" if p["met"] else f"UNMET - {p['to_do']}")


def plan_document(host, proposal, capture_evidence=None):
    """The proposal as a candidate plan (schemas/candidate-plan.schema.json), ready for plan.yml."""
    return {"schema": PLAN_SCHEMA, "status": "proposed-not-executed" if proposal["candidates"] else "nothing-to-try",
            "trigger": f"serving-rollout propose on {host}",
            "ordered_candidates": [{"id": c["id"], "change": f"{controls.entry(c['id'])['what']} (why: {c['why']})",
                                    "gate": c["gate"],
                                    "prerequisites": c["prerequisites"]}
                                   for c in proposal["candidates"]],
            **({"support_observation": capture_evidence} if capture_evidence else {}),
            "limitations": ["Proposed from the host's captured facts; nothing was changed on the host",
                            "Driver P2P status OK is support evidence, not proof of correct or fast transfer",
                            "Promotion remains a separate human gate"]}


def report(host, unit, found, proposal, plan_command="bin/serving-rollout plan PLAN.json -i INVENTORY"):
    """report.md: the same for a person, with what was not proposed and why, and the command that runs the plan."""
    first = ([f"**Nothing is proposed: {proposal['blocked']}**", ""] if proposal.get("blocked") else
             ["**Nothing to try here: no candidate fits this host (each control's reason below); plan.json lists "
              "none.**", ""] if not proposal["candidates"] else [])
    lines = [f"# Proposal for {host} ({unit})", "", *first,
             "Read-only: nothing on the host was changed. Review the pins, "
             f"then run the plan (`{plan_command}`) once its prerequisites are met.",
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
        lines += ["No candidate.", ""]
    lines += ["## Not proposed", ""] + [f"- {s['id']}: {s['why']}" for s in proposal["not_proposed"]]
    return "\n".join(lines) + "\n"
