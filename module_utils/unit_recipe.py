"""Serving units as recipes: parse a systemd unit (with drop-ins) into what a control is,
apply one control change to make a candidate, and diff two recipes semantically.

Pure functions; no I/O. Secrets are kept out by design, not by name: a value read from a unit,
an EnvironmentFile or a process is shown only when its variable or flag is on the allow-list of
known non-secret controls (PUBLIC_ENV_RE, PUBLIC_FLAGS); every other value reads <redacted>.
Separately, a unit holding an inline value under a secret-looking name is refused for rendering,
so a candidate never copies one.
"""

import re
import shlex

from .controls import public_flags
from .engine_adapters import is_bare_flag
from .nccl_config import PYTHON_RE
from .unit_launchers import classify, model_first, program_index

# What makes a name secret; journal_scan builds its log-line pattern from the same words.
SECRET_WORDS = r"token(?!s\b|s_|izer)|secret|passw(?:or)?d|api[_-]?key|private[_-]?key|credential"
SECRET_NAME_RE = re.compile(rf"(?i)({SECRET_WORDS})")
SECRET_ARGS = {"--api-key", "--hf-token", "--token"}
REDACTED = "<redacted>"
LIST_KEYS = {"ExecStart", "ExecStartPre", "ExecStartPost", "ExecStop", "ExecStopPost", "Environment",
             "EnvironmentFile"}
RUNTIMES = ("docker", "podman")
# docker/podman run options that take a value (the rest are flags).
RUNTIME_VALUE_OPTS = {
    "--name", "-e", "--env", "--env-file", "--gpus", "--ipc", "--shm-size", "-v", "--volume", "-p",
    "--publish", "--network", "--net", "--runtime", "--entrypoint", "-w", "--workdir", "-u", "--user",
    "--ulimit", "--device", "--cpuset-cpus", "--memory", "-m", "--label", "-l", "--log-driver",
    "--log-opt", "--restart", "--pull", "--cap-add", "--cap-drop", "--security-opt", "--mount",
    "--hostname", "-h", "--stop-timeout", "--stop-signal", "--health-cmd", "--add-host", "--tmpfs",
    "--cgroupns", "--pid", "--platform", "--secret", "--group-add", "--userns", "--uts",
}
# What a candidate must run the same as its original (max concurrency is a control: the catalog's max-num-seqs).
HELD = ("engine", "runtime", "image", "program", "model", "revision", "tp_size", "context_length", "gpus")
# The upgrade kinds (the catalog's engine-image and engine-build): each may change the held field of its name.
UPGRADES = ("image", "program")
# An engine build's program: an absolute path, no whitespace or control character (engine_build reads it too).
PROGRAM_RE = re.compile(r"^/[^\s\x00-\x1f]+$")
ENGINE_ARG_ALIASES = {
    "model": ("--model-path", "--model"),
    "revision": ("--revision",),
    "tp_size": ("--tp-size", "--tp", "--tensor-parallel-size", "-tp"),
    "context_length": ("--context-length", "--max-model-len"),
    "concurrency": ("--max-running-requests", "--max-num-seqs"),
}
CANDIDATE_SUFFIX = "-candidate"
# Known non-secret controls: the only variables whose values evidence, diffs, failure output
# and the console ever show. DOUBLE_* are the lab's test double's knobs.
PUBLIC_ENV_RE = re.compile(
    r"^(?:NCCL_[A-Z0-9_]+|CUDA_[A-Z0-9_]+|TORCH_NCCL_[A-Z0-9_]+|TORCH_CUDA_ARCH_LIST|PYTORCH_CUDA_ALLOC_CONF"
    r"|NVIDIA_VISIBLE_DEVICES|NVIDIA_DRIVER_CAPABILITIES|NVSHMEM_DISABLE_NVLS|TORCH_SYMM_MEM_DISABLE_MULTICAST"
    r"|OMP_NUM_THREADS|TOKENIZERS_PARALLELISM|HF_HOME|HF_HUB_OFFLINE|HF_HUB_ENABLE_HF_TRANSFER|TRANSFORMERS_OFFLINE"
    r"|VLLM_(?:ATTENTION_BACKEND|USE_V1|WORKER_MULTIPROC_METHOD|ALLOW_LONG_MAX_MODEL_LEN|LOGGING_LEVEL"
    r"|CPU_KVCACHE_SPACE|CPU_OMP_THREADS_BIND)"
    r"|SGLANG_(?:ENABLE|DISABLE)_[A-Z0-9_]+|SGLANG_LOG_LEVEL|DOUBLE_[A-Z0-9_]+"
    r"|PATH|HOME|LANG|LC_ALL|TZ|PYTHONUNBUFFERED)$")
# Engine and runtime flags whose values are shown (the ones the recipe understands).
PUBLIC_FLAGS = {
    "--model-path", "--model", "--revision", "--tp-size", "--tp", "--tensor-parallel-size", "-tp",
    "--context-length", "--max-model-len", "--max-running-requests", "--max-num-seqs", "--host", "--port",
    "--served-model-name", "--mem-fraction-static", "--gpu-memory-utilization", "--dtype", "--quantization",
    "--kv-cache-dtype", "--trust-remote-code", "--attention-backend", "--chunked-prefill-size",
    "--max-num-batched-tokens", "--enforce-eager",
    "--pipeline-parallel-size", "--dp-size", "--ep-size", "--nnodes", "--node-rank", "--config", "--log-level",
    "--cuda-graph-max-bs", "--schedule-policy", "--load-format", "--download-dir",
    "--name", "--gpus", "--ipc", "--shm-size", "-v", "--volume", "-p", "--publish", "--network", "--net",
    "--runtime", "--entrypoint", "-w", "--workdir", "-u", "--user", "--ulimit", "--device", "--cpuset-cpus",
    "--memory", "-m", "--restart", "--pull", "--cap-add", "--cap-drop", "--security-opt", "--mount",
    "--hostname", "-h", "--stop-timeout", "--stop-signal", "--env-file", "--cidfile", "--rm", "-d", "--init",
    "--pid", "--cgroupns", "--platform", "-t", "--time",
}
PUBLIC_FLAG_PREFIXES = ("--speculative-", "--enable-", "--disable-")
CATALOG_FLAGS = public_flags()


class RecipeError(ValueError):
    """Bad input, with a message naming the bad value."""


# ---- unit files ---------------------------------------------------------------------------

def parse_unit_text(text, ignored=None):
    """[[section, [[key, value], ...]], ...] keeping order; joins backslash continuations. A line systemd ignores
    (no '=': "Missing '=', ignoring line."; an assignment before any section) is ignored here too, as systemd runs
    the unit without it, and appended to `ignored` as (line number, the line redacted, why) when a list is given;
    systemd's own load warning for it is shown with the adoption's findings."""
    sections, current = [], None
    pending = ""
    for number, raw in enumerate((text or "").splitlines(), 1):
        line = pending + raw.strip() if pending else raw.strip()
        if line.endswith("\\") and not line.startswith(("#", ";")):
            pending = line[:-1].rstrip() + " "
            continue
        pending = ""
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = [line[1:-1], []]
            sections.append(current)
            continue
        if "=" not in line or current is None:
            if ignored is not None:
                ignored.append((number, redact_unit_line(raw.strip()),
                                "missing '='" if "=" not in line else "an assignment outside of any section"))
            continue
        key, _, value = line.partition("=")
        current[1].append([key.strip(), value.strip()])
    return sections


def merge_dropins(sections, dropin_texts):
    """The unit as systemd sees it: drop-in keys appended; an empty list assignment resets."""
    merged = [[name, [list(kv) for kv in items]] for name, items in sections]
    for text in dropin_texts:
        for name, items in parse_unit_text(text):
            target = next((s for s in merged if s[0] == name), None)
            if target is None:
                target = [name, []]
                merged.append(target)
            for key, value in items:
                if key in LIST_KEYS and value == "":
                    target[1] = [kv for kv in target[1] if kv[0] != key]
                elif key not in LIST_KEYS:
                    target[1] = [kv for kv in target[1] if kv[0] != key] + [[key, value]]
                else:
                    target[1].append([key, value])
    return merged


def values(sections, section, key):
    return [v for name, items in sections if name == section for k, v in items if k == key]


def split_command(value):
    """ExecStart value -> (prefix, argv). Quotes and backslashes as systemd reads them;
    $VAR/${VAR} and %-specifiers stay literal, as systemd expands them at run time."""
    prefix = ""
    while value and value[0] in "-@:+!":
        prefix, value = prefix + value[0], value[1:]
    try:
        return prefix, shlex.split(value, posix=True)
    except ValueError as exc:
        raise RecipeError(f"cannot split ExecStart {redact_unit_line('ExecStart=' + value)[10:]!r}: {exc}") from exc


def quote_arg(arg):
    if arg and not re.search(r"[\s\"'\\;]", arg):
        return arg
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def join_command(argv, prefix=""):
    return prefix + " ".join(quote_arg(a) for a in argv)


def parse_env_assignments(value):
    """Environment= value (several, possibly quoted, assignments) -> ordered dict."""
    out = {}
    try:
        words = shlex.split(value, posix=True)
    except ValueError as exc:
        raise RecipeError(f"cannot split Environment= line ({len(value)} characters, values not shown): {exc}") \
            from exc
    for word in words:
        key, sep, val = word.partition("=")
        if not sep:
            raise RecipeError(f"Environment= entry {shown('', word)!r} is not NAME=VALUE")
        out[key] = val
    return out


ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_env_file(text):
    """An EnvironmentFile as systemd reads it: NAME=VALUE lines, outer quotes removed. A line whose name is not a
    variable name is ignored, as systemd ignores it - `export NAME=1` (the file is not a shell script) sets
    nothing (ignored_env_lines names such lines)."""
    out = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")) or "=" not in line:
            continue
        key, _, val = line.partition("=")
        val = val.strip()
        if len(val) >= 2 and val[0] == val[-1] and val[0] in "'\"":
            val = val[1:-1]
        if ENV_NAME_RE.match(key.strip()):
            out[key.strip()] = val
    return out


def ignored_env_lines(text, name):
    """The lines of an EnvironmentFile that look like they set `name` but that systemd ignores (`export NAME=`)."""
    return [line.strip() for line in (text or "").splitlines()
            if "=" in line and not ENV_NAME_RE.match(line.partition("=")[0].strip())
            and line.partition("=")[0].split()[-1:] == [name]]


def parse_runtime_env_file(text):
    """A docker --env-file as docker reads it: NAME=VALUE lines, the value literal - its quotes reach the
    container (docker/for-linux#1208); `#` lines are comments, a line without `=` passes the host's variable."""
    out = {}
    for line in (text or "").splitlines():
        line = line.lstrip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, val = line.partition("=")
        out[key.strip()] = val
    return out


def is_secret_name(name):
    return bool(SECRET_NAME_RE.search(name or ""))


def is_public_name(name):
    """A variable on the allow-list of known non-secret controls."""
    return bool(PUBLIC_ENV_RE.match(name or ""))


def is_public_flag(flag):
    """A flag whose value evidence may show: the allow-list and every flag the controls catalog sets."""
    return flag in PUBLIC_FLAGS or flag in CATALOG_FLAGS or str(flag).startswith(PUBLIC_FLAG_PREFIXES)


def shown(name, value):
    """A variable's value as evidence may show it: itself for an allow-listed name, a reference
    ($VAR) or an empty value; else <redacted>."""
    value = "" if value is None else str(value)
    return value if is_public_name(name) or value.startswith("$") or value == "" else REDACTED


def redact_env(env):
    return {k: shown(k, v) for k, v in env.items()}


# ---- recipes ------------------------------------------------------------------------------

def split_runtime(argv):
    """(runtime, runtime_opts, image, command) for docker/podman run; (process, [], None, argv)."""
    if argv and argv[0].rsplit("/", 1)[-1] in RUNTIMES and len(argv) > 1 and argv[1] == "run":
        i = 2
        while i < len(argv) and argv[i].startswith("-"):
            opt = argv[i].split("=", 1)[0]
            i += 2 if opt in RUNTIME_VALUE_OPTS and "=" not in argv[i] else 1
        if i >= len(argv):
            raise RecipeError(f"{argv[0]} run without an image: {redact_argv(argv)!r}")
        return argv[0].rsplit("/", 1)[-1], argv[2:i], argv[i], argv[i + 1:]
    return "process", [], None, argv


def runtime_option_words(opts):
    """[(option, value, words)] of docker/podman run options: `words` as written (`--ipc=host` one word,
    `--ipc host` two)."""
    groups, i = [], 0
    while i < len(opts):
        opt, sep, val = opts[i].partition("=")
        if sep:
            groups.append((opt, val, opts[i:i + 1]))
            i += 1
        elif opt in RUNTIME_VALUE_OPTS and i + 1 < len(opts):
            groups.append((opt, opts[i + 1], opts[i:i + 2]))
            i += 2
        else:
            groups.append((opt, True, opts[i:i + 1]))
            i += 1
    return groups


def runtime_options(opts):
    """[(option, value)] of docker/podman run options."""
    return [(opt, val) for opt, val, _ in runtime_option_words(opts)]


def launched_by(runtime, argv, image, command):
    """What the unit's command starts (unit_launchers.classify): for a process its argv, for a
    container the command after the image (or the image's entrypoint)."""
    return classify(command, image=image) if runtime != "process" else classify(argv)


def detect_engine(runtime, argv, image, command):
    """The engine the unit's command runs: its program or module, or for a container its command
    or the image's entrypoint; never a guess from a word in a path."""
    return launched_by(runtime, argv, image, command)["engine"] or "unknown"


def engine_args(command):
    """Engine flags -> value (True for a bare flag), in order; positional words under '_'."""
    args = {}
    i = next((n for n, a in enumerate(command) if a.startswith("-")), len(command))
    positional = command[:i]
    while i < len(command):
        word = command[i]
        if word.startswith("-"):
            flag, sep, val = word.partition("=")
            if sep:
                args[flag] = val
                i += 1
            elif i + 1 < len(command) and not command[i + 1].startswith("--") and not is_bare_flag(flag):
                args[flag] = command[i + 1]  # a bare flag's parser takes no value: a word after it is its own
                i += 2
            else:
                args[flag] = True
                i += 1
        else:
            positional.append(word)
            i += 1
    return args, positional


def _container_options(opts, systemd_env):
    """What a container runtime's options say: its -e/--env (a pass-through `-e NAME` takes the value systemd
    gives it), --env-file files, --name and --gpus."""
    found = {"env_files": [], "name": None, "gpus": None, "inline_env": set(), "flag_env": {}}
    for opt, val in runtime_options(opts):
        if opt in ("-e", "--env"):
            key, sep, v = str(val).partition("=")
            # systemd: EnvironmentFile= overrides Environment=, for a pass-through `-e NAME` too.
            found["flag_env"][key] = v if sep else systemd_env.get(key, "")
            if sep:
                found["inline_env"].add(key)
        elif opt == "--env-file":
            found["env_files"].append(val)
        elif opt in ("--name", "--gpus"):
            found[opt[2:]] = val
    return found


def parse_recipe(sections, env_files=None):
    """What the unit runs: engine, runtime, image, model, TP, context, GPUs, env, engine args."""
    exec_values = values(sections, "Service", "ExecStart")
    if len(exec_values) != 1:
        raise RecipeError(f"the unit needs exactly one ExecStart, found {len(exec_values)}")
    prefix, argv = split_command(exec_values[0])
    runtime, opts, image, command = split_runtime(argv)
    unit_env = {}
    for value in values(sections, "Service", "Environment"):
        unit_env.update(parse_env_assignments(value))
    file_env = {}
    env_file_paths = [v.lstrip("-") for v in values(sections, "Service", "EnvironmentFile")]
    for path in env_file_paths:
        file_env.update(parse_env_file((env_files or {}).get(path, "")))
    options = _container_options(opts, {**unit_env, **file_env})
    container_env_files, name, gpus_opt = options["env_files"], options["name"], options["gpus"]
    inline_env, flag_env = options["inline_env"], options["flag_env"]
    # docker and podman: --env-file files in order, then -e over them.
    container_file_env = {}
    read_runtime_file = parse_runtime_env_file if runtime == "docker" else parse_env_file
    for path in container_env_files:
        container_file_env.update(read_runtime_file((env_files or {}).get(path, "")))
    container_env = {**container_file_env, **flag_env}
    args, positional = engine_args(command)
    # The engine sees the container's env for a container, the unit's for a process.
    env = container_env if runtime != "process" else {**unit_env, **file_env}
    recipe = {
        "runtime": runtime,
        "engine": detect_engine(runtime, argv, image, command),
        "image": image,
        "image_digest": image.split("@", 1)[1] if image and "@sha256:" in image else None,
        "container_name": name,
        "exec_prefix": prefix,
        "argv": argv,
        "engine_command": positional,
        "engine_args": args,
        "env": env,
        "unit_env": unit_env,
        "env_file_env": file_env,
        "env_files": env_file_paths + container_env_files,
        "container_env_files": container_env_files,
        "container_env_file_env": container_file_env,
        "container_flag_env": sorted(flag_env),
        "container_inline_env": sorted(inline_env),
        "gpus": env.get("CUDA_VISIBLE_DEVICES") or gpus_opt,
        # A process's engine build: its interpreter or entry point (after an `env` prefix); a container's is its image.
        "program": argv[at] if runtime == "process" and (at := program_index(argv)) < len(argv) else None,
    }
    for field, flags in ENGINE_ARG_ALIASES.items():
        recipe[field] = next((args[f] for f in flags if f in args), None)
    if recipe["model"] is None and len(positional) > 2 and positional[0].rsplit("/", 1)[-1] == "vllm" \
            and positional[1] == "serve":
        recipe["model"] = positional[2]
    if recipe["model"] is None and image and positional and model_first(image, positional[0]):
        recipe["model"] = positional[0]  # the image's entrypoint (`vllm serve`) takes it as its first word
    return recipe


# Credentials a unit may give inline (systemd.exec(5)): the value sits in the unit file itself.
INLINE_CREDENTIALS = ("SetCredential", "SetCredentialEncrypted")


def inline_credentials(sections):
    """Each SetCredential=/SetCredentialEncrypted= of the unit, as 'Directive=ID' (never the value): a candidate
    would copy it into a file of its own."""
    return [f"{key}={value.partition(':')[0]}" for key in INLINE_CREDENTIALS
            for value in values(sections, "Service", key)]


def inline_secrets(recipe):
    """Where the unit itself holds a value under a secret-looking name (not a $VAR reference),
    wherever it appears: Environment= (also when an EnvironmentFile sets the same name), a
    container's -e, or an engine argument."""
    found = []
    for source in ("unit_env",) + (("env",) if recipe["runtime"] != "process" else ()):
        for key, val in recipe[source].items():
            if is_secret_name(key) and val and not val.startswith("$"):
                if source == "env" and key not in recipe.get("container_inline_env", []):
                    continue
                found.append(f"{'Environment=' if source == 'unit_env' else '-e '}{key}")
    for flag, val in recipe["engine_args"].items():
        if (flag in SECRET_ARGS or is_secret_name(flag)) and isinstance(val, str) and not val.startswith("$"):
            found.append(f"engine argument {flag}")
    return sorted(set(found))


def redacted(recipe):
    out = dict(recipe)
    for key in ("env", "unit_env", "env_file_env"):
        out[key] = redact_env(recipe[key])
    out["engine_args"] = {k: (v if v is True or is_public_flag(k) or str(v).startswith("$") else REDACTED)
                          for k, v in recipe["engine_args"].items()}
    out["argv"] = redact_argv(recipe["argv"])
    out["engine_command"] = redact_argv(recipe["engine_command"])
    if "shape" in recipe:  # $VAR expansion brings EnvironmentFile values into the argv
        out["shape"] = {**recipe["shape"], "expanded_argv": redact_argv(recipe["shape"]["expanded_argv"])}
    return out


def redact_unit_text(text):
    """A unit file for display: continuation lines joined (a secret on one is never shown as a
    bare line) and every line through redact_unit_line."""
    lines, pending = [], ""
    for raw in (text or "").splitlines():
        line = pending + raw.strip() if pending else raw
        if line.rstrip().endswith("\\") and not line.lstrip().startswith(("#", ";")):
            pending = line.rstrip()[:-1].rstrip() + " "
            continue
        pending = ""
        lines.append(redact_unit_line(line))
    if pending:
        lines.append(redact_unit_line(pending))
    return "\n".join(lines) + "\n"


def _split_display(value):
    try:
        return shlex.split(value, posix=False)
    except ValueError:
        return None


# Directives whose values are the unit's configuration, never a credential: shown as they are. Every other
# directive (unknown ones, SetCredential=, PassEnvironment=, an X- extension) shows its key only; Exec* and
# Environment= go through the flag and variable allow-lists.
SHOWN_DIRECTIVES = frozenset((
    "Description", "Documentation", "After", "Before", "Wants", "Requires", "Requisite", "BindsTo", "PartOf",
    "Upholds", "Conflicts", "OnFailure", "OnSuccess", "StartLimitIntervalSec", "StartLimitBurst",
    "StartLimitAction", "DefaultDependencies", "ConditionPathExists", "AssertPathExists", "Type", "Restart",
    "RestartSec", "RestartSteps", "RestartMaxDelaySec", "RestartPreventExitStatus", "SuccessExitStatus",
    "RemainAfterExit", "TimeoutSec", "TimeoutStartSec", "TimeoutStopSec", "TimeoutAbortSec", "RuntimeMaxSec",
    "WatchdogSec", "KillMode", "KillSignal", "FinalKillSignal", "SendSIGKILL", "SendSIGHUP", "NotifyAccess",
    "PIDFile", "User", "Group", "SupplementaryGroups", "DynamicUser", "WorkingDirectory", "RootDirectory",
    "EnvironmentFile", "LoadCredential", "LoadCredentialEncrypted", "ImportCredential", "UMask", "Nice",
    "CPUAffinity", "NUMAPolicy", "NUMAMask", "IOSchedulingClass", "IOSchedulingPriority", "CPUQuota",
    "AllowedCPUs", "MemoryMax", "MemoryHigh", "MemoryLimit", "TasksMax", "LimitNOFILE", "LimitMEMLOCK",
    "LimitCORE", "LimitNPROC", "LimitSTACK", "OOMPolicy", "OOMScoreAdjust", "Slice", "Delegate",
    "DeviceAllow", "DevicePolicy", "PrivateTmp", "PrivateDevices", "ProtectSystem", "ProtectHome",
    "NoNewPrivileges", "ReadWritePaths", "ReadOnlyPaths", "InaccessiblePaths", "BindPaths",
    "BindReadOnlyPaths", "RuntimeDirectory", "StateDirectory", "CacheDirectory", "LogsDirectory",
    "ConfigurationDirectory", "StandardInput", "StandardOutput", "StandardError", "SyslogIdentifier",
    "WantedBy", "RequiredBy", "Alias", "Also", "DefaultInstance", "KillSignal", "ExitType", "GuessMainPID",
    # Quadlet [Container] keys that name what runs (Environment= and Exec= go through the allow-lists)
    "Image", "ContainerName", "Network", "PublishPort", "Volume", "AddDevice", "PodmanArgs", "Pull",
    "SecurityLabelDisable", "ShmSize", "HealthCmd", "Notify", "AutoUpdate",
))
# A value shaped like a credential wherever it stands (a comment, free text): Hugging Face, OpenAI-style and
# GitHub tokens, AWS key ids, JWTs, and long hex or base64 runs.
TOKEN_SHAPE = r"(?:hf_|sk-|sk_|ghp_|gho_|github_pat_|xox[abp]-|AKIA|ASIA|eyJ)[A-Za-z0-9_\-.]{8,}|\b[A-Fa-f0-9]{32,}\b"
SECRET_SHAPE_RE = re.compile(TOKEN_SHAPE)
# In free text also a long base64 run (no '/', '-' or '.': paths and model ids are not one).
FREE_TEXT_SECRET_RE = re.compile(TOKEN_SHAPE + r"|[A-Za-z0-9+]{40,}={0,2}")


def _redact_words(text):
    """Free text (a comment) word by word: NAME=value and flag values by the allow-lists (a word glued as
    Directive=NAME=value reads as that directive), and any word shaped like a credential redacted."""
    words = _split_display(text)
    if words is None:
        words = text.split()
    out = []
    for word in redact_argv(words):
        head, eq, rest = word.partition("=")
        if eq and "=" in rest and head.isalpha():  # Environment=HF_TOKEN=hf_...: the variable decides
            var, _, val = rest.partition("=")
            word = f"{head}={var}={shown(var, val)}"
        out.append(REDACTED if FREE_TEXT_SECRET_RE.search(word) and REDACTED not in word else word)
    return " ".join(out)


def _redact_comment(line):
    """A comment as it may be shown: a commented-out directive as that directive would be, free text word by
    word. systemd ignores the line; the redaction does not."""
    stripped = line.lstrip()
    marker, body = line[:len(line) - len(stripped) + 1], stripped[1:]
    key, sep, _ = body.strip().partition("=")
    if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", key.strip()):
        return marker + (" " if body.startswith(" ") else "") + redact_unit_line(body.strip())
    return marker + (" " + _redact_words(body) if body.strip() else body)


def redact_unit_line(line):
    """A unit-file line as it may be shown, whatever systemd does with it: Exec* values through redact_argv,
    Environment= assignments by the variable allow-list, directives of SHOWN_DIRECTIVES as they are, every
    other directive's value redacted (SetCredential=, unknown keys), comments through the same allow-lists (a
    commented-out directive as that directive), a line that cannot be read as its key only."""
    key, sep, value = line.partition("=")
    name = key.strip()
    if name.startswith(("#", ";")) or (not sep and line.lstrip().startswith(("#", ";"))):
        return _redact_comment(line)
    if name.startswith("[") or (not sep and line.strip().startswith("[")):
        return line if re.fullmatch(r"\s*\[[A-Za-z0-9 _.-]*\]\s*", line) else REDACTED
    if not sep:
        return line if not line.strip() else REDACTED
    if name.startswith("Exec"):
        prefix = ""
        body = value.strip()
        while body and body[0] in "-@:+!":
            prefix, body = prefix + body[0], body[1:]
        words = _split_display(body)
        return f"{key}={prefix}{' '.join(redact_argv(words))}" if words is not None else f"{key}={REDACTED}"
    if name == "Environment":
        words = _split_display(value.strip())
        if words is None:
            return f"{key}={REDACTED}"
        shown_words = []
        for word in words:
            quoted = word[:1] in "'\"" and word[-1:] == word[:1]
            inner = word[1:-1] if quoted else word
            var, eq, val = inner.partition("=")
            text = f"{var}={shown(var, val)}" if eq else REDACTED
            shown_words.append(f"{word[0]}{text}{word[0]}" if quoted else text)
        return f"{key}={' '.join(shown_words)}"
    if name in SHOWN_DIRECTIVES and not SECRET_SHAPE_RE.search(value):
        return line
    return f"{key}={REDACTED}" if value.strip() else line


def redact_argv(argv):
    """An argv as it may be shown: flags always, their values only for allow-listed flags (or
    $VAR references), NAME=value words and `-e NAME=value` by the variable allow-list;
    positional words (programs, scripts, subcommands, images, model ids) as they are."""
    out, value_of = [], None
    for word in argv:
        bare = word.strip("'\"")
        if value_of is not None and bare.startswith("--"):
            value_of = None  # the previous flag was bare
        if value_of is not None:
            if value_of in ("-e", "--env"):
                var, eq, val = bare.partition("=")
                out.append(f"{var}={shown(var, val)}" if eq else word)
            else:
                out.append(word if is_public_flag(value_of) or bare.startswith("$") else REDACTED)
            value_of = None
            continue
        if bare.startswith("-") and len(bare) > 1:
            flag, eq, val = bare.partition("=")
            if eq:
                if flag in ("-e", "--env"):
                    var, eq2, inner = val.partition("=")
                    out.append(f"{flag}={var}={shown(var, inner)}" if eq2 else word)
                else:
                    out.append(word if is_public_flag(flag) or val.startswith("$") else f"{flag}={REDACTED}")
            else:
                out.append(word)
                value_of = flag
            continue
        var, eq, val = bare.partition("=")
        if eq and re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", var):
            out.append(f"{var}={shown(var, val)}")
        else:
            out.append(word)
    return out


# ---- controls and diffs -------------------------------------------------------------------

def controls(recipe):
    """Flat control -> value map: held fields, env:NAME, arg:--flag, speculative (one group).
    Raw values, for comparing; display_difference shows them."""
    out = {field: recipe.get(field) for field in HELD}
    for key, val in recipe["env"].items():
        out[f"env:{key}"] = val
    speculative = {}
    for flag, val in recipe["engine_args"].items():
        if flag.startswith("--speculative-"):
            speculative[flag] = val
        elif not any(flag in flags for field, flags in ENGINE_ARG_ALIASES.items() if field in HELD):
            out[f"arg:{flag}"] = val
    if speculative:
        out["speculative"] = speculative
    return out


def display_value(control, value):
    """A control's value as it may be shown (the allow-lists; held fields are facts)."""
    if value is None or value is True or control in HELD or control == "speculative":
        return value
    kind, _, name = control.partition(":")
    if kind == "env":
        return shown(name, value)
    return value if is_public_flag(name) or str(value).startswith("$") else REDACTED


def display_difference(difference):
    return {"control": difference["control"], "before": display_value(difference["control"], difference["before"]),
            "after": display_value(difference["control"], difference["after"])}


def diff_recipes(original, candidate):
    """[{control, before, after}] of every control whose value differs (absent is None), values
    as they may be shown."""
    a, b = controls(original), controls(candidate)
    return [display_difference({"control": key, "before": a.get(key), "after": b.get(key)})
            for key in sorted(set(a) | set(b)) if a.get(key) != b.get(key)]


def check_one_control(original, candidate, change=None):
    """The single difference, or RecipeError naming every difference. The image and a process's program are
    held unless the change is that upgrade itself (the catalog's engine-image, engine-build)."""
    differences = diff_recipes(original, candidate)
    kind = (change or {}).get("kind")
    upgrade = kind if kind in UPGRADES else None
    held = [d for d in differences if d["control"] in HELD and d["control"] != upgrade]
    if len(differences) != 1 or held:
        listed = "; ".join(f"{d['control']}: {d['before']!r} -> {d['after']!r}" for d in differences) or "none"
        reason = f"held controls changed ({', '.join(d['control'] for d in held)}); " if held else ""
        raise RecipeError(f"a candidate must differ from the original in exactly one control; "
                          f"{reason}found {len(differences)}: {listed}")
    return differences[0]


def rename_container(argv, old, new):
    """An Exec argv with every reference to the container `old` renamed: --name, --cidfile
    paths, and the container argument of stop/rm/kill/wait/restart/logs/inspect."""
    out = []
    takes_name = False
    program = argv[0].rsplit("/", 1)[-1] if argv else ""
    for index, word in enumerate(argv):
        if takes_name and word == old:
            out.append(new)
            continue
        if word == f"--name={old}":
            out.append(f"--name={new}")
        elif index > 0 and argv[index - 1] == "--name" and word == old:
            out.append(new)
        elif word.startswith("--cidfile=") or (index > 0 and argv[index - 1] == "--cidfile"):
            out.append(word.replace(old, new))
        else:
            out.append(word)
        if program in RUNTIMES and word in ("stop", "rm", "kill", "wait", "restart", "logs", "inspect", "start"):
            takes_name = True
    return out


# ---- applying a change --------------------------------------------------------------------

def _set_env_in_argv(argv, image_index, name, value):
    """Rewrite or drop `-e NAME=...` in a runtime argv; add before the image when missing."""
    out, i, done = [], 0, False
    while i < len(argv):
        word = argv[i]
        if i < image_index and word in ("-e", "--env") and i + 1 < len(argv) \
                and argv[i + 1].partition("=")[0] == name:
            if value is not None:
                out += [word, f"{name}={value}"]
            done, i = True, i + 2
            continue
        if i < image_index and word.startswith(("--env=", "-e=")) and word.split("=", 1)[1].partition("=")[0] == name:
            if value is not None:
                out.append(f"--env={name}={value}")
            done, i = True, i + 1
            continue
        if i == image_index and not done and value is not None:
            out += ["-e", f"{name}={value}"]
            done = True
        out.append(word)
        i += 1
    return out


def _flag_words(flag, value, joined):
    """The words that set one flag: none (value None), the bare flag (True), FLAG VALUE or FLAG=VALUE (joined, as
    the original wrote it)."""
    if value is None:
        return []
    if value is True:
        return [flag]
    return [f"{flag}={value}"] if joined else [flag, str(value)]


def _set_engine_arg(command, flag, value):
    """Drop (value None), set a bare flag (True) or set flag VALUE in an engine command. A flag the command holds
    changes where it stands (the original's word order kept, so the candidate differs in the flag's words alone);
    a new one goes at the end."""
    out, i, placed = [], 0, False
    while i < len(command):
        word = command[i]
        if word.partition("=")[0] == flag:
            takes_value = "=" not in word and i + 1 < len(command) and not command[i + 1].startswith("--") \
                and not is_bare_flag(flag)
            i += 2 if takes_value else 1
            if not placed:
                out += _flag_words(flag, value, "=" in word)
                placed = True
            continue
        out.append(word)
        i += 1
    return out if placed else out + _flag_words(flag, value, False)


def _env_lines_with(env_lines, recipe, name, value):
    """The unit's Environment= lines with one variable set, or removed (value None)."""
    new_lines = []
    for line in env_lines:
        assignments = parse_env_assignments(line)
        if name in assignments:
            if value is None:
                assignments.pop(name)
            else:
                assignments[name] = str(value)
        if assignments:
            new_lines.append(" ".join(quote_arg(f"{k}={v}") for k, v in assignments.items()))
    if name not in recipe["unit_env"] and value is not None:
        new_lines.append(quote_arg(f"{name}={value}"))
    return new_lines


def _change_env(parts, recipe, name, value):
    if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", str(name)):
        raise RecipeError(f"env control name {name!r} is not a variable name")
    in_unit = name in recipe["unit_env"]
    if name in recipe["env_file_env"] and parts["runtime"] == "process":
        # systemd: EnvironmentFile= overrides Environment=, so the file decides the value.
        raise RecipeError(f"{name} is set in an EnvironmentFile ({', '.join(recipe['env_files'])}), which "
                          f"overrides Environment={'' if not in_unit else ' (where it is also set)'}; the "
                          "candidate changes it in its own copy of that file (serving_recipe copy_dir)")
    if parts["runtime"] != "process" and (name in recipe["env"] or not in_unit):
        parts["head"] = _set_env_in_argv(parts["head"], parts["image_index"], name, value)
    else:
        parts["env_lines"] = _env_lines_with(parts["env_lines"], recipe, name, value)


def _change_image(parts, recipe, name, value):
    index, head = parts["image_index"], parts["head"]
    if index < 0:
        raise RecipeError(f"{recipe.get('runtime')} unit runs no container image: an engine image upgrade "
                          "changes a container unit's image (a process unit's engine build is its ExecStart)")
    if not re.match(r"^[\w.\-/:]+@sha256:[0-9a-f]{64}$", str(value)):
        raise RecipeError(f"the new image must be pinned by digest (name@sha256:<64 hex>), got {value!r}")
    if head[index] == value:
        raise RecipeError(f"the unit already runs {value}: no change is no candidate")
    parts["head"] = head[:index] + [str(value)] + head[index + 1:]


def _change_program(parts, recipe, name, value):
    if parts["runtime"] != "process":
        raise RecipeError(f"a {parts['runtime']} unit's engine build is its image: an engine build upgrade changes "
                          "a process unit's program (the catalog's engine-image changes a container's)")
    if not PROGRAM_RE.match(str(value or "")):
        raise RecipeError(f"an engine build is the absolute path of its program, got {value!r}")
    index = program_index(parts["command"])
    program = parts["command"][index]
    if program == value:
        raise RecipeError(f"the unit already runs {value}: no change is no candidate")
    if program.rsplit("/", 1)[-1] != str(value).rsplit("/", 1)[-1] and \
            bool(PYTHON_RE.search(program)) != bool(PYTHON_RE.search(str(value))):
        raise RecipeError(f"the original runs {program}; another build's program must be the same kind (its "
                          f"interpreter for `python -m`, its entry point for `{program.rsplit('/', 1)[-1]} serve`), "
                          f"got {value!r}")
    parts["command"] = parts["command"][:index] + [str(value)] + parts["command"][index + 1:]


def _change_arg(parts, recipe, name, value):
    if not str(name).startswith("-"):
        raise RecipeError(f"arg control name {name!r} must be a --flag")
    held = (recipe.get("held_flags") or {}).get(name)
    if held:
        raise RecipeError(f"{name} is not written in ExecStart=: systemd brings it in from ${held} (the unit's "
                          f"environment); the tool changes a flag written in the unit, so move {name} into "
                          f"ExecStart= or change it where ${held} is set")
    parts["command"] = _set_engine_arg(parts["command"], name, value)


def _change_speculative(parts, recipe, name, value):
    held = sorted(f for f in (recipe.get("held_flags") or {}) if f.startswith("--speculative-"))
    if held:
        raise RecipeError(f"{', '.join(held)} is not written in ExecStart=: systemd brings it in from "
                          f"${recipe['held_flags'][held[0]]} (the unit's environment); the tool changes "
                          "speculative flags written in the unit, so move them into ExecStart= or change them "
                          "where that variable is set")
    command, wanted = parts["command"], value or {}
    for flag in wanted:
        if not flag.startswith("--speculative-"):
            raise RecipeError(f"speculative settings must be --speculative-* flags, got {flag!r}")
    for flag in [f for f in recipe["engine_args"] if f.startswith("--speculative-") and f not in wanted]:
        command = _set_engine_arg(command, flag, None)
    for flag, val in wanted.items():  # in place where the original holds it
        command = _set_engine_arg(command, flag, val)
    parts["command"] = command


CHANGES = {"env": _change_env, "arg": _change_arg, "speculative": _change_speculative, "image": _change_image,
           "program": _change_program}


def _candidate_name(head, container):
    """The runtime's words with the container's --name given the candidate's suffix."""
    return [f"{w}{CANDIDATE_SUFFIX}" if i > 0 and head[i - 1] == "--name" else
            (f"--name={container}{CANDIDATE_SUFFIX}" if w == f"--name={container}" else w)
            for i, w in enumerate(head)]


def _section_items(section, items, new_exec, env_lines, recipe, keep_identity):
    """One section's items in the candidate: ExecStart replaced, Environment= written once, the container's
    other Exec lines and the description the candidate's."""
    renaming = recipe["container_name"] and not keep_identity
    new_items, env_written = [], False
    for key, val in items:
        if key == "ExecStart":
            new_items.append(["ExecStart", new_exec])
        elif key.startswith("Exec") and renaming:
            # ExecStartPre/ExecStop/... that name the container manage the candidate's own.
            line_prefix, words = split_command(val)
            renamed = rename_container(words, recipe["container_name"], recipe["container_name"] + CANDIDATE_SUFFIX)
            new_items.append([key, join_command(renamed, line_prefix) if renamed != words else val])
        elif key == "Environment":
            new_items += [] if env_written else [["Environment", line] for line in env_lines]
            env_written = True
        elif key == "Description" and section == "Unit" and not keep_identity:
            new_items.append([key, f"{val} (candidate)"])
        else:
            new_items.append([key, val])
    if section == "Service" and not env_written and env_lines:
        new_items = [["Environment", line] for line in env_lines] + new_items
    return new_items


def apply_change(sections, recipe, change, keep_identity=False):
    """Candidate sections: the original (drop-ins merged) with one control changed,
    [Install] dropped (a candidate is never enabled) and the container renamed.

    change: {"kind": "env", "name": N, "value": V|None} or {"kind": "arg", "name": "--flag",
    "value": True|V|None} or {"kind": "speculative", "value": {"--speculative-...": V}|None} or
    {"kind": "image", "value": "name@sha256:..."} or {"kind": "program", "value": "/path/bin/python"} (a process's
    engine build); a None value removes the control. keep_identity
    (promotion) keeps [Install], the description and the container name: the result replaces the
    original as the new default.
    """
    kind = change.get("kind")
    if kind not in CHANGES:
        raise RecipeError(f"change kind must be {', '.join(CHANGES)}, got {kind!r}")
    prefix, argv = split_command(values(sections, "Service", "ExecStart")[0])
    runtime, _, image, command = split_runtime(argv)
    head = argv[: len(argv) - len(command)]
    parts = {"runtime": runtime, "head": head, "command": command, "image_index": len(head) - 1 if image else -1,
             "env_lines": values(sections, "Service", "Environment")}
    CHANGES[kind](parts, recipe, change.get("name"), change.get("value"))
    if recipe["container_name"] and not keep_identity:
        parts["head"] = _candidate_name(parts["head"], recipe["container_name"])
    new_exec = join_command(parts["head"] + parts["command"], prefix)
    return [[section, _section_items(section, items, new_exec, parts["env_lines"], recipe, keep_identity)]
            for section, items in sections if not (section == "Install" and not keep_identity)]


def set_in_env_file(text, name, value):
    """An EnvironmentFile's text with one variable set (or removed, value None); every other line
    kept byte for byte. The last assignment wins, as systemd reads the file."""
    lines = (text or "").splitlines(keepends=True)
    index = None
    for n, line in enumerate(lines):
        key = line.strip().partition("=")[0].strip().removeprefix("export ").strip()
        if "=" in line and not line.lstrip().startswith(("#", ";")) and key == name:
            index = n
    new = None if value is None else f"{name}={value}\n"
    if index is None:
        body = "".join(lines)
        return body + ("\n" if body and not body.endswith("\n") else "") + (new or "")
    return "".join(lines[:index] + ([new] if new else []) + lines[index + 1:])


def _env_file_holder(sections, recipe, name, env_texts):
    """(source path, 'unit' or 'container') of the file whose value of `name` the engine sees, or
    None when the unit itself decides it: for a process, the last EnvironmentFile= that sets it
    (systemd reads them in order and they override Environment=); for a container, the last
    --env-file that sets it when no -e names it (-e overrides --env-file)."""
    argv = split_command(values(sections, "Service", "ExecStart")[0])[1]
    if split_runtime(argv)[0] == "process":
        if name not in recipe["env_file_env"]:
            return None
        refs = [r.lstrip("-") for r in values(sections, "Service", "EnvironmentFile")]
        return [r for r in refs if name in parse_env_file(env_texts.get(r, ""))][-1], "unit"
    if name in recipe.get("container_flag_env", ()) or name not in recipe.get("container_env_file_env", {}):
        return None
    refs = recipe["container_env_files"]
    return [r for r in refs if name in parse_env_file(env_texts.get(r, ""))][-1], "container"


def _point_env_file(argv, source, copy_path):
    """A docker/podman argv whose `--env-file source` reads copy_path instead."""
    return [copy_path if i > 0 and argv[i - 1] == "--env-file" and word == source else
            f"--env-file={copy_path}" if word == f"--env-file={source}" else word for i, word in enumerate(argv)]


def apply_change_with_files(sections, recipe, change, env_texts, copy_dir, keep_identity=False):
    """apply_change, and for an env control that a file sets (an EnvironmentFile of a process unit,
    an --env-file of a container), the candidate's own copy of that file with exactly that variable
    changed, in copy_dir: the candidate's EnvironmentFile= or --env-file points there, the original
    file is never touched. Returns (sections, {copy_path: (source_path, text)})."""
    name = change.get("name")
    holder = None if change.get("kind") != "env" or keep_identity else \
        _env_file_holder(sections, recipe, name, env_texts)
    if holder is None:
        return apply_change(sections, recipe, change, keep_identity), {}
    source, kind = holder
    copy_path = f"{copy_dir.rstrip('/')}/{source.strip('/').replace('/', '_')}"
    copies = {copy_path: (source, set_in_env_file(env_texts[source], name, change.get("value")))}
    without = {**recipe, "env_file_env": {k: v for k, v in recipe["env_file_env"].items() if k != name},
               "unit_env": {k: v for k, v in recipe["unit_env"].items() if k != name},
               "env": {k: v for k, v in recipe["env"].items() if k != name}}
    keep = {"kind": "env", "name": name, "value": recipe["unit_env"].get(name)}  # Environment= left as it is
    out = apply_change(sections, without, keep, keep_identity)  # renders the rest; the unit's own env as it is
    swapped = []
    for section, items in out:
        new_items = []
        for key, val in items:
            if kind == "unit" and key == "EnvironmentFile" and val.lstrip("-") == source:
                val = (val[:1] if val.startswith("-") else "") + copy_path
            elif kind == "container" and key == "ExecStart":
                line_prefix, words = split_command(val)
                val = join_command(_point_env_file(words, source, copy_path), line_prefix)
            new_items.append([key, val])
        swapped.append([section, new_items])
    return swapped, copies


def render_sections(sections):
    """The unit text of parsed sections. The sections are specifier-expanded (every value literal, as systemd
    loaded it), so each % is written %%: systemd reads back the same text, never a specifier."""
    lines = []
    for section, items in sections:
        lines.append(f"[{section}]")
        lines += [f"{key}={value.replace('%', '%%')}" for key, value in items]
        lines.append("")
    return "\n".join(lines)


def parse_rendered(text):
    """A unit this tool rendered, parsed as systemd loads it: its only specifier is %% (render_sections)."""
    return [[name, [[key, value.replace("%%", "%")] for key, value in items]] for name, items in parse_unit_text(text)]
