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
from .unit_recipe import (  # noqa: F401  (rename_container: part of this module's surface)
    RecipeError,
    engine_args,
    merge_dropins,
    parse_recipe,
    parse_unit_text,
    rename_container,
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


def complete_facts(recipe, read_text):
    """Fill the recipe's model, TP size and context from $VAR expansion (systemd's rules,
    EnvironmentFile= over Environment=) and a --config file; returns (args, command, expanded
    argv, image, config facts). Used for the original and, parsing it back, for the candidate."""
    env = {**recipe["unit_env"], **recipe["env_file_env"]}  # systemd: EnvironmentFile= overrides Environment=
    expanded = expand_vars(recipe["argv"], env)
    _, _, image, command = split_runtime(expanded)
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
    return args, command, expanded, image, config


def adopt(unit_name, fragment_path, read_text, dropin_paths=(), home_of=lambda user: None):
    """The recipe of a unit as systemd would run it, or ShapeError with the true reason.

    read_text(path) -> str or None. Returns the recipe (unit_recipe.parse_recipe) of the
    specifier-expanded unit, with facts completed from $VAR expansion and --config files, plus
    `shape` (template, instance, specifiers used, expanded argv, config) and the env file texts.
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
    try:
        raw = merge_dropins(parse_unit_text(text), dropins)
    except RecipeError as exc:
        raise ShapeError(f"cannot parse {fragment_path}: {exc}") from exc
    user = (values(raw, "Service", "User") or ["root"])[-1]
    specs = specifier_values(unit_name, user=user, home=home_of(user))
    used = sorted({m.group(1) for _, items in raw for _, v in items for m in SPECIFIER_RE.finditer(v)} - {"%"})
    sections = expand_sections(raw, specs)
    env_texts = {}
    for ref in values(sections, "Service", "EnvironmentFile"):
        path = ref.lstrip("-")
        content = read_text(path)
        if content is None:
            if ref.startswith("-"):
                continue
            raise ShapeError(f"EnvironmentFile {path} (from {unit_name}) cannot be read")
        env_texts[path] = content
    try:
        recipe = parse_recipe(sections, env_texts)
        # A container's --env-file files are its environment: read them, then parse again.
        for path in recipe["container_env_files"]:
            content = read_text(path)
            if content is None:
                raise ShapeError(f"--env-file {path} (from {unit_name}) cannot be read")
            env_texts[path] = content
        if recipe["container_env_files"]:
            recipe = parse_recipe(sections, env_texts)
    except RecipeError as exc:
        raise ShapeError(f"cannot read {unit_name} as a serving unit: {exc}") from exc
    script = wrapper_script(recipe["argv"], read_text)
    if script:
        raise ShapeError(f"{unit_name} runs a wrapper script ({script}): its controls cannot be seen or changed "
                         "one at a time; put the engine command in ExecStart= and the control in the unit or an "
                         "EnvironmentFile")
    args, command, expanded, image, config = complete_facts(recipe, read_text)
    flag = multi_node_flag(args) or (f"--nnodes {config['nnodes']} (in {args['--config']})"
                                     if config.get("nnodes", "1") not in ("1", "") else None)
    if flag:
        raise ShapeError(f"{unit_name} runs a multi-node engine ({flag}): a one-host swap cannot restore it; "
                         "multi-node rollouts are not supported")
    recipe["shape"] = {"template": specs.get("i") is not None, "instance": specs.get("i"), "specifiers": used,
                       "expanded_argv": expanded, "config": args.get("--config"), "image_expanded": image}
    recipe["sections"] = sections  # specifier-expanded: what a candidate is rendered from
    recipe["env_file_texts"] = env_texts  # never returned by a module
    return recipe
