"""Adopt -> managed: the serving recipe (schemas/serving-recipe.schema.json) equivalent to an adopted unit,
and what of the unit a recipe cannot hold. Pure; runs on the host inside serving_recipe (managed=true),
where the raw values are, so a secret never reaches the recipe: a secret held inline is named as a
problem and left out (the render then differs there, and the proof shows it). Whether the render equals
the original is systemd's to say (unit_oracle's equality proof), never this file's."""

import re

from .recipe_render import ENGINE_MODULE, FIELD_FLAGS, FIELD_ORDER, REFERENCE
from .unit_recipe import is_secret_name, redact_argv, runtime_option_words, split_command, split_runtime, values

# The fields and flags engines accept for them besides the renderer's own (SGLang's --tp, vLLM's -tp).
FIELD_ALIASES = {"tp": ("--tp", "-tp", "--tp-size", "--tensor-parallel-size"),
                 "context": ("--context-length", "--max-model-len")}
INTEGER_FIELDS = ("tp", "context", "port")
# [Service] settings the recipe has fields for (the rest go to a drop-in of their own, word for word).
HELD_SERVICE_KEYS = {"Type", "Environment", "EnvironmentFile", "ExecStart", "ExecStartPre", "ExecStop", "User",
                     "Group", "Restart", "RestartSec", "TimeoutStartSec", "TimeoutStopSec"}
SETTING_FIELDS = {"User": "user", "Group": "group", "Restart": "restart", "RestartSec": "restart_sec",
                  "TimeoutStartSec": "timeout_start_sec", "TimeoutStopSec": "timeout_stop_sec"}
ADOPTED_DROPIN = "50-adopted.conf"
# podman/docker run options the recipe holds in fields of its own.
HELD_RUNTIME_OPTIONS = {"--name", "--rm", "--env-file", "-e", "--env"}


def _number_or_ref(value):
    text = str(value)
    return int(text) if text.isdigit() else text


def _fields(engine, args, problems):
    """The recipe's own fields (model, revision, tp, context, host, port), taken out of args."""
    out = {}
    for field in FIELD_ORDER:
        flags = dict.fromkeys((FIELD_FLAGS[engine][field],) + FIELD_ALIASES.get(field, ()))
        found = [flag for flag in flags if flag in args]
        if not found:
            continue
        value = args.pop(found[0])
        for extra in found[1:]:
            problems.append(f"engine argument {extra} repeats {found[0]} (the recipe holds one)")
            args.pop(extra)
        if value is True:
            problems.append(f"engine argument {found[0]} has no value")
            continue
        if ":-" in str(value) or ":+" in str(value):
            problems.append(f"engine argument {found[0]} {value!r}: systemd does not expand ${{VAR:-default}}, "
                            "so the engine gets these very characters")
        out[field] = _number_or_ref(value) if field in INTEGER_FIELDS else str(value)
    return out


def _engine_args(args, problems):
    out = {}
    for flag, value in args.items():
        if flag == "_":
            continue
        if re.search(r"key|token|secret|password", flag) and not (value is True or REFERENCE.match(str(value))):
            problems.append(f"engine argument {flag} holds a secret inline: the recipe takes it only as a $VAR "
                            "reference (move the value to an EnvironmentFile); left out")
            continue
        out[flag] = value if value is True else str(value)
    return out


def _environment(env, where, problems):
    out = {}
    for name, value in env.items():
        if is_secret_name(name):
            problems.append(f"{where} sets the secret-named {name} inline: the recipe takes secrets only by "
                            "reference (an EnvironmentFile, or a podman secret); left out")
            continue
        out[name] = value
    return out


def _launcher_words(recipe, args, out):
    """The launcher as written: the words before the first flag, and `-m MODULE` (which the engine's
    argument parsing reads as a flag of its own). Under `vllm serve` the model is its positional word:
    it goes to the recipe's model field."""
    command = list(recipe["engine_command"])
    if "-m" in args and len(command) == 1:
        command += ["-m", str(args.pop("-m"))]
    if len(command) == 3 and command[1] == "serve":
        out["model"] = command.pop()
    return command


def _process_runtime(recipe, command, problems):
    python = command[0] if command else ""
    if len(command) == 3 and command[1] == "-m" and command[2] == ENGINE_MODULE.get(recipe["engine"]):
        return {"kind": "process", "python": python}
    if len(command) == 2 and command[1].startswith("/") and not command[1].endswith("/serve"):
        return {"kind": "process", "python": python, "script": command[1]}
    if command and command[0].startswith("/"):
        return {"kind": "process", "command": command}  # a CLI (`vllm serve`), word for word
    problems.append(f"launcher {' '.join(command)!r} is not an absolute path: the recipe runs one")
    return {"kind": "process", "python": "/usr/bin/python3"}


def _container_runtime(recipe, command, sections, problems):
    _, argv = split_command(values(sections, "Service", "ExecStart")[0])
    tool = argv[0].rsplit("/", 1)[-1]
    if argv[0] != f"/usr/bin/{tool}":
        problems.append(f"runtime {argv[0]}: the recipe runs /usr/bin/{tool}")
    # each option's words as written (--ipc=host stays one word: systemd compares words)
    options = [word for option, _, words in runtime_option_words(split_runtime(argv)[1])
               if option not in HELD_RUNTIME_OPTIONS for word in words]
    passed = [name for name in recipe["container_flag_env"] if name not in recipe["container_inline_env"]]
    runtime = {"kind": "container", "tool": tool, "image": recipe["image"], "name": recipe["container_name"] or "",
               "options": options, "env_files": list(recipe["container_env_files"]), "pass_env": passed,
               "command": command}
    if "$" in (recipe.get("image_as_written") or ""):
        problems.append(f"the image is held in {recipe['image_as_written']} (the unit's environment): the recipe pins "
                        "the image it expands to, so ExecStart's words differ there")
    if "--rm" not in argv:
        problems.append("the container is not run with --rm: the recipe's is (removed when it exits)")
    stop = [split_command(v)[1] for v in values(sections, "Service", "ExecStop")]
    timeout = next((words[i + 1] for words in stop for i, w in enumerate(words[:-1]) if w in ("-t", "--time")), None)
    if timeout and str(timeout).isdigit():
        runtime["stop_timeout_s"] = int(timeout)
    return runtime


def _unit_settings(sections, problems):
    settings = {}
    for key, field in SETTING_FIELDS.items():
        found = values(sections, "Service", key)
        if found:
            settings[field] = _number_or_ref(found[-1])
    limits = {k: _number_or_ref(v) for name, items in sections if name == "Service" for k, v in items
              if k.startswith("Limit")}
    if limits:
        settings["limits"] = limits
    for key, field in (("After", "after"), ("Wants", "wants")):
        words = [w for v in values(sections, "Unit", key) for w in v.split()]
        if words:
            settings[field] = words
    wanted = values(sections, "Install", "WantedBy")
    if wanted:
        settings["wanted_by"] = wanted[-1]
    kept = [f"{k}={v}" for name, items in sections if name == "Service" for k, v in items
            if k not in HELD_SERVICE_KEYS and not k.startswith("Limit")]
    kept_unit = [f"{k}={v}" for name, items in sections if name == "Unit" for k, v in items
                 if k not in ("Description", "After", "Wants")]
    if [t for t in values(sections, "Service", "Type") if t != "simple"]:
        kept.append(f"Type={values(sections, 'Service', 'Type')[-1]}")
    if kept or kept_unit:
        settings["dropins"] = {ADOPTED_DROPIN: "\n".join(
            (["[Unit]", *kept_unit, ""] if kept_unit else []) + (["[Service]", *kept] if kept else [])) + "\n"}
    return settings


def _unfit(recipe):
    """Why no recipe can say what this unit runs (empty when one can): the recipe is built from the
    unit's text, so where systemd reads the text otherwise, or engine words arrive through a $VAR at
    start, a recipe would render something else."""
    out = []
    parting = [f["what"] for f in (recipe.get("systemd") or {}).get("findings", [])
               if not f["what"].startswith("environment ")]  # values inside an EnvironmentFile stay in it
    if parting:
        out.append(f"systemd does not read the unit as its text says ({'; '.join(dict.fromkeys(parting))}): "
                   "fix the unit so its text says what systemd runs, then convert it")
    # A $VAR that is a flag's value (--model-path $MODEL) stays a reference; one that brings flags is
    # named here, and a bare $VAR word of unknown content is a positional word (_launcher_problems).
    held = sorted(set((recipe.get("held_flags") or {}).values()))
    if held:
        names = ", ".join(f"${name}" for name in held)
        out.append(f"engine words held in {names} (systemd puts them in at start): a recipe holds each engine "
                   "flag itself; move them into ExecStart, then convert")
    return out


def _launcher_problems(command, args):
    """Words after the launcher that are neither a --flag nor its value: a launcher the recipe cannot
    render (a wrapper such as `env -i` in front of the engine, or words a broken line left behind)."""
    words = [word for flag, value in args.items() if flag != "_" and not flag.startswith("--")
             for word in ([flag] if value is True else [flag, str(value)])] + list(args.get("_") or [])
    if not words:
        return []
    shown = " ".join(redact_argv([*map(str, command), *map(str, words)]))  # values off the allow-list hidden
    return [f"the command {shown!r} has words after its launcher that are not --flags: a recipe runs "
            "`python -m MODULE`, a script or a CLI followed by --flags, and cannot hold these words"]


def managed_recipe(unit, recipe, sections):
    """(recipe, problems): the recipe that renders this unit as systemd reads it, and what it cannot hold
    (each problem names the place; nothing secret). None with the reasons where no recipe can say what
    the unit runs. `recipe` is unit_recipe.parse_recipe's of the specifier-expanded unit, `sections`
    that unit's sections (drop-ins merged)."""
    problems = []
    if recipe["engine"] not in FIELD_FLAGS:
        return None, [f"engine {recipe['engine']!r}: a recipe is for sglang or vllm"]
    unfit = _unfit(recipe)
    if unfit:
        return None, unfit
    args = {k: v for k, v in recipe["engine_args"].items()}
    out = {"unit": unit}
    description = values(sections, "Unit", "Description")
    if description:
        out["description"] = description[-1]
    out["engine"] = recipe["engine"]
    command = _launcher_words(recipe, args, out)
    unfit = _launcher_problems(command, args)
    if unfit:
        return None, unfit
    if recipe["runtime"] == "process":
        out["runtime"] = _process_runtime(recipe, command, problems)
    else:
        out["runtime"] = _container_runtime(recipe, command, sections, problems)
    out.update(_fields(recipe["engine"], args, problems))
    env = recipe["unit_env"] if recipe["runtime"] == "process" else \
        {k: recipe["env"][k] for k in recipe["container_inline_env"] if k in recipe["env"]}
    out["environment"] = _environment(env, "Environment=" if recipe["runtime"] == "process" else "-e", problems)
    if recipe["runtime"] != "process" and recipe["unit_env"]:
        problems.append(f"the container unit's own Environment= ({', '.join(sorted(recipe['unit_env']))}) reaches "
                        "podman, not the engine: the recipe has no place for it; left out")
    out["environment_files"] = values(sections, "Service", "EnvironmentFile")
    out["engine_args"] = _engine_args(args, problems)
    out["unit_settings"] = _unit_settings(sections, problems)
    out["output"] = "service"
    return out, problems
