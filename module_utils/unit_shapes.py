"""Serving units as operators really write them: the shapes the tool adopts and the ones it
refuses, each with the true reason, before anything on a host changes.

- systemd specifiers (%i %I %n %N %p %P %h %u %U %%) expanded as systemd does, for a template
  instance (sglang@qwen.service); an unknown or unresolvable specifier is refused by name;
- $VAR and ${VAR} in Exec lines expanded from the unit's environment, with systemd's rules (a
  lone $VAR word splits on whitespace, ${VAR} inside a word does not);
- refused, naming the reason: Jinja template text, Podman Quadlet files, user units,
  multi-node engines (--nnodes > 1), wrapper scripts (the control must be in the unit or an
  EnvironmentFile for a one-control candidate to be provable).
Pure functions; the serving_recipe module reads the files.
"""

import re

from .nccl_config import PYTHON_RE
from .unit_oracle import adoption_findings
from .unit_recipe import (  # noqa: F401  (rename_container: part of this module's surface)
    RecipeError,
    engine_args,
    ignored_env_lines,
    join_command,
    launched_by,
    merge_dropins,
    parse_recipe,
    parse_unit_text,
    redact_argv,
    rename_container,
    shown,
    split_command,
    split_runtime,
    values,
)

SPECIFIER_RE = re.compile(r"%(.)")
VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
RUNTIMES = ("docker", "podman")
ENGINE_SCRIPTS = ("sglang", "vllm", "python", "engine_double")
SHELLS = ("sh", "bash", "dash", "zsh")
MULTI_NODE_FLAGS = ("--nnodes", "--dist-init-addr", "--node-rank", "--data-parallel-address",
                    "--headless")


class ShapeError(ValueError):
    """A unit shape the tool refuses, with the true reason."""


def unescape(text):
    """systemd's unit-name unescaping: \\xNN to the byte, '-' to '/' (for %I, %P)."""
    return re.sub(r"\\x([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), text.replace("-", "/"))


def name_parts(unit_name):
    """{prefix, instance, suffix} of a unit name; instance None for a plain unit."""
    base, dot, suffix = unit_name.rpartition(".")
    if not dot:
        raise ShapeError(f"{unit_name!r} is not a unit name (no .service suffix)")
    prefix, at, instance = base.partition("@")
    return {"prefix": prefix, "instance": instance if at else None, "suffix": suffix, "template": bool(at)}


def specifier_values(unit_name, user=None, home=None, uid=None):
    parts = name_parts(unit_name)
    values = {"n": unit_name, "N": unit_name.rpartition(".")[0], "p": parts["prefix"],
              "P": unescape(parts["prefix"]), "%": "%"}
    if parts["instance"] is not None:
        values.update(i=parts["instance"], I=unescape(parts["instance"]))
    if user:
        values["u"] = user
    if home:
        values["h"] = home
    if uid is not None:
        values["U"] = str(uid)
    return values


def expand_specifiers(value, values, where="the unit"):
    """A unit value with its %-specifiers expanded; an unknown or unresolved one is refused."""
    def one(match):
        spec = match.group(1)
        if spec not in values:
            known = {"i": "the instance (a template unit started as name@instance)", "h": "the user's home",
                     "u": "the user name", "U": "the user id", "I": "the unescaped instance"}
            why = f"has no value here ({known[spec]} is unknown)" if spec in known else "is not supported"
            raise ShapeError(f"specifier %{spec} in {where} {why}: {value!r}")
        return values[spec]
    return SPECIFIER_RE.sub(one, value)


def expand_sections(sections, values):
    """Every value of a parsed unit with its specifiers expanded (systemd does it at load)."""
    return [[name, [[key, expand_specifiers(val, values, f"{key}=")] for key, val in items]]
            for name, items in sections]


def expand_vars(argv, env):
    """An Exec argv with $VAR/${VAR} expanded from the unit's environment, as systemd does:
    a word that is exactly $VAR splits on whitespace into several words; ${VAR} (or $VAR
    inside a longer word) is substituted in place; unset variables expand to nothing."""
    out = []
    for word in argv:
        lone = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if lone:
            out += env.get(lone.group(1), "").split()
            continue
        out.append(VAR_RE.sub(lambda m: env.get(m.group(1) or m.group(2), ""), word))
    return out


def refuse_text(text, path):
    """Refusals that the text alone decides: Jinja templates and Quadlet files."""
    if re.search(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", text or "", re.S):
        raise ShapeError(f"{path} is a Jinja template, not a unit: render it (ansible.builtin.template) and "
                         "point the tool at the installed unit")
    if path.endswith((".container", ".kube", ".pod", ".volume", ".network")) or \
            re.search(r"^\[(Container|Kube|Pod)\]\s*$", text or "", re.M):
        raise ShapeError(f"{path} is a Podman Quadlet file: the tool adopts the .service it generates only "
                         "when that is written out as a unit; Quadlet sources are not supported")


def refuse_path(path):
    if re.search(r"/\.config/systemd/user/|^/etc/systemd/user/|^/usr/lib/systemd/user/", path or ""):
        raise ShapeError(f"{path} is a user unit: the tool manages system units (systemctl without --user)")


def multi_node_flag(args):
    """The flag that makes the engine span hosts, or None."""
    for flag in MULTI_NODE_FLAGS:
        value = args.get(flag)
        if value is None:
            continue
        if flag == "--nnodes" and str(value).isdigit() and int(value) <= 1:
            continue
        return f"{flag} {value}" if value is not True else flag
    return None


def wrapper_script(argv, read_text):
    """The script a unit's ExecStart runs when it is a wrapper (a shell script, or any
    executable that is not python, docker/podman or an engine's console script), else None."""
    if not argv:
        return None
    program = argv[0].rsplit("/", 1)[-1]
    if program in RUNTIMES or PYTHON_RE.search(argv[0]):
        return None
    if program in SHELLS:
        script = next((a for a in argv[1:] if not a.startswith("-")), None)
        return script or argv[0]
    if program.startswith(ENGINE_SCRIPTS) and not program.endswith((".sh", ".bash")):
        first = (read_text(argv[0]) or "").split("\n", 1)[0]
        if not first.startswith("#!") or "python" in first:
            return None  # a console script: the engine itself
        return argv[0]
    if program.endswith((".sh", ".bash")):
        return argv[0]
    first = (read_text(argv[0]) or "").split("\n", 1)[0]
    if first.startswith("#!") and "python" not in first:
        return argv[0]
    return None


def _config_facts(text):
    """TP size, model and context from a vLLM/SGLang --config file (flat `key: value` YAML)."""
    facts = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition(":")
        if not sep or line.startswith((" ", "\t", "#")):
            continue
        key, value = key.strip().replace("_", "-"), value.split("#", 1)[0].strip().strip("'\"")
        if key in ("tensor-parallel-size", "tp-size", "tp"):
            facts["tp_size"] = value
        elif key in ("model", "model-path"):
            facts["model"] = value
        elif key in ("max-model-len", "context-length"):
            facts["context_length"] = value
        elif key in ("nnodes",):
            facts["nnodes"] = value
    return facts


def held_flags(argv, env):
    """{flag: VAR} for engine flags that reach the command only through a $VAR/${VAR} word."""
    out = {}
    for word in argv:
        whole = VAR_RE.fullmatch(word)
        if whole:
            name = whole.group(1) or whole.group(2)
            for part in (env.get(name) or "").split():
                if part.startswith("-"):
                    out.setdefault(part.split("=", 1)[0], name)
    return out


def complete_facts(recipe, read_text, expanded=None, env=None):
    """Fill the recipe's model, TP size, context, image (and its digest) and engine from the
    ExecStart argv after $VAR expansion - systemd's own (`expanded`, from its probe) where given,
    else the same rules here (EnvironmentFile= over Environment=) - and a --config file; returns
    (args, command, expanded argv, image, config facts, what the command starts). Used for the
    original and, parsing it back, for the candidate."""
    if env is None:
        env = {**recipe["unit_env"], **recipe["env_file_env"]}  # systemd: EnvironmentFile= overrides Environment=
    if expanded is None:
        expanded = expand_vars(recipe["argv"], env)
    runtime, _, image, command = split_runtime(expanded)
    args, _ = engine_args(command)
    config = {}
    if isinstance(args.get("--config"), str):
        config = _config_facts(read_text(args["--config"]) or "")
    for field, flags in (("model", ("--model-path", "--model")), ("tp_size", ("--tp-size", "--tp",
                                                                             "--tensor-parallel-size", "-tp")),
                         ("context_length", ("--context-length", "--max-model-len"))):
        current = recipe.get(field)
        if current is None or str(current).startswith("$"):
            recipe[field] = next((args[f] for f in flags if isinstance(args.get(f), str)), None) or config.get(field)
    words = [w for w in command if not w.startswith("-")]
    if recipe["model"] is None and len(words) > 2 and words[0].rsplit("/", 1)[-1] == "vllm" and words[1] == "serve":
        recipe["model"] = words[2]
    if image is not None and image != recipe["image"]:
        # An image held in a $VAR is the expanded one: that is what the runtime pulls and runs.
        recipe["image_as_written"], recipe["image"] = recipe["image"], image
        recipe["image_digest"] = image.split("@", 1)[1] if "@sha256:" in image else None
    launched = launched_by(runtime, expanded, image, command)
    recipe["engine"] = launched["engine"] or "unknown"
    recipe["held_flags"] = held_flags(recipe["argv"], env)
    return args, command, expanded, image, config, launched


def _read_env_texts(sections, read_text, unit_name, strict):
    texts = {}
    for ref in values(sections, "Service", "EnvironmentFile"):
        path = ref.lstrip("-")
        content = read_text(path)
        if content is None:
            if ref.startswith("-") or not strict:
                continue
            raise ShapeError(f"EnvironmentFile {path} (from {unit_name}) cannot be read")
        texts[path] = content
    return texts


def _parse(sections, env_texts, read_text, unit_name, strict=True):
    recipe = parse_recipe(sections, env_texts)
    # A container's --env-file files are its environment: read them, then parse again.
    for path in recipe["container_env_files"]:
        content = read_text(path)
        if content is None and strict:
            raise ShapeError(f"--env-file {path} (from {unit_name}) cannot be read")
        env_texts[path] = content or ""
    return parse_recipe(sections, env_texts) if recipe["container_env_files"] else recipe


def systemd_sections(sections, systemd):
    """The unit's sections as systemd loaded them: ExecStart= written from the argv systemd split
    (when the file's text reads otherwise) and EnvironmentFile= as the list systemd loads (an
    ignored path dropped). Unchanged when both agree."""
    prefix, argv = split_command(values(sections, "Service", "ExecStart")[0])
    loaded = [f"{'-' if ignore else ''}{path}" for path, ignore in systemd["environment_files"]]
    written = values(sections, "Service", "EnvironmentFile")
    argv_true = systemd["exec_start"][0][1]
    if argv == argv_true and written == loaded:
        return sections
    exec_value = prefix + " ".join(quote_systemd(word) for word in argv_true) if argv != argv_true else None
    out = []
    for name, items in sections:
        new_items, files_done = [], False
        for key, value in items:
            if name == "Service" and key == "ExecStart" and exec_value is not None:
                new_items.append([key, exec_value])
            elif name == "Service" and key == "EnvironmentFile":
                if not files_done:
                    new_items += [["EnvironmentFile", ref] for ref in loaded]
                    files_done = True
            else:
                new_items.append([key, value])
        out.append([name, new_items])
    return out


def quote_systemd(word):
    """One argv word written back as systemd reads it: specifiers resolved already (so '%' is
    written '%%'), a backslash or blank quoted; $VAR references kept (systemd expands them)."""
    word = word.replace("%", "%%")
    return join_command([word]) if re.search(r"[\s\"'\\;]", word) or not word else word


def adopt(unit_name, fragment_path, read_text, dropin_paths=(), systemd=None):
    """The recipe of a unit as systemd runs it, or ShapeError with the true reason.

    read_text(path) -> str or None. systemd: its own reading of the unit
    (systemd_reading.unit_reading), the judge wherever it and the file's text disagree: the argv it
    split, the EnvironmentFiles it loads, the environment and $VAR expansion its probe saw.
    Returns the recipe (unit_recipe.parse_recipe) of the specifier-expanded unit as systemd reads
    it, with facts completed from $VAR expansion and --config files, plus `shape` (template,
    instance, specifiers used, expanded argv, config, launcher), `systemd` (its findings: where the
    file reads otherwise) and the env file texts.
    """
    refuse_path(fragment_path)
    text = read_text(fragment_path)
    if text is None:
        raise ShapeError(f"cannot read {fragment_path}")
    refuse_text(text, fragment_path)
    dropins = []
    for path in dropin_paths:
        dropin = read_text(path) or ""
        refuse_text(dropin, path)
        dropins.append(dropin)
    warnings = "; ".join((systemd or {}).get("warnings") or [])
    try:
        raw = merge_dropins(parse_unit_text(text), dropins)
    except RecipeError as exc:
        raise ShapeError(f"cannot parse {fragment_path}: {exc}" +
                         (f" (systemd says: {warnings})" if warnings else "")) from exc
    # %u %h %U are the service manager's (root for system units), never User='s: systemd's rule.
    specs = specifier_values(unit_name, user="root", home="/root", uid=0)
    used = sorted({m.group(1) for _, items in raw for _, v in items for m in SPECIFIER_RE.finditer(v)} - {"%"})
    sections = expand_sections(raw, specs)
    findings = []
    try:
        if systemd is not None:
            if len(systemd["exec_start"]) != 1:
                raise ShapeError(f"{unit_name} has {len(systemd['exec_start'])} ExecStart= lines as systemd loaded it"
                                 " (a serving unit runs one command)")
            # The file as the project reads it, only to name where it misleads; systemd's reading is the recipe.
            as_read = _parse(sections, _read_env_texts(sections, read_text, unit_name, False), read_text, unit_name,
                             False)
            written_files = [v.lstrip("-") for v in values(sections, "Service", "EnvironmentFile")]
            sections = systemd_sections(sections, systemd)
        env_texts = _read_env_texts(sections, read_text, unit_name, True)
        recipe = _parse(sections, env_texts, read_text, unit_name)
    except RecipeError as exc:
        raise ShapeError(f"cannot read {unit_name} as a serving unit: {exc}") from exc
    script = wrapper_script(recipe["argv"], read_text)
    if script:
        raise ShapeError(f"{unit_name} runs a wrapper script ({script}): its controls cannot be seen or changed "
                         "one at a time; put the engine command in ExecStart= and the control in the unit or an "
                         "EnvironmentFile")
    expanded = (systemd or {}).get("expanded_argv")
    args, command, expanded, image, config, launched = complete_facts(recipe, read_text, expanded,
                                                                      (systemd or {}).get("env"))
    if launched["kind"] == "launcher":
        raise ShapeError(f"{unit_name} runs a launcher, not the engine: {launched['what']}; the engine's command "
                         f"line and its controls are {launched['where']}. A one-control candidate is provable only "
                         "where the unit runs the engine (or its container) itself")
    flag = multi_node_flag(args) or (f"--nnodes {config['nnodes']} (in {args['--config']})"
                                     if config.get("nnodes", "1") not in ("1", "") else None)
    if flag:
        raise ShapeError(f"{unit_name} runs a multi-node engine ({flag}): a one-host swap cannot restore it; "
                         "multi-node rollouts are not supported")
    if systemd is not None:
        file_env = {**as_read["unit_env"], **as_read["env_file_env"]}
        findings = adoption_findings(
            {"argv": as_read["argv"], "env_files": written_files,
             "env": file_env, "expanded_argv": expand_vars(as_read["argv"], file_env)},
            systemd, shown=redact_argv)
    recipe["shape"] = {"template": specs.get("i") is not None, "instance": specs.get("i"), "specifiers": used,
                       "expanded_argv": expanded, "config": args.get("--config"), "image_expanded": image,
                       "env_prefix": sorted(launched["env"]), "env_cleared": launched["env_cleared"]}
    recipe["systemd"] = {"read": systemd is not None, "probed": (systemd or {}).get("env") is not None,
                         "findings": findings}
    recipe["sections"] = sections  # specifier-expanded, as systemd loaded them: what a candidate is rendered from
    recipe["env_file_texts"] = env_texts  # never returned by a module
    return recipe


def finding_line(finding):
    """One adoption finding as a line: what, the file's reading, systemd's, why (values redacted)."""
    if finding["file"] is None:
        return f"{finding['what']}: {finding['systemd']} ({finding['why']})"
    return (f"{finding['what']}: the file says {finding['file']!r}, systemd reads {finding['systemd']!r} "
            f"({finding['why']})")


def candidate_refusal(unit_name, recipe, change, accept_systemd_reading=False):
    """Why no candidate may be rendered from this adopted unit for `change`, or None: the file
    reads otherwise than systemd loads it (until the operator accepts systemd's reading), or an
    env control that cannot reach the engine through the unit's command."""
    # a finding blocks unless it says otherwise (an unknown key systemd ignores that names nothing the engine runs)
    findings = [f for f in recipe["systemd"]["findings"] if f.get("blocks", True)]
    if findings and not accept_systemd_reading:
        return (f"systemd does not read {unit_name} as its file appears to say ({len(findings)} finding(s): "
                f"{'; '.join(finding_line(f) for f in findings)}); fix the unit, or accept systemd's reading "
                "explicitly (serving_recipe_accept_systemd_reading: true) and the candidate is written from what "
                "systemd runs")
    if change.get("kind") != "env":
        return None
    if recipe["shape"]["env_cleared"]:
        return (f"ExecStart runs `env -i`: the unit's environment never reaches the engine, so {change.get('name')} "
                "set in the unit would change nothing")
    if change.get("name") in recipe["shape"]["env_prefix"]:
        return (f"{change.get('name')} is set on ExecStart's command line by `env`, which wins over the unit's "
                "environment: change it there")
    return docker_quotes(recipe, change)


def docker_quotes(recipe, change):
    """Why an env candidate cannot be judged from the value it appears to change, or None: docker's --env-file keeps
    quotes, so a quoted value is not the value it looks like. (Whether an NCCL variable's change changes what NCCL
    reads - an unset one is NCCL's default - is nccl_config.change_problem's, the one source of NCCL's defaults.)"""
    name, after = change.get("name"), change.get("value")
    before = recipe["env"].get(name)
    if recipe["runtime"] != "docker" or before is None or len(before) < 2 or before[0] != before[-1] \
            or before[0] not in "'\"" or before[1:-1] == after:
        return None
    return (f"docker passes the quotes of {name}={shown(name, before)} (its --env-file is not a shell file): the "
            f"engine sees {shown(name, before)}, not {shown(name, before[1:-1])}, so a candidate written against "
            f"{shown(name, before[1:-1])} would not change what it reads; remove the quotes in the --env-file first")


def ignored_note(env_texts, name):
    """The EnvironmentFile lines that look like they set `name` but that systemd ignores, as the start of a
    refusal ('' when there are none): why the tool reads the variable as unset."""
    ignored = [f"systemd ignores `{line.partition('=')[0]}={shown(name, line.partition('=')[2])}` in {path} (an "
               "EnvironmentFile is not a shell script)"
               for path, text in (env_texts or {}).items() for line in ignored_env_lines(text, name)]
    return "".join(f"{note}; " for note in ignored)
