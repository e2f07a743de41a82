"""Read a variable from a unit's EnvironmentFiles on the host (the engine's API key), so that
secrets are used where they live and never travel to the controller."""

import re

from .unit_recipe import SECRET_WORDS, is_public_name, parse_env_file

SECRET_TEXT_RE = re.compile(
    rf"(?i)((?:--)?[\w.-]*(?:{SECRET_WORDS})[\w.-]*['\"]?\s*(?:=|:|\s)\s*['\"]?)"
    r"(?!<redacted>)([^\s'\",)]+)")


def redact_line(line, secrets):
    """A log line with the known secret values and every secret-named value replaced by <redacted>."""
    for value in secrets:
        line = line.replace(value, "<redacted>")
    return SECRET_TEXT_RE.sub(lambda m: m.group(1) + "<redacted>", line)


def read_env_file(path):
    with open(path) as handle:
        return parse_env_file(handle.read())


def read_env_value(paths, name):
    """The value of `name` in the first of `paths` that sets it; ValueError naming what failed."""
    for path in paths:
        try:
            value = read_env_file(path).get(name)
        except OSError as exc:
            raise ValueError(f"cannot read EnvironmentFile {path} for {name}: {exc.strerror}") from exc
        if value:
            return value
    raise ValueError(f"{name} is not set in {list(paths)}")


def module_api_key(module):
    """The API key named by a module's api_key_var/env_files options, masked in its output."""
    if not module.params["api_key_var"]:
        return None
    try:
        value = read_env_value(module.params["env_files"], module.params["api_key_var"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    module.no_log_values.add(value)
    return value


def secret_values(paths):
    """Every value (6 characters or more) of a variable not on the allow-list of known
    non-secret controls, in the readable files among `paths`, so a log line that holds one can
    be redacted whatever the variable is called."""
    found = set()
    for path in paths:
        try:
            env = read_env_file(path)
        except OSError:
            continue
        found |= {v for k, v in env.items() if not is_public_name(k) and len(v) >= 6}
    return found
