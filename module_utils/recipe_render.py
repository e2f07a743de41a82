"""Managed mode: a serving recipe (schemas/serving-recipe.schema.json) rendered into the unit systemd runs
- a service unit, or a Podman Quadlet .container file - and one control changed in a recipe. Pure
functions; the schema is checked on the controller (serving_rollout/recipe.py) before any of these run.
docs/managed-mode.md says what each field becomes."""

import copy
import re

from .unit_recipe import is_secret_name, join_command

# The engine's module a process runs, and the flags the recipe's own fields become.
ENGINE_MODULE = {"sglang": "sglang.launch_server", "vllm": "vllm.entrypoints.openai.api_server"}
FIELD_FLAGS = {
    "sglang": {"model": "--model-path", "revision": "--revision", "tp": "--tp-size", "context": "--context-length",
               "host": "--host", "port": "--port"},
    "vllm": {"model": "--model", "revision": "--revision", "tp": "--tensor-parallel-size",
             "context": "--max-model-len", "host": "--host", "port": "--port"},
}
FIELD_ORDER = ("model", "revision", "tp", "context", "host", "port")
# The unit's own settings: recipe key -> systemd directive.
SERVICE_SETTINGS = (("user", "User"), ("group", "Group"), ("restart", "Restart"), ("restart_sec", "RestartSec"),
                    ("timeout_start_sec", "TimeoutStartSec"), ("timeout_stop_sec", "TimeoutStopSec"))
# At the top of every managed unit: the same on every render, so a render can be compared with the host's file.
MANAGED_HEADER = ("Rendered by serving-rollout (managed mode) from the inventory's serving recipe. Do not edit:",
                  "change the recipe and converge (playbooks/converge.yml).")
REFERENCE = re.compile(r"^\$\{?[A-Za-z_][A-Za-z0-9_]*\}?$")


class RecipeRenderError(ValueError):
    """A recipe that cannot be rendered, naming the field and value."""


def _join(argv):
    """Words as systemd reads them back: quoted where needed, and '%' kept literal (systemd expands %-specifiers)."""
    return join_command([word.replace("%", "%%") for word in argv])


def _value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def recipe_problems(recipe):
    """What the schema cannot say: a secret inline, a flag given twice, a Quadlet for a process; [] when none.
    Each names the field and never the secret's value."""
    problems = []
    for name in (recipe.get("environment") or {}):
        if is_secret_name(name):
            problems.append(f"environment.{name}: a secret-named variable inline; put it in an EnvironmentFile "
                            "(environment_files) or, in a container, a podman secret (secrets)")
    flags = FIELD_FLAGS.get(recipe.get("engine"), {})
    for flag, value in (recipe.get("engine_args") or {}).items():
        if flag in flags.values():
            field = next(k for k, v in flags.items() if v == flag)
            problems.append(f"engine_args.{flag}: set by the recipe's own field {field!r}; give it there once")
        if re.search(r"key|token|secret|password", flag) and not (isinstance(value, str) and REFERENCE.match(value)):
            problems.append(f"engine_args.{flag}: a secret inline; give it as a $VAR reference to the environment "
                            "(an EnvironmentFile or a podman secret)")
    runtime = recipe.get("runtime") or {}
    podman = runtime.get("kind") == "container" and runtime.get("tool") == "podman"
    if recipe.get("output") == "quadlet" and not podman:
        problems.append(f"output: quadlet needs a podman container runtime, got {runtime.get('kind')!r}"
                        + (f" {runtime['tool']!r}" if runtime.get("tool") else ""))
    if recipe.get("secrets") and runtime.get("kind") != "container":
        problems.append("secrets: podman secrets reach a container only; a process reads its secrets from an "
                        "EnvironmentFile (environment_files)")
    if recipe.get("secrets") and runtime.get("tool") == "docker":
        problems.append("secrets: podman secrets need the podman runtime, got docker")
    return problems


def serves_positionally(recipe):
    """`vllm serve MODEL`: the CLI takes the model as its first word, not as --model."""
    launcher = _launcher(recipe)
    return bool(launcher) and launcher[-1] == "serve"


def engine_argv(recipe):
    """The engine's own arguments: the recipe's fields first (model, revision, TP, context, host, port),
    then engine_args in their order; true is a bare switch, false leaves the flag out. Under
    `vllm serve` the model is the first word."""
    flags = FIELD_FLAGS[recipe["engine"]]
    positional = serves_positionally(recipe)
    argv = [_value(recipe["model"])] if positional else []
    for field in FIELD_ORDER:
        if field == "model" and positional:
            continue
        if recipe.get(field) not in (None, ""):
            argv += [flags[field], _value(recipe[field])]
    for flag, value in (recipe.get("engine_args") or {}).items():
        if value is True:
            argv.append(flag)
        elif value is not False and value is not None:
            argv += [flag, _value(value)]
    return argv


def _launcher(recipe):
    runtime = recipe["runtime"]
    if runtime["kind"] == "process":
        if runtime.get("command"):
            return list(runtime["command"])
        return [runtime["python"], runtime["script"]] if runtime.get("script") else \
            [runtime["python"], "-m", ENGINE_MODULE[recipe["engine"]]]
    if "command" in runtime:
        return list(runtime["command"])
    return ["python3", "-m", ENGINE_MODULE["sglang"]] if recipe["engine"] == "sglang" else []  # vLLM's image runs it


def launcher_word(recipe):
    """The last word before the engine's own flags (its module or script, the image when the image runs it,
    the model under `vllm serve`): the flags follow it, in an order that means nothing to its parser."""
    image = [recipe["runtime"]["image"]] if recipe["runtime"]["kind"] == "container" else []
    model = [_value(recipe["model"])] if serves_positionally(recipe) else []
    return (image + _launcher(recipe) + model)[-1]


def container_argv(recipe):
    """`podman run` (or docker) as the service unit runs it: in the foreground, removed on exit, named;
    the runtime's options, --env-file files, variables passed by name, the environment, secrets, then
    the image and the engine's command."""
    runtime = recipe["runtime"]
    argv = [f"/usr/bin/{runtime['tool']}", "run", "--rm", "--name", runtime["name"], *runtime.get("options", [])]
    for path in runtime.get("env_files", []):
        argv += ["--env-file", path]
    for name in runtime.get("pass_env", []):
        argv += ["-e", name]
    for name, value in (recipe.get("environment") or {}).items():
        argv += ["-e", f"{name}={_value(value)}"]
    for secret in recipe.get("secrets", []):
        argv += ["--secret", f"{secret['secret']},type=env,target={secret['env']}"]
    return argv + [runtime["image"], *_launcher(recipe), *engine_argv(recipe)]


def _unit_section(recipe):
    settings = recipe.get("unit_settings") or {}
    lines = ["[Unit]", f"Description={recipe.get('description') or default_description(recipe)}"]
    lines += [f"After={name}" for name in settings.get("after", [])]
    lines += [f"Wants={name}" for name in settings.get("wants", [])]
    return lines


def default_description(recipe):
    tp = f" (TP{recipe['tp']})" if "tp" in recipe else ""
    return f"{recipe['engine']} serving {recipe['model']}{tp}, managed by serving-rollout"


def _service_settings(recipe):
    settings = recipe.get("unit_settings") or {}
    lines = [f"{directive}={_value(settings[key])}" for key, directive in SERVICE_SETTINGS if key in settings]
    lines += [f"{name}={_value(value)}" for name, value in (settings.get("limits") or {}).items()]
    return lines


def _install(recipe):
    return ["", "[Install]", f"WantedBy={(recipe.get('unit_settings') or {}).get('wanted_by', 'multi-user.target')}"]


def render_service(recipe, header=()):
    """The service unit's text: one ExecStart (and, for a container, a leftover container removed first and
    a stop by name), the unit's environment and EnvironmentFiles, its settings and install target."""
    runtime = recipe["runtime"]
    lines = [f"# {line}" for line in header] + _unit_section(recipe) + ["", "[Service]", "Type=simple"]
    lines += [f"EnvironmentFile={path}" for path in recipe.get("environment_files", [])]
    if runtime["kind"] == "process":
        lines += [f"Environment={_join([f'{k}={_value(v)}'])}" for k, v in (recipe.get("environment") or {}).items()]
        lines.append(f"ExecStart={_join(_launcher(recipe) + engine_argv(recipe))}")
    else:
        tool = f"/usr/bin/{runtime['tool']}"
        lines.append(f"ExecStartPre=-{tool} rm -f {runtime['name']}")
        lines.append(f"ExecStart={_join(container_argv(recipe))}")
        stop = runtime.get("stop_timeout_s")
        lines.append(f"ExecStop={tool} stop {f'-t {stop} ' if stop else ''}{runtime['name']}")
    lines += _service_settings(recipe) + _install(recipe)
    return "\n".join(lines) + "\n"


def render_quadlet(recipe, header=()):
    """The Quadlet .container text podman's systemd generator turns into the service (same name, .service)."""
    runtime = recipe["runtime"]
    lines = [f"# {line}" for line in header] + _unit_section(recipe) + ["", "[Container]",
                                                                       f"Image={runtime['image']}",
                                                                       f"ContainerName={runtime['name']}"]
    lines += [f"EnvironmentFile={path}" for path in runtime.get("env_files", [])]
    lines += [f"Environment={_join([f'{k}={_value(v)}'])}" for k, v in (recipe.get("environment") or {}).items()]
    lines += [f"Secret={s['secret']},type=env,target={s['env']}" for s in recipe.get("secrets", [])]
    passed = [word for name in runtime.get("pass_env", []) for word in ("-e", name)]
    if runtime.get("options") or passed:
        lines.append(f"PodmanArgs={_join([*runtime.get('options', []), *passed])}")
    if runtime.get("stop_timeout_s"):
        lines.append(f"StopTimeout={runtime['stop_timeout_s']}")
    lines.append(f"Exec={_join(_launcher(recipe) + engine_argv(recipe))}")
    service = [f"EnvironmentFile={path}" for path in recipe.get("environment_files", [])] + _service_settings(recipe)
    if service:
        lines += ["", "[Service]", *service]
    return "\n".join(lines + _install(recipe)) + "\n"


def rendered_files(recipe, header=MANAGED_HEADER):
    """Every file the recipe becomes, {path: text}: the unit (or Quadlet) and its drop-ins."""
    unit = recipe["unit"]
    if recipe.get("output", "service") == "quadlet":
        name = unit[: -len(".service")] + ".container"
        files = {f"/etc/containers/systemd/{name}": render_quadlet(recipe, header)}
        dropin_dir = f"/etc/containers/systemd/{name}.d"
    else:
        files = {f"/etc/systemd/system/{unit}": render_service(recipe, header)}
        dropin_dir = f"/etc/systemd/system/{unit}.d"
    for name, text in ((recipe.get("unit_settings") or {}).get("dropins") or {}).items():
        files[f"{dropin_dir}/{name}"] = text if text.endswith("\n") else text + "\n"
    return files


def _flag_of(change, recipe):
    """A change of an engine argument: the recipe field it is (model, tp, ...) or None."""
    flags = FIELD_FLAGS[recipe["engine"]]
    return next((field for field, flag in flags.items() if flag == change.get("name")), None)


def apply_control(recipe, change):
    """The recipe with one control changed (the controls catalog's change: kind env, arg, speculative or
    image; value None drops it). Returns a new recipe; the original is not touched."""
    out = copy.deepcopy(recipe)
    kind, name, value = change.get("kind"), change.get("name"), change.get("value")
    if kind == "env":
        env = dict(out.get("environment") or {})
        if value is None:
            if name not in env:
                raise RecipeRenderError(f"environment.{name}: not in the recipe, so there is nothing to drop")
            env.pop(name)
        else:
            env[name] = str(value)
        out["environment"] = env
    elif kind == "arg":
        field = _flag_of(change, recipe)
        if field:
            out[field] = value
        else:
            args = dict(out.get("engine_args") or {})
            if value is None:
                args.pop(name, None)
            else:
                args[name] = True if value in (True, "") else value
            out["engine_args"] = args
    elif kind == "speculative":
        args = {k: v for k, v in (out.get("engine_args") or {}).items() if not k.startswith("--speculative-")}
        for flag, flag_value in (value or {}).items():
            args[flag if flag.startswith("--") else "--" + flag.replace("_", "-")] = flag_value
        out["engine_args"] = args
    elif kind in ("image", "program"):
        _set_build(out["runtime"] or {}, kind, value)
    else:
        raise RecipeRenderError(f"change.kind: env, arg, speculative, image or program, got {kind!r}")
    return out


def _set_build(runtime, kind, value):
    """An engine upgrade: a container's image, or a process's program (its interpreter, or its command's first
    word - an entry point)."""
    wanted = "container" if kind == "image" else "process"
    if runtime.get("kind") != wanted:
        raise RecipeRenderError(f"runtime: {'an image' if kind == 'image' else 'a program'} change needs a {wanted} "
                                f"runtime, got {runtime.get('kind')!r}")
    if kind == "image":
        runtime["image"] = value
    elif runtime.get("command"):
        runtime["command"] = [value, *runtime["command"][1:]]
    else:
        runtime["python"] = value


def recipe_difference(before, after):
    """The recipe's fields that differ, as dotted paths: [{path, before, after}] (values as given)."""
    out = []

    def walk(a, b, path):
        if isinstance(a, dict) and isinstance(b, dict):
            for key in list(a) + [k for k in b if k not in a]:
                walk(a.get(key), b.get(key), f"{path}.{key}" if path else key)
        elif a != b:
            out.append({"path": path, "before": a, "after": b})

    walk(before, after, "")
    return out
