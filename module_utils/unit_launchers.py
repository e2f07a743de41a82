"""What a unit's command really starts: the engine itself, or a launcher that starts it.

A one-control candidate is provable only when the engine's own command line (or the container
that runs it) is in the unit. A launcher - `docker compose up`, `podman-compose`, `podman kube
play`, `docker start` of a container made elsewhere, a Python program that builds the engine's
command (`python3 launch_x.py --config x.json`, `python -m some_manager`) - holds the engine's
command line and environment somewhere the unit does not show, so every fact read from the unit
would be a guess. These are named with the place the control would have to change.

`env [-i] [NAME=value...] command` is looked through: its assignments are the command's
environment and `-i` clears everything the unit set (recorded, so an env control is refused
with that reason). Pure functions on an argv as systemd split it.
"""

import re

from .nccl_config import PYTHON_RE

RUNTIMES = ("docker", "podman", "nerdctl")
COMPOSE_PROGRAMS = ("docker-compose", "podman-compose", "nerdctl-compose")
# `python -m <module>` and `python <script>` that are the engine's own server (the lab double is
# written to be an SGLang-shaped engine).
ENGINE_MODULES = {
    "sglang.launch_server": "sglang",
    "vllm.entrypoints.openai.api_server": "vllm",
    "vllm.entrypoints.api_server": "vllm",
    "vllm.entrypoints.cli.main": "vllm",
}
ENGINE_SCRIPTS = {"launch_server.py": "sglang", "api_server.py": "vllm", "engine_double.py": "sglang"}
# Console scripts: `vllm serve ...`, `sglang serve ...` (newer SGLang), `sglang.launch_server`.
ENGINE_PROGRAMS = {"vllm": "vllm", "sglang": "sglang"}
# Images whose entrypoint is the engine (a command of flags only): by repository name.
ENGINE_IMAGES = (("vllm", "vllm"), ("sglang", "sglang"))
# Engines whose official image's entrypoint takes the model as its first word: vllm/vllm-openai's is
# `vllm serve` (`docker run ... vllm/vllm-openai@sha256:... Qwen/Qwen3-8B --tensor-parallel-size 2`).
MODEL_FIRST_ENTRYPOINTS = ("vllm",)
# Words that start a program rather than name a model, after an image.
PROGRAM_WORDS = ("sh", "bash", "env", "python", "python3", "vllm", "sglang")


def _program(word):
    return (word or "").rsplit("/", 1)[-1]


def strip_env(argv):
    """(argv after an `env` prefix, {NAME: value} it sets, cleared: bool) - `env` as the first
    word with -i/--ignore-environment, -u NAME and NAME=value words."""
    if not argv or _program(argv[0]) != "env":
        return list(argv), {}, False
    i, sets, cleared = 1, {}, False
    while i < len(argv):
        word = argv[i]
        if word in ("-i", "--ignore-environment", "-"):
            cleared = True
        elif word in ("-u", "--unset") and i + 1 < len(argv):
            i += 1
        elif word.startswith("--unset="):
            pass
        elif word.startswith("-"):
            pass  # -S, -C dir, --chdir: options of env itself
        elif re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", word):
            name, _, value = word.partition("=")
            sets[name] = value
        else:
            break
        i += 1
    return argv[i:], sets, cleared


def program_index(argv):
    """The index of the program word in an argv: after an `env` prefix (strip_env), else 0."""
    return len(argv) - len(strip_env(argv)[0])


def _python(argv):
    """(engine or None, description) for a python interpreter's argv."""
    i = 1
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "-m":
        i += 1
    if i < len(argv) and argv[i] == "-m" and i + 1 < len(argv):
        module = argv[i + 1]
        engine = ENGINE_MODULES.get(module)
        return engine, f"python -m {module}"
    if i < len(argv):
        script = _program(argv[i])
        return ENGINE_SCRIPTS.get(script), f"python {argv[i]}"
    return None, "python without a script"


def _compose(argv):
    """(launcher name, its arguments) for compose-like launchers, else None."""
    program = _program(argv[0])
    if program in COMPOSE_PROGRAMS:
        return program, argv[1:]
    if program in RUNTIMES and len(argv) > 1 and argv[1] == "compose":
        return f"{program} compose", argv[2:]
    if program == "podman" and argv[1:3] in (["kube", "play"], ["play", "kube"]):
        return f"podman {' '.join(argv[1:3])}", argv[3:]
    return None


def _compose_file(argv):
    for i, word in enumerate(argv):
        if word in ("-f", "--file") and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith("--file="):
            return word.split("=", 1)[1]
    return None


def image_engine(image):
    """The engine an image's entrypoint runs, from its repository name (vllm/vllm-openai, a
    vllm-cpu build, lmsysorg/sglang), else None."""
    name = (image or "").split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0].lower()
    return next((engine for word, engine in ENGINE_IMAGES if word in name), None)


def model_first(image, word):
    """Whether `word`, the first after `image`, is the model its engine entrypoint takes (not a program)."""
    program = _program(word)
    return image_engine(image) in MODEL_FIRST_ENTRYPOINTS and not PYTHON_RE.search(word) and \
        program not in PROGRAM_WORDS and not program.startswith(tuple(w + "." for w in PROGRAM_WORDS))


def classify(argv, image=None):
    """What `argv` (ExecStart as systemd split and expanded it; for a container, the command after
    the image, with `image` given) starts.

    Returns {kind: "engine" | "launcher", engine: "sglang" | "vllm" | None, what: a description,
    where: (launchers) where the engine's command line and the control live, env: {NAME: value}
    an `env` prefix sets, env_cleared: bool}."""
    command, sets, cleared = strip_env(argv)
    out = {"env": sets, "env_cleared": cleared, "what": " ".join(command[:3]), "engine": None}
    if image is not None and (not command or command[0].startswith("-") or model_first(image, command[0])):
        engine = image_engine(image)
        if engine:
            return {**out, "kind": "engine", "engine": engine, "what": f"the entrypoint of {image}"}
        return {**out, "kind": "launcher", "what": f"the entrypoint of image {image}",
                "where": "in the image's entrypoint, which is not known to be vLLM or SGLang: give the engine's "
                         "command after the image"}
    if not command:
        return {**out, "kind": "launcher", "what": "env with no command", "where": "nowhere"}
    program = _program(command[0])
    compose = _compose(command)
    if compose:
        name, rest = compose
        kube = [w for w in rest if not w.startswith("-")] if "kube" in name else []
        where = (kube[-1] if kube else None) or _compose_file(command) or "the compose file of its WorkingDirectory="
        return {**out, "kind": "launcher", "what": f"{name} ({' '.join(rest[:3])})",
                "where": f"in {where}, which the launcher reads: the engine's command and environment are "
                         "there, not in the unit"}
    if program in RUNTIMES and len(command) > 1 and command[1] != "run":
        return {**out, "kind": "launcher", "what": f"{program} {command[1]} (a container made elsewhere)",
                "where": "in that container's own configuration (docker/podman create), not in the unit: run "
                         "it from the unit with `run` so its command line is the unit's"}
    if program in RUNTIMES:
        return {**out, "kind": "engine", "engine": None, "what": f"{program} run"}  # the caller reads the image
    if PYTHON_RE.search(command[0]):
        engine, what = _python(command)
        if engine:
            return {**out, "kind": "engine", "engine": engine, "what": what}
        return {**out, "kind": "launcher", "what": f"a Python launcher ({' '.join(command[1:4])})",
                "where": "in what that program builds (its arguments or config file): the engine's own command "
                         "line is not in the unit"}
    engine = ENGINE_PROGRAMS.get(program.split(".", 1)[0])
    if engine:
        return {**out, "kind": "engine", "engine": engine, "what": " ".join(command[:2])}
    return {**out, "kind": "launcher", "what": f"{command[0]} (not vLLM's or SGLang's own command)",
            "where": "in that program's configuration: the unit does not run the engine's command itself"}
