"""What keeps secrets and (on request) host identifiers out of evidence: pure functions the observation_write
action applies to every document before it is written."""

import re

# One source for what is secret-looking and what is allow-listed: module_utils/unit_recipe.py.
from serving_rollout.module_utils.unit_recipe import REDACTED, SECRET_NAME_RE, SECRET_WORDS, is_public_name

SECRET_ASSIGN_RE = re.compile(
    rf"(?i)((?:--)?[\w.-]*(?:{SECRET_WORDS})[\w.-]*(?:=|\s+))(?!<redacted>)(\"[^\"]*\"|'[^']*'|[^\s\"']+)")


def _redact_text(text):
    def hide(match):
        name = match.group(1).rstrip("= \t").lstrip("-")
        return match.group(0) if is_public_name(name) else match.group(1) + REDACTED
    return SECRET_ASSIGN_RE.sub(hide, text)


def redact_secrets(data):
    """Defence in depth for evidence documents (the recipe is already redacted by allow-list on
    the host): values of secret-looking keys, and `NAME=value` / `--name value` secrets in
    strings, unless the name is an allow-listed control (DOUBLE_DECODE_MS_PER_TOKEN stays)."""
    if isinstance(data, dict):
        return {k: (REDACTED if isinstance(k, str) and SECRET_NAME_RE.search(k) and not is_public_name(k)
                    and v not in (None, "") else redact_secrets(v)) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [redact_secrets(v) for v in data]
    if isinstance(data, str):
        return _redact_text(data)
    return data


def redact_identifiers(data, identifiers):
    """Replace each identifier (hostname, GPU UUID, ...) wherever it appears with a stable label."""
    if not isinstance(identifiers, list | tuple) or not all(isinstance(i, str) for i in identifiers):
        raise ValueError(f"redact_identifiers needs a list of strings, got {identifiers!r}")
    labels = {ident: f"<id-{n}>" for n, ident in enumerate(sorted(set(filter(None, identifiers)),
                                                                   key=len, reverse=True))}

    def walk(value):
        if isinstance(value, dict):
            return {walk(k): walk(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [walk(v) for v in value]
        if isinstance(value, str):
            for ident, label in labels.items():
                value = value.replace(ident, label)
        return value

    return walk(data)
