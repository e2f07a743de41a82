"""journal_scan's logic: one invocation's journal read, redacted and judged through the engine's adapter, NCCL's
reading and the operator's own patterns, and a control's proof shown as evidence may show it
(library/journal_scan.py is its wrapper)."""

import re

from .controls import ControlError, prove
from .engine_adapters import arg_effect, collectives, read_log, ready_after_s, versions_logged
from .env_files import redact_line as redact
from .env_files import secret_values
from .host_commands import ModuleFailure
from .log_lines import JOURNAL_JSON, journal_entries
from .nccl_facts import p2p_in_effect, parse_log
from .unit_recipe import REDACTED, is_public_flag, is_public_name


def proven_arg(engine, text, change):
    """A candidate's engine-argument control as the engine's own configuration dump shows it
    (engine_adapters.arg_effect); values only for allow-listed flags."""
    effect = arg_effect(engine, text, change["name"], change.get("value"))
    if not is_public_flag(change["name"]):
        if effect["reported"] is not None and not effect["proven"]:
            effect["why"] = f"{engine} reports another value of {effect['key']}"
        effect.update({k: REDACTED for k in ("expected", "reported") if effect[k] is not None})
    return effect


def shown_proof(proof, change, arg_shown=None):
    """A proof as evidence may show it: for a flag or variable off the allow-list, neither the
    candidate's value nor the one the engine reports appears (an arg's reason is proven_arg's,
    already redacted)."""
    kind, name, value = change.get("kind"), change.get("name") or "", change.get("value")
    public = is_public_flag(name) if kind == "arg" else is_public_name(name) if kind == "env" else True
    if public:
        return proof
    shown = dict(proof)
    if value not in (None, True):
        shown["expected"] = proof["expected"].replace(str(value), REDACTED)
    if proof["saw"]:
        shown["saw"] = (arg_shown or {}).get("why") or f"another value of {name} ({REDACTED})"
    return shown


def judge(engine, lines, known=(), stop_requested=False, extra=()):
    """The scan of redacted lines: the adapter's reading, NCCL's, and the operator's own patterns."""
    text = "\n".join(lines)
    read = read_log(engine, text, known=known, stop_requested=stop_requested)
    parsed = parse_log(text)
    operator = [line for line in lines if any(x.search(line) for x in extra) and line not in read["errors"]]
    return {
        "lines": len(lines),
        "ready": read["ready_logged"],
        "phase": read["phase"],
        "crashed": read["crashed"] or bool(operator),
        "crash": read["crash"] or ("operator-pattern" if operator else None),
        "crash_phase": read["crash_phase"],
        "cause": read["cause"] or (operator[0] if operator else None),
        "cause_frame": read["cause_frame"],
        "errors": read["errors"] + operator,
        "warnings": read["warnings"],
        "noise": read["noise"],
        "stuck": read["stuck"],
        "signatures": read["signatures"],
        "nccl": {"versions": sorted(set(parsed["versions"]) | set(read["nccl_versions"])),
                 "summary": parsed["summary"], "settings": parsed["settings"],
                 "p2p_in_effect": p2p_in_effect(parsed), "p2p_reasons": parsed["proof"]["reasons"],
                 "ranks": parsed["proof"]["ranks"], "nvls": parsed["nvls"],
                 "transports": sorted({t for pair in parsed["pairs"] for t in pair["transports"]})},
        "custom_all_reduce": read["custom_all_reduce"]["state"],
        "custom_all_reduce_evidence": read["custom_all_reduce"]["evidence"],
        "kv_cache_tokens": read["kv_cache_tokens"],
        "versions_logged": versions_logged(engine, text),
        "max_concurrency": read["max_concurrency"],
        "accept_length": read["accept_length"],
        "collectives": dict(zip(("backend", "evidence"), collectives(text), strict=True)),
    }


def scan_journal(run, p):
    """journal_scan's scan of one invocation of p["unit"] (its arguments as p): the journal read with `run`
    (host_commands' runner), its lines redacted with the EnvironmentFiles' secret values, judged, and the control's
    proof where asked. ModuleFailure names a bad pattern, a failed journalctl or a bad proof."""
    try:
        extra = [re.compile(x) for x in p["extra_error_patterns"]]
    except re.error as exc:
        raise ModuleFailure(f"extra_error_patterns holds a bad regular expression: {exc}") from exc
    invocation = p["invocation_id"]
    if not invocation:
        _, out, _ = run(["systemctl", "show", "-p", "InvocationID", "--value", "--", p["unit"]])
        invocation = out.strip()
    if not invocation:
        return dict(judge(p["engine"], []), invocation_id=None, excerpt=[], reason=f"{p['unit']} has no invocation")
    # the messages as journald stores them (a progress bar's carriage returns and colours would print as
    # "[N blob data]" otherwise), cut and cleaned by the one line reader
    rc, out, err = run(["journalctl", "--no-pager", *JOURNAL_JSON, f"_SYSTEMD_INVOCATION_ID={invocation}"])
    if rc != 0:
        raise ModuleFailure(f"journalctl failed for invocation {invocation}: {err.strip()}", rc=rc, stderr=err)
    secrets = secret_values(p["env_files"])
    try:
        entries = journal_entries(out)
    except ValueError as exc:
        raise ModuleFailure(str(exc)) from exc
    stamped = [(entry["time"], redact(line, secrets)) for entry in entries for line in entry["lines"]]
    lines = [line for _, line in stamped]
    scan = judge(p["engine"], lines, p["known_noise"], p["stop_requested"], extra)
    scan.update(invocation_id=invocation, excerpt=lines[-p["excerpt_lines"]:],
                ready_after_s=ready_after_s(p["engine"], stamped))
    if p["change"].get("kind") == "arg":
        scan["arg_effect"] = proven_arg(p["engine"], "\n".join(lines), p["change"])
    if p["proof"]:
        try:
            proof = prove(p["proof"], p["change"], p["engine"], "\n".join(lines),
                          {**scan, "version_report": p["version_report"]})
        except ControlError as exc:
            raise ModuleFailure(str(exc)) from exc
        scan["proof"] = shown_proof(proof, p["change"], scan.get("arg_effect"))
    return scan
