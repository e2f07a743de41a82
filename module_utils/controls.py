"""The catalog of controls: every control the tool can change on a serving unit, one entry each.

An entry says what the control is; how each engine sets it (an environment variable or an engine
flag, with the value a plan gives, or removed); the engine's default; how the engine's own start-up
output PROVES the candidate runs with it; the evidence it needs first; the candidates it must come
after; and its expected-effect model where one exists. Everything else reads this: the plan's
selection (serving_rollout.candidate_plan), the plan executor (serving_rollout.plan), the rollout's
proof step (journal_scan -> prove), the allow-list of values evidence may show, and the docs/controls.md table
(a test keeps it equal to `table()`). Adding a control is one entry here plus its tests.

Pure: shipped to hosts as ansible.module_utils.controls and imported on the controller as
serving_rollout.module_utils.controls.
"""

import json
import re

from .engine_adapters import arg_effect, reported_args

ENGINES = ("sglang", "vllm")
# SGLang's speculative settings are flags of this prefix (the speculative control sets them as one group).
SPECULATIVE_PREFIX = "--speculative-"
SPECULATIVE_KIND = "speculative"  # the setter kind of a group of --speculative-* flags
# Evidence a control may need before it runs, and where it comes from.
EVIDENCE = {
    "capture": "a capture of the host's IOMMU/ACS/NVML/NCCL facts (capture.yml)",
    "peer_path": "a peer-path proof with verdict ok (peer-path.yml)",
    "transport_stable": "a transport candidate decided and stable (serving_recipe_evidence.transport_stable)",
}
# NCCL's list syntax for NCCL_ALGO/NCCL_PROTO: "Ring", "^Tree", "allreduce:tree;broadcast:ring".
_NCCL_LIST = r"^\^?[A-Za-z0-9]+(?:[,:;]\^?[A-Za-z0-9]+)*$"


class ControlError(ValueError):
    """A control, setting or proof refused, naming the bad value."""


def _nccl(cid, name, what, default, value, note="", path=None):
    return {
        "id": cid, "group": "nccl-tuning", "what": what, **({"path": path} if path else {}),
        "set": {engine: {"kind": "env", "name": name, "value": "$value"} for engine in ENGINES},
        "value": value, "default": default,
        "proof": {"kind": "nccl_setting", "name": name},
        "requires": ["capture"], "after": [], "effect_model": None, "numerics": "reduction-order", "note": note,
    }


def _arg(cid, group, what, setters, default, value, requires=(), after=(), numerics=None, note="", path=None):
    return {
        "id": cid, "group": group, "what": what, **({"path": path} if path else {}),
        "set": {engine: {"kind": "arg", "name": flag, "value": "$value"} for engine, flag in setters.items()},
        "value": value, "default": default, "proof": {"kind": "engine_arg"},
        "requires": list(requires), "after": list(after), "effect_model": None, "numerics": numerics, "note": note,
    }


CATALOG = [
    # ---- transport (the seed plan's first three) ----
    {"id": "p2p", "group": "transport", "path": "peer",
     "what": "NCCL peer-to-peer between the GPUs: NCCL_P2P_DISABLE=1 becomes 0 (the default; plan value "
             "\"set0\") or is removed (plan value \"drop\")",
     "set": {engine: {"kind": "env", "name": "NCCL_P2P_DISABLE", "value": "$value"} for engine in ENGINES},
     "value": {"choices": ["set0", "drop"], "unset": "set0", "map": {"set0": "0", "drop": None}},
     "default": {engine: "P2P where NCCL's topology search allows it" for engine in ENGINES},
     "proof": {"kind": "nccl_p2p"}, "requires": ["capture", "peer_path"], "after": [],
     "effect_model": "decode_probe", "numerics": "exact",
     "note": "P2P both directions on every rank pair, no SHM, from NCCL's channel lines"},
    {"id": "cumem", "group": "transport", "path": "peer",
     "what": "NCCL's cuMem allocator turned on: NCCL_CUMEM_ENABLE=1 in the unit (both engines set 0 themselves when "
             "it is unset, so removing the unit's 0 would change nothing NCCL sees)",
     "set": {engine: {"kind": "env", "name": "NCCL_CUMEM_ENABLE", "value": "1"} for engine in ENGINES},
     "value": None, "default": {"sglang": "0, set by SGLang itself (from --enable-symm-mem; always in older releases)",
                                "vllm": "0, set by vLLM at import unless the host has IMEX channels"},
     "proof": {"kind": "nccl_transport", "transports": ["P2P/CUMEM"]}, "requires": ["capture"], "after": [],
     # its proof appears only on P2P connections: with P2P off in the original it comes after p2p
     "needs_effective": {"name": "NCCL_P2P_DISABLE", "not": "1", "after": "p2p"},
     "effect_model": None, "numerics": "exact", "note": "shows only on P2P connections (via P2P/CUMEM)"},
    {"id": "custom-all-reduce", "group": "transport", "path": "peer",
     "what": "the engine's custom all-reduce kernel: --disable-custom-all-reduce is removed",
     "set": {engine: {"kind": "arg", "name": "--disable-custom-all-reduce", "value": None} for engine in ENGINES},
     "value": None, "default": {engine: "on where the engine's own P2P check passes" for engine in ENGINES},
     "proof": {"kind": "custom_all_reduce", "state": "enabled"}, "requires": ["peer_path"], "after": [],
     # both engines switch it off themselves on more than two GPUs over PCIe (no full NVLink)
     "engine_off": {"interconnect": "PCIe", "tp_over": 2},
     "effect_model": None, "numerics": "kernels",
     "note": "the engine switches it off itself on more than two PCIe GPUs: then 'no effect'"},
    {"id": "disable-custom-all-reduce", "group": "all-reduce",
     "what": "turn the engine's custom all-reduce off (--disable-custom-all-reduce added), NCCL all-reduce instead",
     "set": {engine: {"kind": "arg", "name": "--disable-custom-all-reduce", "value": True} for engine in ENGINES},
     "value": None, "default": {engine: "custom all-reduce on where supported" for engine in ENGINES},
     "proof": {"kind": "custom_all_reduce", "state": "disabled"}, "requires": [], "after": [],
     "effect_model": None, "numerics": "kernels", "note": ""},
    # ---- NCCL tuning (the 8-GPU PCIe handoff's list) ----
    _nccl("nccl-algo", "NCCL_ALGO", "NCCL's collective algorithms (Ring, Tree, NVLS, ...; NCCL's list syntax)",
          {e: "NCCL chooses per size" for e in ENGINES}, {"pattern": _NCCL_LIST},
          note="Tree failed at CUDA-graph capture with 'invalid usage' on a PCIe host"),
    _nccl("nccl-proto", "NCCL_PROTO", "NCCL's protocols (LL, LL128, Simple; NCCL's list syntax)",
          {e: "NCCL chooses per size" for e in ENGINES}, {"pattern": _NCCL_LIST}),
    _nccl("nccl-min-nchannels", "NCCL_MIN_NCHANNELS", "the fewest channels NCCL uses",
          {e: "NCCL's topology decides" for e in ENGINES}, {"type": "int", "min": 1, "max": 64}),
    _nccl("nccl-max-nchannels", "NCCL_MAX_NCHANNELS", "the most channels NCCL uses",
          {e: "NCCL's topology decides" for e in ENGINES}, {"type": "int", "min": 1, "max": 64}),
    _nccl("nccl-buffsize", "NCCL_BUFFSIZE", "NCCL's buffer per channel and peer, in bytes",
          {e: "4194304 (4 MiB)" for e in ENGINES}, {"type": "int", "min": 65536, "max": 1 << 30}),
    _nccl("nccl-nthreads", "NCCL_NTHREADS", "CUDA threads per NCCL block",
          {e: "512 on recent GPUs" for e in ENGINES}, {"choices": ["64", "128", "256", "512"]}),
    _nccl("nccl-p2p-level", "NCCL_P2P_LEVEL", "the farthest topology distance NCCL still uses P2P across",
          {e: "NCCL's choice per GPU pair" for e in ENGINES},
          {"choices": ["LOC", "NVL", "PIX", "PXB", "PHB", "SYS", "0", "1", "2", "3", "4", "5"]}, path="peer"),
    # ---- CUDA graphs and all-reduce implementations (SGLang) ----
    _arg("cuda-graph-max-bs", "cuda-graph", "the largest batch captured as a CUDA graph",
         {"sglang": "--cuda-graph-max-bs", "vllm": "--max-cudagraph-capture-size"},
         {"sglang": "by GPU memory and TP size", "vllm": "derived from max_num_seqs"},
         {"type": "int", "min": 1, "max": 4096}, note="lowering it gained 9 % on the PCIe handoff host"),
    _arg("cuda-graph-sizes", "cuda-graph", "the exact batch sizes captured as CUDA graphs (a list)",
         {"vllm": "--cudagraph-capture-sizes"}, {"vllm": "1, 2, 4, then steps of 8 up to the capture limit"},
         {"pattern": r"^\d+(?:[ ,]\d+)*$"}),
    _arg("flashinfer-allreduce-fusion", "all-reduce", "FlashInfer's fused all-reduce + residual + RMSNorm",
         {"sglang": "--enable-flashinfer-allreduce-fusion"}, {"sglang": "off"}, {"switch": True},
         requires=["peer_path"], numerics="kernels", path="peer"),
    _arg("mscclpp", "all-reduce", "MSCCL++ all-reduce for small messages", {"sglang": "--enable-mscclpp"},
         {"sglang": "off"}, {"switch": True}, requires=["peer_path"], numerics="kernels", path="peer"),
    _arg("torch-symm-mem", "all-reduce", "torch symmetric-memory all-reduce", {"sglang": "--enable-torch-symm-mem"},
         {"sglang": "off"}, {"switch": True}, requires=["peer_path"], numerics="kernels", path="peer"),
    # ---- scheduler ----
    _arg("chunked-prefill", "scheduler", "the prefill chunk budget in tokens per step",
         {"sglang": "--chunked-prefill-size", "vllm": "--max-num-batched-tokens"},
         {"sglang": "by GPU memory (e.g. 8192)", "vllm": "8192 on GPU (2048 for a CPU build)"},
         {"type": "int", "min": 16, "max": 1 << 20},
         note="SGLang's --chunked-prefill-size has been seen to change nothing: the proof names that"),
    _arg("max-num-seqs", "scheduler", "the most requests the engine runs at once",
         {"sglang": "--max-running-requests", "vllm": "--max-num-seqs"},
         {"sglang": "by KV-cache size", "vllm": "256 on GPU"}, {"type": "int", "min": 1, "max": 4096}),
    # ---- speculative decoding ----
    {"id": "speculative", "group": "speculative",
     "what": "speculative decoding settings as one group (SGLang --speculative-*, vLLM --speculative-config JSON)",
     "set": {"sglang": {"kind": "speculative", "value": "$value"},
             "vllm": {"kind": "arg", "name": "--speculative-config", "value": "$value"}},
     "value": {"speculative": True}, "default": {e: "no speculation" for e in ENGINES},
     "proof": {"kind": "engine_arg"}, "requires": [], "after": [], "effect_model": None, "numerics": None,
     "note": "a speed-up is claimed only against a no-spec arm: a candidate that changes an original's "
             "speculation is compared with that speculation, never called a speculation speed-up"},
    # ---- engine upgrades: operators report they regress more than flags do ----
    {"id": "engine-image", "group": "upgrade",
     "operator_choice": "an engine upgrade is the operator's choice of build",
     "what": "a new engine image, pinned by digest, in the container unit (every gate runs; versions recorded)",
     "set": {engine: {"kind": "image", "value": "$value"} for engine in ENGINES},
     "value": {"pattern": r"^[\w.\-/:]+@sha256:[0-9a-f]{64}$"},
     "default": {engine: "the original's image" for engine in ENGINES},
     "proof": {"kind": "engine_version"}, "requires": [], "after": [], "effect_model": None, "numerics": "kernels",
     "note": "proven when the runtime runs the new digest and the engine reports its version; container units only"},
    {"id": "engine-build", "group": "upgrade",
     "operator_choice": "an engine upgrade is the operator's choice of build",
     "what": "another installed build of the same engine for a process unit: ExecStart's program (a venv's Python "
             "or the engine's entry point) points at it; the build's versions and its parser's reading of the "
             "original's arguments are asked before any stop (every gate runs; versions recorded)",
     "set": {engine: {"kind": "program", "value": "$value"} for engine in ENGINES},
     "value": {"pattern": r"^/[^\s]+$"},
     "default": {engine: "the original's program" for engine in ENGINES},
     "proof": {"kind": "engine_version"}, "requires": [], "after": [], "effect_model": None,
     "numerics": "version-change", "endurance": True,
     "note": "proven when the candidate engine reports the build's version (its API and its start-up line); "
             "process units only (a container unit's build is its image: engine-image); a downgrade is the same"},
    # ---- the seed plan's composite id: one of its two settings per candidate, only after transport is
    # stable (the seed plan's own rule; the catalog's scheduler controls run on their own anywhere) ----
    {"id": "scheduler-and-speculation", "group": "scheduler",
     "what": "the seed plan's scheduler-or-speculation step: {chunked_prefill_size: N} or {speculative: {...}}",
     "one_of": {"chunked_prefill_size": "chunked-prefill", "speculative": "speculative"},
     "requires": ["transport_stable"], "after": ["transport"], "effect_model": None, "numerics": None, "note": ""},
]
BY_ID = {entry["id"]: entry for entry in CATALOG}
# A plan's operator-declared control: {kind, name, value, proof}; its proof is required.
CUSTOM = "custom"


def ids():
    return [entry["id"] for entry in CATALOG]


def entry(control_id):
    """The catalog entry, or ControlError listing the valid ids."""
    if control_id not in BY_ID:
        raise ControlError(f"unknown control {control_id!r}; the catalog holds: {', '.join(ids())}, and custom")
    return BY_ID[control_id]


def _plain(what, value):
    """A value that reaches a unit file or a command line: no line break or other control character (one would
    start another directive), refused naming the value."""
    if isinstance(value, dict):
        for key, item in value.items():
            _plain(what, key)
            _plain(what, item)
    elif re.search(r"[\x00-\x1f\x7f]", str(value)):
        raise ControlError(f"{what} {value!r} holds a line break or another control character: refused, nothing "
                           "was written")


def _check_value(control_id, rule, value):
    if rule.get("switch"):
        return True
    if value is None or value == "":
        raise ControlError(f"control {control_id!r} needs a value ({describe_value(rule)}), got none")
    _plain(f"the value of control {control_id!r}", value)
    text = json.dumps(value, sort_keys=True) if isinstance(value, dict) else str(value)
    if rule.get("speculative"):
        if not isinstance(value, dict) or not value:
            raise ControlError(f"control {control_id!r} needs its settings as a mapping, got {value!r}")
        return value
    if rule.get("type") == "int":
        if not re.match(r"^\d+$", text) or not rule["min"] <= int(text) <= rule["max"]:
            raise ControlError(f"control {control_id!r} needs an integer {rule['min']}-{rule['max']}, got {value!r}")
    if "choices" in rule and text not in rule["choices"]:
        raise ControlError(f"control {control_id!r} needs one of {', '.join(rule['choices'])}, got {value!r}")
    if "pattern" in rule and not re.fullmatch(rule["pattern"], text):
        raise ControlError(f"control {control_id!r}: {value!r} is not {describe_value(rule)}")
    return text


def describe_value(rule):
    if rule is None:
        return "no value"
    if rule.get("switch"):
        return "a switch (no value)"
    if rule.get("speculative"):
        return "a mapping of speculative settings"
    if rule.get("type") == "int":
        return f"an integer {rule['min']}-{rule['max']}"
    if "choices" in rule:
        return "one of " + ", ".join(rule["choices"])
    return f"a value matching {rule['pattern']}"


def _speculative_change(engine, value):
    if engine == "sglang":
        bad = [flag for flag in value if not str(flag).startswith(SPECULATIVE_PREFIX)]
        if bad:
            raise ControlError(f"SGLang's speculative settings are --speculative-* flags, got {bad!r}")
        return {"kind": "speculative", "value": value}
    return {"kind": "arg", "name": "--speculative-config", "value": json.dumps(value, sort_keys=True)}


def change_for(control_id, engine, value=None):
    """The one change a control makes on a unit of this engine: {kind, name, value} (value None
    removes it). ControlError names an unknown id, an engine the control has no setter for, a
    missing or bad value."""
    item = entry(control_id)
    if "one_of" in item:
        keys = set(value) if isinstance(value, dict) else set()
        if len(keys) != 1 or not keys <= set(item["one_of"]):
            given = "no setting" if value is None else f"{json.dumps(value)}"
            raise ControlError(f"{control_id} needs its setting: add \"control\" to the entry with exactly one of "
                               f'{{"chunked_prefill_size": N}} or {{"speculative": {{"--speculative-*": value}}}}; '
                               f"got {given}")
        key = keys.pop()
        return change_for(item["one_of"][key], engine, value[key])
    setter = item["set"].get(engine)
    if setter is None:
        have = ", ".join(item["set"])
        raise ControlError(f"control {control_id!r} has no setter for engine {engine!r} (it has: {have})")
    change = {k: v for k, v in setter.items() if k != "value"}
    wanted = setter.get("value")
    if wanted == "$value":
        rule = item["value"]
        checked = _check_value(control_id, rule, rule["unset"] if value in (None, "") and "unset" in rule else value)
        if item["group"] == "speculative":
            return _speculative_change(engine, checked)
        change["value"] = rule["map"][checked] if "map" in rule else checked  # a named choice's setting
    else:
        change["value"] = wanted
    return change


def custom_change(custom):
    """An operator-declared control: {kind: env|arg|speculative, name, value, proof}. The proof is
    required (a control nobody can prove is never measured); ControlError names what is missing."""
    if not isinstance(custom, dict) or custom.get("kind") not in ("env", "arg", "speculative") \
            or (custom["kind"] != "speculative" and not custom.get("name")) or "value" not in custom:
        raise ControlError("a custom candidate needs {kind: env|arg|speculative, name, value, proof}, "
                           f"got {custom!r}")
    for key in ("name", "value"):
        _plain(f"the custom candidate's {key}", custom.get(key, ""))
    proof = custom.get("proof")
    if not isinstance(proof, dict) or proof.get("kind") not in PROOF_KINDS:
        raise ControlError(f"a custom candidate declares how the engine proves it: proof.kind one of "
                           f"{', '.join(PROOF_KINDS)}, got {proof!r}")
    if proof["kind"] == "log_line":
        try:
            re.compile(proof.get("pattern") or "")
        except re.error as exc:
            raise ControlError(f"custom proof pattern {proof.get('pattern')!r} is not a regular expression: "
                               f"{exc}") from None
        if not proof.get("pattern"):
            raise ControlError("a log_line proof needs its pattern")
    return {k: custom[k] for k in ("kind", "name", "value") if k in custom}, proof


# The proofs read from NCCL's own log: such a control changes nothing where the engine's collectives are not NCCL's.
NCCL_PROOFS = frozenset({"nccl_p2p", "nccl_transport", "nccl_setting"})


def proven_by_nccl(proof):
    """Whether a control's proof is NCCL's own log (serving_recipe refuses it on an engine without NCCL)."""
    return (proof or {}).get("kind") in NCCL_PROOFS


def proof_for(control_id, change, custom_proof=None):
    """The proof spec of a selected change (a composite id resolves to its member's)."""
    if control_id == CUSTOM:
        return dict(custom_proof)
    item = entry(control_id)
    if "one_of" in item:
        member = "speculative" if change.get("kind") == "speculative" or change.get("name") == "--speculative-config" \
            else "chunked-prefill"
        item = entry(member)
    proof = dict(item["proof"])
    if proof["kind"] == "nccl_setting" and change.get("kind") == "env":
        proof["name"] = change["name"]
    return proof


def composite():
    """The catalog's composite entry (one of several controls' settings per candidate), or None."""
    return next((entry for entry in CATALOG if entry.get("one_of")), None)


def uses_peer_path(control_id):
    """Whether the control's traffic takes the GPUs' peer path between ranks (the catalog's "path": "peer"): its
    prerequisites follow that path's host facts, and a host of one GPU has no such path."""
    return (BY_ID.get(control_id) or {}).get("path") == "peer"


def requires(control_id):
    return [] if control_id == CUSTOM else list(entry(control_id)["requires"])


def after(control_id):
    """Groups that must have a candidate decided before this one in a plan."""
    return [] if control_id == CUSTOM else list(entry(control_id)["after"])


def group(control_id):
    return "custom" if control_id == CUSTOM else entry(control_id)["group"]


def effect_model(control_id):
    """The model that predicts this control's effect before any A/B (decode_probe), or None."""
    return None if control_id == CUSTOM else entry(control_id).get("effect_model")


def numerics(control_id):
    """How far this control may move the engine's numbers (module_utils/equivalence.py TOLERANCES):
    exact, reduction-order or kernels; None: the probe's figures are recorded, not judged."""
    return None if control_id == CUSTOM else entry(control_id).get("numerics")


def endurance(control_id):
    """Whether the endurance cell runs by default for this control: transport changes (a hang or a
    leak on a new path shows only after minutes under load) and an entry that says so (an engine build)."""
    if control_id == CUSTOM:
        return False
    item = entry(control_id)
    return item.get("endurance", item["group"] == "transport")


def public_flags():
    """Engine flags the catalog sets: known non-secret, so evidence may show their values."""
    return {s["name"] for item in CATALOG for s in item.get("set", {}).values() if s.get("kind") == "arg"}


# ---- proof from the engine's own start-up output ---------------------------------------------

def _arg_proof(engine, text, change):
    """An engine flag as the engine's configuration dump shows it; a removed flag is proven when
    the dump no longer lists it (vLLM lists only non-default args) or lists it off."""
    name, value = change["name"], change.get("value")
    if value is not None:
        effect = arg_effect(engine, text, name, "" if value is True else value)
        return effect["proven"], f"{effect['key']}={effect['expected']!r} in the engine's configuration dump", \
            effect["why"] or f"{effect['key']}={effect['reported']!r}"
    key = name.lstrip("-").replace("-", "_")
    args = reported_args(engine, text)
    wanted = f"{key} not set in the engine's configuration dump"
    if args is None:
        return False, wanted, f"{engine} logged no configuration dump"
    if args.get(key) in (None, False):
        return True, wanted, f"{key}={args.get(key)!r}" if key in args else f"{key} not listed (its default)"
    return False, wanted, f"{engine} reports {key}={args[key]!r}"


def _nccl_p2p(proof, change, engine, text, scan):
    nccl = scan.get("nccl") or {}
    reasons = "; ".join(nccl.get("p2p_reasons") or []) or "ok"
    return (bool(nccl.get("p2p_in_effect")), "NCCL P2P both directions on every rank pair, no SHM",
            f"NCCL transport {nccl.get('summary')} (P2P proof: {reasons})")


def _nccl_transport(proof, change, engine, text, scan):
    transports = (scan.get("nccl") or {}).get("transports")
    return (transports == proof["transports"], f"NCCL connections only via {', '.join(proof['transports'])}",
            f"NCCL transports {transports or 'none logged'}")


def _custom_all_reduce(proof, change, engine, text, scan):
    state = scan.get("custom_all_reduce")
    return (state == proof["state"], f"custom all-reduce {proof['state']}",
            f"custom all-reduce {state} ({scan.get('custom_all_reduce_evidence') or 'no line about it'})")


def _nccl_setting(proof, change, engine, text, scan):
    name, settings, value = proof["name"], (scan.get("nccl") or {}).get("settings") or {}, change.get("value")
    if value is None:
        proven, expected = name not in settings, f"NCCL reads no {name}"
    else:
        proven, expected = str(settings.get(name)) == str(value), f"NCCL INFO {name} set by environment to {value}"
    saw = (f"NCCL INFO {name} set by environment to {settings[name]}" if name in settings else
           f"no '{name} set by environment' line (NCCL settings logged: "
           f"{', '.join(f'{k}={v}' for k, v in sorted(settings.items())) or 'none; is NCCL_DEBUG=INFO set?'})")
    return proven, expected, saw


def _engine_arg(proof, change, engine, text, scan):
    if change.get("kind") != "speculative":
        return _arg_proof(engine, text, change)
    checks = [_arg_proof(engine, text, {"name": flag, "value": val}) for flag, val in (change["value"] or {}).items()]
    return (bool(checks) and all(c[0] for c in checks), "; ".join(c[1] for c in checks) or "speculative settings",
            "; ".join(c[2] for c in checks if not c[0]) or "all shown")


def _engine_version(proof, change, engine, text, scan):
    """An upgrade is proven by the candidate engine's own version report (its API, read once it is ready and
    handed to the scan as version_report); the NCCL its start-up log names goes beside it."""
    report = scan.get("version_report") or {}
    version = (report.get("observed") or {}).get("version")
    nccl = ", ".join((scan.get("nccl") or {}).get("versions") or []) or "not logged"
    saw = f"version {version or 'not reported'} ({report.get('reason') or 'no version report read'}); NCCL {nccl}"
    wanted = proof.get("version")  # an engine build: the release its own package said it is, before any stop
    if not wanted:
        return report.get("verdict") == "pass" and bool(version), "the candidate engine's version report (its API)", saw
    logged = scan.get("versions_logged") or []
    proven = report.get("verdict") == "pass" and version == wanted and (not logged or wanted in logged)
    return (proven, f"version {wanted} in the candidate engine's version report (its API) and start-up line",
            f"{saw}; start-up line: {', '.join(logged) or 'none'}")


def _log_line(proof, change, engine, text, scan):
    hits = [line for line in (text or "").splitlines() if re.search(proof["pattern"], line)]
    return bool(hits), f"a start-up line matching {proof['pattern']!r}", hits[0] if hits else "no such line"


PROVERS = {"nccl_p2p": _nccl_p2p, "nccl_transport": _nccl_transport, "custom_all_reduce": _custom_all_reduce,
           "nccl_setting": _nccl_setting, "engine_arg": _engine_arg, "engine_version": _engine_version,
           "log_line": _log_line}
PROOF_KINDS = tuple(PROVERS)


def prove(proof, change, engine, text, scan):
    """Whether the candidate's start-up output (and, for an upgrade, its version report) shows the control in
    effect: {kind, proven, expected, saw} (saw: what the engine said instead, for a 'no effect')."""
    kind = proof.get("kind")
    if kind not in PROVERS:
        raise ControlError(f"unknown proof kind {kind!r}; known: {', '.join(PROOF_KINDS)}")
    proven, expected, saw = PROVERS[kind](proof, change, engine, text, scan)
    return {"kind": kind, "proven": bool(proven), "expected": expected, "saw": "" if proven else saw}


# ---- the docs/controls.md table -------------------------------------------------------------------

def _setter_text(setter, rule):
    if setter["kind"] == "env":
        words = {"$value": " or ".join("removed" if v is None else v for v in rule["map"].values())
                 if "map" in (rule or {}) else "<value>", None: "removed"}
        value = words.get(setter["value"], setter["value"])
        return f"`{setter['name']}={value}`" if value != "removed" else f"`{setter['name']}` removed"
    if setter["kind"] == "speculative":
        return "`--speculative-*` flags"
    if setter["kind"] == "image":
        return "image `<name>@sha256:<digest>`"
    if setter["kind"] == "program":
        return "ExecStart's program `</path/to/build/bin/python>`"
    if setter["value"] is None:
        return f"`{setter['name']}` removed"
    return f"`{setter['name']}`" + (" `<value>`" if setter["value"] == "$value" else "")


def table():
    """The catalog as docs/controls.md's markdown table."""
    rows = ["| id | group | SGLang | vLLM | proven by | numerics | needs first |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for item in CATALOG:
        if "one_of" in item:
            sglang = vllm = "one of: " + ", ".join(f"`{k}` ({v})" for k, v in item["one_of"].items())
            proof = "its member's"
        else:
            sglang, vllm = (_setter_text(item["set"][e], item["value"]) if e in item["set"] else "-" for e in ENGINES)
            proof = item["proof"]["kind"]
        needs = ", ".join(item["requires"] + [f"after {g}" for g in item["after"]]) or "-"
        numbers = item.get("numerics") or "recorded"
        rows.append(f"| `{item['id']}` | {item['group']} | {sglang} | {vllm} | {proof} | {numbers} | {needs} |")
    return "\n".join(rows)
