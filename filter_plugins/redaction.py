"""Filters that keep secrets and (on request) host identifiers out of evidence."""

import re

from ansible.errors import AnsibleFilterError

SECRET_NAME_RE = re.compile(r"(?i)(token(?!s\b|s_|izer)|secret|passw(or)?d|api[_-]?key|private[_-]?key|credential)")
SECRET_ASSIGN_RE = re.compile(
    r"(?i)((?:--)?[\w.-]*(?:token(?!s\b|s_|izer)|secret|passw(?:or)?d|api[_-]?key|private[_-]?key|credential)[\w.-]*"
    r"(?:=|\s+))(?!<redacted>)(\"[^\"]*\"|'[^']*'|[^\s\"']+)"
)
REDACTED = "<redacted>"


def _redact_text(text):
    return SECRET_ASSIGN_RE.sub(lambda m: m.group(1) + REDACTED, text)


def redact_secrets(data):
    """Replace values of secret-named keys, and `NAME=value` / `--name value` secrets in strings."""
    if isinstance(data, dict):
        return {k: (REDACTED if isinstance(k, str) and SECRET_NAME_RE.search(k) and v not in (None, "")
                    else redact_secrets(v)) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [redact_secrets(v) for v in data]
    if isinstance(data, str):
        return _redact_text(data)
    return data


def redact_identifiers(data, identifiers):
    """Replace each identifier (hostname, GPU UUID, ...) wherever it appears with a stable label."""
    if not isinstance(identifiers, list | tuple) or not all(isinstance(i, str) for i in identifiers):
        raise AnsibleFilterError(f"redact_identifiers needs a list of strings, got {identifiers!r}")
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


class FilterModule:
    def filters(self):
        return {"redact_secrets": redact_secrets, "redact_identifiers": redact_identifiers}
