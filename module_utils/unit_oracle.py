"""systemd's own reading of a unit, and the differential proof that a candidate differs from its
original in exactly one control - as systemd reads both, never as the project's parser does.

Readings come from systemd itself (D-Bus properties through busctl: every Exec line's argv as
systemd split it, Environment, EnvironmentFiles with their '-' flags; `systemctl show` for every
other setting; a transient probe for the environment and the expanded argv the engine would get).
These functions only compare readings; the module gathers them.
"""

import difflib
import hashlib
import hmac
import os
import re

from .host_commands import ModuleFailure
from .systemd_reading import ReadingError, busctl, probe
from .unit_launchers import program_index
from .unit_recipe import CHANGES, is_public_name, redact_argv
from .unit_recipe import shown as shown_value

# Exec properties whose argv systemd splits (busctl's a(sasbttttuii): path, argv, ignore, times, pid, ...).
EXEC_PROPERTIES = ("ExecStartPre", "ExecStart", "ExecStartPost", "ExecReload", "ExecStop", "ExecStopPost")

# Settings of a unit that are its identity or its runtime state, not what it runs: they differ between
# any two units (or two starts) and say nothing about the engine's command, environment or limits.
IDENTITY_OR_STATE = re.compile(
    r"^(Id|Names|Description|Documentation|FragmentPath|SourcePath|DropInPaths|UnitFilePreset|UnitFileState|"
    r"LoadState|ActiveState|FreezerState|SubState|InvocationID|MainPID|ControlPID|ExecMainPID|ExecMainCode|"
    r"ExecMainStatus|NRestarts|Result|ReloadResult|CleanResult|StatusText|StatusErrno|ControlGroup|ControlGroupId|"
    r"StateChangeTimestamp.*|.*Timestamp(Monotonic)?|Memory\w*(Current|Available|Peak)|WatchdogUSec|RestartUSecNext|"
    r"CPUUsageNSec|Tasks(Current)?|IP(Ingress|Egress)(Bytes|Packets)|IO(Read|Write)(Bytes|Operations)|"
    r"Effective(CPUs|MemoryNodes)|Exec(Start|StartPre|StartPost|Reload|Stop|StopPost|Condition)(Ex)?|"
    r"Environment|EnvironmentFiles|NeedDaemonReload|CanStart|CanStop|CanReload|CanIsolate|CanFreeze|CanClean|"
    r"CanLiveMount|Transient|Perpetual|Job|ConditionResult|AssertResult|Conflicts|ConflictedBy|RequiredBy|WantedBy|"
    r"Before|After|Triggers|TriggeredBy|References|ReferencedBy|UID|GID|Refs|StopWhenUnneeded|ActivationDetails|"
    r"InactiveExitTimestamp.*|InactiveEnterTimestamp.*|ActiveEnterTimestamp.*|ActiveExitTimestamp.*|"
    r"ConditionTimestamp.*|AssertTimestamp.*|ExecMainStartTimestamp.*|ExecMainExitTimestamp.*|"
    r"ExecMainHandoffTimestamp.*|StatusBusError|StatusVarlinkError|FileDescriptorStoreMax|NFileDescriptorStore)$"
)


def keyed_digest(key, value):
    """A value as an HMAC digest under a per-run (or per-call) key: equal values compare equal,
    nothing can be looked up."""
    return "hmac:" + hmac.new(key, str(value).encode(), hashlib.sha256).hexdigest()[:16]


def digested_values(mapping, key):
    """{name: value} with every value off the variable allow-list replaced by its keyed digest."""
    return {name: (value if is_public_name(name) else keyed_digest(key, value)) for name, value in mapping.items()}


def parse_show(text):
    """`systemctl show --all` output to {property: value} (a repeated property keeps every value)."""
    out = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        out[key] = value if key not in out else f"{out[key]}\n{value}"
    return out


def exec_argvs(busctl_data):
    """busctl --json's data of an Exec property to [{path, argv, ignore_failure}]."""
    return [{"path": item[0], "argv": list(item[1]), "ignore_failure": bool(item[2])} for item in busctl_data or []]


# Dependency properties systemctl show prints as space-separated sets, in an order that changes between two
# daemon-reloads of the same unit ("system.slice docker.service sysinit.target" then "sysinit.target ..."):
# compared as sets, never as strings.
SET_VALUED = re.compile(
    r"^(Requires|Requisite|Wants|BindsTo|PartOf|Upholds|OnFailure|OnSuccess|PropagatesReloadTo|ReloadPropagatedFrom|"
    r"PropagatesStopTo|StopPropagatedFrom|JoinsNamespaceOf|RequiresMountsFor|WantsMountsFor)$")


def _setting(key, value):
    """A setting as systemd means it: a set-valued property as its sorted words, any other as printed."""
    return sorted((value or "").split()) if SET_VALUED.match(key) else value


def reading(exec_lines, environment, environment_files, settings, effective_env=None, effective_argv=None):
    """One unit as systemd reads it. effective_env values are digests except allow-listed ones."""
    return {"exec": {k: exec_argvs(v) for k, v in exec_lines.items()},
            "environment": list(environment or []),
            "environment_files": [[path, bool(ignore)] for path, ignore in environment_files or []],
            "settings": {k: v for k, v in (settings or {}).items() if not IDENTITY_OR_STATE.match(k)},
            "effective_env": dict(effective_env or {}),
            "effective_argv": list(effective_argv or [])}


def _argv_differences(name, before, after, shown):
    out = []
    if len(before) != len(after):
        out.append({"what": f"{name}: number of lines", "before": len(before), "after": len(after)})
    for index, (a, b) in enumerate(zip(before, after, strict=False)):
        if a["path"] != b["path"]:
            out.append({"what": f"{name}[{index}] path", "before": a["path"], "after": b["path"]})
        if a["argv"] != b["argv"]:
            out.append({"what": f"{name}[{index}] argv", "before": shown(a["argv"]), "after": shown(b["argv"]),
                        "edits": word_edits(a["argv"], b["argv"]), "argv": {"before": a["argv"], "after": b["argv"]}})
    return out


def word_edits(before, after):
    """The words one argv list must lose and gain to become the other (a minimal edit, in order):
    [{"side": "before" | "after", "index": i, "word": w}] - each word with its place in its own list,
    so a word can be judged by its neighbour (a flag's value follows the flag)."""
    out = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=before, b=after, autojunk=False).get_opcodes():
        if op == "equal":
            continue
        out += [{"side": "before", "index": i, "word": before[i]} for i in range(i1, i2)]
        out += [{"side": "after", "index": j, "word": after[j]} for j in range(j1, j2)]
    return out


def differences(original, candidate, shown=lambda argv: argv):
    """Every difference between two readings: [{what, before, after}] (argv via `shown`, which
    redacts by the allow-list). Environment and EnvironmentFiles are compared by their effect:
    the effective environment systemd computes (a candidate points at its own copy of a file)."""
    out = []
    for name in EXEC_PROPERTIES:
        out += _argv_differences(name, original["exec"].get(name, []), candidate["exec"].get(name, []), shown)
    if original["effective_argv"] != candidate["effective_argv"]:
        out.append({"what": "ExecStart argv after systemd's $VAR expansion",
                    "before": shown(original["effective_argv"]), "after": shown(candidate["effective_argv"]),
                    "edits": word_edits(original["effective_argv"], candidate["effective_argv"]),
                    "argv": {"before": original["effective_argv"], "after": candidate["effective_argv"]}})
    a, b = original["effective_env"], candidate["effective_env"]
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            out.append({"what": f"environment {key}", "before": a.get(key), "after": b.get(key)})
    for flag in (True, False):  # a '-' (optional) file systemd may skip is a difference of its own
        before = sorted(p for p, ignore in original["environment_files"] if ignore is flag)
        after = sorted(p for p, ignore in candidate["environment_files"] if ignore is flag)
        if len(before) != len(after):
            out.append({"what": f"EnvironmentFiles{' (optional)' if flag else ''}: count", "before": before,
                        "after": after})
    sa, sb = original["settings"], candidate["settings"]
    for key in sorted(set(sa) | set(sb)):
        if _setting(key, sa.get(key)) != _setting(key, sb.get(key)):
            out.append({"what": f"setting {key}", "before": sa.get(key), "after": sb.get(key)})
    return out


def bare_flag(flag):
    """SGLang's and vLLM's --enable-*/--disable-* switches take no value: the word after one is never
    its value (a template that glued 'Restart=always' after one made a second word, not a value)."""
    return bool(re.match(r"--(enable|disable)-", flag or ""))


def _edit_explained(edit, argv, change, container):
    """Whether one added or removed argv word is the control's own or the candidate's identity."""
    kind, name = change.get("kind"), change.get("name") or ""
    word, index = edit["word"], edit["index"]
    previous = argv[index - 1] if index > 0 else None
    if kind == "arg" and (word == name or word.startswith(name + "=")):
        return True
    if kind == "arg" and previous == name and not bare_flag(name):
        return True  # the flag's value
    if kind == "speculative" and (word.startswith("--speculative-") or
                                  (previous or "").startswith("--speculative-")):
        return True
    if kind == "env" and previous in ("-e", "--env") and (word == name or word.startswith(name + "=")):
        return True  # the container's own -e entry of the control
    if kind == "env" and previous == "--env-file":
        return True  # the candidate's copy of the file: its content is compared as the environment
    if kind == "image" and "@sha256:" in word:
        return True  # the image word: the original's removed, the new one added
    if kind == "program" and index == program_index(argv):
        return True  # the program word (after an `env` prefix): the original's build removed, the new one added
    # the candidate's own container: its name wherever the unit names it (run --name, rm -f, stop)
    if container and word in (container, f"{container}-candidate", f"--name={container}",
                              f"--name={container}-candidate"):
        return True
    return False


def _explained(difference, change, container):
    """Whether one difference is the change itself or the candidate's expected identity."""
    if change.get("kind") == "env" and difference["what"] == f"environment {change.get('name')}":
        return True
    if change.get("kind") == "program" and difference["what"] == "ExecStart[0] path":
        return difference.get("after") == change.get("value")  # systemd's path of the program it runs
    edits = difference.get("edits")
    if edits is None:
        return False
    return all(_edit_explained(e, difference["argv"][e["side"]], change, container) for e in edits)


def _touches(difference, change):
    name = change.get("name") or ""
    if difference["what"] == f"environment {name}":
        return True
    if change.get("kind") == "speculative":
        return any(e["word"].startswith("--speculative-") for e in difference.get("edits") or [])
    if change.get("kind") in ("image", "program"):
        return any(e["word"] == change.get("value") for e in difference.get("edits") or [])
    after = (difference.get("argv") or {}).get("after") or []
    if change.get("kind") == "env" and any(e["side"] == "after" and after[e["index"] - 1:e["index"]] == ["--env-file"]
                                           for e in difference.get("edits") or []):
        # the control lives in a file the container runtime reads (its candidate copy): systemd never
        # reads it; its content is the runtime's to judge (the candidate copy is checked when written)
        return True
    argv = difference.get("argv") or {}
    return any(e["word"] == name or e["word"].startswith(name + "=")
               # a flag changed in place: only its value word differs, the word after the flag
               or (change.get("kind") == "arg" and e["index"] > 0 and not bare_flag(name)
                   and (argv.get(e["side"]) or [])[e["index"] - 1:e["index"]] == [name])
               for e in difference.get("edits") or [])


# The unit settings that decide what the engine runs and with what: who runs it, where, its limits, its view of
# the machine (devices, paths, capabilities, CPUs and memory). A difference in any other setting (restart policy,
# timeouts, ordering, logging) is named as a warning, never a second control.
ENGINE_SETTINGS = re.compile(
    r"^(WorkingDirectory|RootDirectory|RootImage|User|Group|SupplementaryGroups|DynamicUser|UMask|PassEnvironment|"
    r"UnsetEnvironment|Limit\w+|Nice|CPUAffinity\w*|NUMA\w+|CPUScheduling\w+|IOScheduling\w+|OOMScoreAdjust|"
    r"Memory(Max|High|Min|Low|Limit|SwapMax)|CPUQuota\w*|CPUWeight|AllowedCPUs|AllowedMemoryNodes|TasksMax|"
    r"Device\w+|Private(Devices|Tmp|Network|Users)|Protect\w+|(ReadOnly|ReadWrite|Inaccessible|Exec|NoExec)Paths|"
    r"Bind(ReadOnly)?Paths|TemporaryFileSystem|(State|Runtime|Cache|Logs|Configuration)Directory|"
    r"CapabilityBoundingSet|AmbientCapabilities|NoNewPrivileges|SystemCall\w+|Personality|Slice|Delegate|"
    r"IPAddress(Allow|Deny)|RestrictAddressFamilies|RestrictNamespaces)$")


def decides_the_engine(difference):
    """Whether a difference touches what the engine runs and with what: every Exec argv, the environment and its
    files, and the settings in ENGINE_SETTINGS."""
    what = difference["what"]
    return not what.startswith("setting ") or bool(ENGINE_SETTINGS.match(what[len("setting "):]))


def one_control_proof(diffs, change, container=None):
    """{ok, control, seen, unexplained, warnings}: the readings differ in the one control (and the candidate's
    identity) and in nothing else that decides what the engine runs; any other difference (a restart policy, a
    timeout) is a warning. No difference at all is refused too: no change is no candidate."""
    explained = [d for d in diffs if _explained(d, change, container)]
    others = [{k: v for k, v in d.items() if k not in ("argv",)} for d in diffs if d not in explained]
    unexplained = [d for d in others if decides_the_engine(d)]
    touched = any(_touches(d, change) for d in explained)
    return {"ok": not unexplained and touched, "control": f"{change.get('kind')} {change.get('name', '')}".strip(),
            "unexplained": unexplained, "seen": touched, "warnings": [d for d in others if d not in unexplained]}


def _flag_groups(words):
    """An argv from its first flag on as the engine's parser reads it: each flag with its value, sorted
    (a flag's place among the others means nothing to argparse), and the words before the first flag."""
    first = next((i for i, w in enumerate(words) if w.startswith("-")), len(words))
    groups, i = [], first
    while i < len(words):
        word = words[i]
        if "=" not in word and not bare_flag(word) and i + 1 < len(words) and not words[i + 1].startswith("-"):
            groups.append((word, words[i + 1]))
            i += 2
        else:
            groups.append((word,))
            i += 1
    return words[:first], sorted(groups)


def same_engine_arguments(before, after, start_after):
    """Two argv lists that differ only in the order of the engine's flags after the word `start_after`
    (the engine's launcher: its module or script): the runtime's own words keep their order."""
    if start_after not in before or start_after not in after:
        return False
    a, b = before.index(start_after) + 1, after.index(start_after) + 1
    return before[:a] == after[:b] and _flag_groups(before[a:]) == _flag_groups(after[b:])


def equal_proof(diffs, launcher_word):
    """{ok, unexplained, reordered}: two units the same in systemd's reading - every Exec argv (up to the
    order of the engine's flags after `launcher_word`), the environment the engine gets, every setting.
    Adopt -> managed: the render of a recipe against the adopted original."""
    reordered, unexplained = [], []
    for diff in diffs:
        argv = diff.get("argv")
        if argv and same_engine_arguments(argv["before"], argv["after"], launcher_word):
            reordered.append(diff["what"])
        else:
            unexplained.append({k: v for k, v in diff.items() if k not in ("argv", "edits")})
    return {"ok": not unexplained, "control": "none", "unexplained": unexplained, "reordered": reordered,
            "seen": None}


# ---- adoption: where the file and systemd's reading of it disagree ------------------------------

# Directive names a template can glue onto an Exec line by losing a newline ("... 8ExecStop=...").
GLUED_DIRECTIVE_RE = re.compile(
    r"(?:^|[^A-Za-z])((?:Exec(?:Start|StartPre|StartPost|Stop|StopPost|Reload)|Restart|RestartSec|User|Group|"
    r"Environment|EnvironmentFile|WorkingDirectory|Type|TimeoutStartSec|TimeoutStopSec|TimeoutSec|KillMode|"
    r"KillSignal|LimitNOFILE|LimitMEMLOCK|RemainAfterExit|StandardOutput|StandardError|WantedBy|After|Requires|"
    r"Wants|Description)=)")


def _shown_env(name, value):
    return None if value is None else shown_value(name, value)  # None: not set at all


# systemd's load warning for a key it does not know (systemd 252: "Unknown key 'StartLimitIntervalSec' in
# section [Service], ignoring."): systemd runs the unit without it, so it changes nothing the engine runs -
# unless its name is one of the words that decide what the engine runs and with what (a misspelt
# "Enviroment=" is the engine's environment lost).
_UNKNOWN_KEY_RE = re.compile(r"Unknown (?:key name|key|lvalue) '([^']+)'")
_ENGINE_KEY_WORDS_RE = re.compile(r"(?i)^(?:exec|envi|workingdir|user|group|root|unset|pass|umask|limit|supplementary|"
                                  r"dynamicuser|nice|cpuaffinity|numa)")


# A load warning's own words that name what the engine runs with (its command, environment, user, directories,
# limits, credentials); a warning naming none (a bad Restart= value, a line without '=') changes nothing it runs.
_ENGINE_WARNING_RE = re.compile(r"(?i)\b(?:exec\w*|environment\w*|working ?directory|user(?:name)?|group|"
                                r"executable|command(?: line)?|argument|root ?directory|umask|limit\w*|"
                                r"credential\w*|capabilit\w*)\b")


def load_warning_blocks(line):
    """Whether one of systemd's load warnings touches what the engine runs (a finding that blocks a candidate):
    an unknown key whose name is one of those words, or a warning whose message names one. Any other warning
    (systemd 252: "Failed to parse service restart specifier, ignoring: unless-stopped"; "Missing '=', ignoring
    line.") is shown and never blocks: systemd runs the unit without it, original and candidate alike."""
    unknown = _UNKNOWN_KEY_RE.search(line)
    if unknown:
        return bool(_ENGINE_KEY_WORDS_RE.search(unknown.group(1)))
    message = re.sub(r"^\S+:\d+:\s*", "", line.strip())  # the message after "path:line:"
    return bool(_ENGINE_WARNING_RE.search(message))


def adoption_findings(file_reading, systemd, shown=lambda argv: argv):
    """Every place where what the unit file appears to say (the project's parser: file_reading =
    {argv, env_files, env, expanded_argv}) differs from what systemd loaded and would run (systemd =
    systemd_reading.unit_reading). [{what, file, systemd, why}] with argv through `shown` and
    variables through the allow-list (unit_recipe.shown); systemd's own load warnings first, each with
    `blocks` (load_warning_blocks: an unknown key unrelated to the engine is only shown)."""
    out = [{"what": "systemd's load warning", "file": None, "systemd": line, "blocks": load_warning_blocks(line),
            "why": "systemd ignored part of the unit file"} for line in systemd.get("warnings") or []]
    starts = systemd["exec_start"]
    if len(starts) != 1:
        out.append({"what": "ExecStart lines", "file": 1, "systemd": len(starts),
                    "why": "systemd loaded a different number of ExecStart= lines"})
        return out
    argv = starts[0][1]
    if argv != file_reading["argv"]:
        out.append({"what": "ExecStart argv", "file": shown(file_reading["argv"]), "systemd": shown(argv),
                    "why": "systemd splits the line differently (a '\\' followed by blanks ends the line, a "
                           "comment inside a continuation is skipped)"})
    for index, word in enumerate(argv):
        glued = GLUED_DIRECTIVE_RE.search(word)
        if glued and index > 0:
            out.append({"what": f"ExecStart word {index}", "file": None, "systemd": shown([word])[0],
                        "why": f"a directive ({glued.group(1)}) is glued into the command line (a template lost a "
                               "newline): systemd passes it to the engine as an argument and never applies it"})
    loaded = [path for path, _ in systemd["environment_files"]]
    for path in file_reading["env_files"]:
        if path not in loaded:
            out.append({"what": "EnvironmentFile", "file": path, "systemd": None,
                        "why": "systemd does not load it (a quoted or relative path is ignored: 'path is not "
                               "absolute')"})
    if systemd.get("env") is not None:
        env, base, mine = systemd["env"], systemd.get("base_env") or {}, file_reading["env"]
        for name in sorted(set(mine) | {n for n, v in env.items() if base.get(n) != v}):
            if mine.get(name) == env.get(name):
                continue
            why = ("systemd reads the assignment differently (no 'export', quotes and '#' kept by systemd's own "
                   "rules)" if name in env else "systemd never sets it") if name in mine else \
                "systemd sets it and the file does not appear to"
            out.append({"what": f"environment {name}", "file": _shown_env(name, mine.get(name)),
                        "systemd": _shown_env(name, env.get(name)), "why": why})
    if systemd.get("expanded_argv") is not None and systemd["expanded_argv"] != file_reading["expanded_argv"]:
        out.append({"what": "ExecStart argv after $VAR expansion", "file": shown(file_reading["expanded_argv"]),
                    "systemd": shown(systemd["expanded_argv"]),
                    "why": "systemd expands $VAR and ${VAR} from the unit's environment with its own rules "
                           "(${VAR:-default} stays literal)"})
    return out


def running_reading(cmdline_blob, systemd_argv, shown=lambda argv: argv):
    """The running main process's argv (/proc/<MainPID>/cmdline, NUL-separated) against the argv
    systemd would start now: {argv (shown), matches}. They part when the unit or a file its $VARs
    come from changed after the process started."""
    argv = [w.decode("utf-8", "replace") for w in (cmdline_blob or b"").split(b"\0")]
    argv = argv[:-1] if argv and argv[-1] == "" else argv
    expected = list(systemd_argv or [])
    # each edited word shown at its place in its own redacted argv (a value is judged by its flag)
    sides = {"before": shown(expected), "after": shown(argv)}
    return {"argv": sides["after"], "matches": argv == expected,
            "edits": [{**e, "word": sides[e["side"]][e["index"]]} for e in word_edits(expected, argv)]}


def proof_reason(proof, judge):
    """Why a one-control proof failed, as a sentence: every other difference, or that `judge`
    (systemd, the runtime) saw no change of the control at all."""
    if proof["unexplained"]:
        listed = "; ".join(f"{d['what']}: {d['before']!r} -> {d['after']!r}" for d in proof["unexplained"])
        return f"it also differs in {len(proof['unexplained'])} other thing(s): {listed}"
    return f"{judge} sees no change of {proof['control']} at all"


def read_unit(run, unit, key, python, check_mode=False):
    """One unit as systemd reads it (its Exec lines and environment over D-Bus, its settings, and in a probe of
    its own - not in check mode - the environment and arguments it would start with); ModuleFailure names why not."""
    try:
        exec_lines = {prop: busctl(run, unit, "Service", prop) for prop in EXEC_PROPERTIES}
        environment = busctl(run, unit, "Service", "Environment")
        environment_files = busctl(run, unit, "Service", "EnvironmentFiles")
    except ReadingError as exc:
        raise ModuleFailure(str(exc)) from exc
    rc, out, err = run(["systemctl", "show", "--all", "--", unit])
    if rc != 0:
        raise ModuleFailure(f"systemctl show {unit} failed: {err.strip()}")
    settings = parse_show(out)
    if settings.get("LoadState") not in ("loaded",):
        raise ModuleFailure(f"{unit} is {settings.get('LoadState')} for systemd (LoadError "
                            f"{settings.get('LoadError', '')!r}): it cannot be proven")
    start = exec_lines["ExecStart"][0][1] if exec_lines["ExecStart"] else []
    env, argv = {}, []
    if not check_mode:
        try:
            env, argv = probe(run, python, environment, environment_files, start[1:])
        except ReadingError as exc:
            raise ModuleFailure(str(exc)) from exc
    return reading(exec_lines, environment, environment_files, settings, digested_values(env, key), argv)


def prove_units(run, p, check_mode=False, warn=print):
    """unit_oracle's proof (its arguments as p): the candidate is the original with exactly the one control changed
    (or, for change kind none, the same) in systemd's own reading; only the allow-listed views leave the host."""
    if p["change"].get("kind") not in (*CHANGES, "none"):
        raise ModuleFailure(f"change.kind must be {', '.join(CHANGES)} or none, got {p['change'].get('kind')!r}")
    key = os.urandom(32)  # digests comparable within this call only
    original = read_unit(run, p["original"], key, p["python"], check_mode)
    candidate = read_unit(run, p["candidate"], key, p["python"], check_mode)
    diffs = differences(original, candidate, shown=redact_argv)
    same = p["change"]["kind"] == "none"
    proof = equal_proof(diffs, p["launcher_word"]) if same else one_control_proof(diffs, p["change"],
                                                                                  p["container"] or None)
    # raw argv words can hold secrets: only these views leave the host
    public = [{k: d[k] for k in ("what", "before", "after")} for d in diffs]
    proof["unexplained"] = [{k: d[k] for k in ("what", "before", "after")} for d in proof["unexplained"]]
    proof["warnings"] = [{k: d[k] for k in ("what", "before", "after")} for d in proof.get("warnings") or []]
    for warning in proof["warnings"]:  # outside what the engine runs: named, never a second control
        warn(f"{p['candidate']} also differs in {warning['what']}: {warning['before']!r} -> "
             f"{warning['after']!r} (not what the engine runs or with what: not refused)")
    if check_mode:
        return {"changed": False, "differences": public,
                "proof": {"ok": None, "control": None, "unexplained": [], "seen": None}}
    if not proof["ok"] and same:
        raise ModuleFailure(f"{p['candidate']} is not the same as {p['original']} in systemd's own reading: "
                            + "; ".join(f"{d['what']}: {d['before']!r} -> {d['after']!r}"
                                        for d in proof["unexplained"]),
                            proof=proof, differences=public)
    if not proof["ok"]:
        raise ModuleFailure(f"{p['candidate']} is not {p['original']} with one control changed in systemd's own "
                            f"reading ({proof['control']}): {proof_reason(proof, 'systemd')}", proof=proof,
                            differences=public)
    return {"changed": False, "proof": proof, "differences": public}

