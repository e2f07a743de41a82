"""A run's observation documents on the controller, written in one step: checked, redacted (secrets always;
host identifiers on request), then each created new in the run's folder - a run folder is written once."""

import json
import os
import re

from serving_rollout.redaction import redact_identifiers, redact_secrets

RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,79}")
KIND = re.compile(r"[a-z][a-z0-9-]*")
NAME = re.compile(r"[a-z0-9-]+\.json")
SCHEMA = re.compile(r"serving-rollout\.[a-z0-9-]+/v[0-9]+")


class WriteError(Exception):
    """The documents were not written (or not all): the message names the path and the cause."""

    def __init__(self, msg, written=()):
        super().__init__(msg)
        self.written = list(written)


def problems(kind, run_id, documents):
    """Why these documents cannot be written, before anything is: each bad value named."""
    found = []
    if not RUN_ID.fullmatch(str(run_id)):
        found.append(f"run id {json.dumps(str(run_id))} must be a plain name (1-80 letters, digits, '_', '.', '-')")
    if not KIND.fullmatch(str(kind)):
        found.append(f"kind {kind!r} must be lower-case")
    if not documents:
        found.append("no documents to write")
    bad = [d.get("name") for d in documents if not isinstance(d, dict) or not NAME.fullmatch(str(d.get("name")))]
    if bad:
        found.append(f"document names must be <lower-case>.json, got {bad}")
    bad = [d.get("schema") for d in documents if isinstance(d, dict) and not SCHEMA.fullmatch(str(d.get("schema")))]
    if bad:
        found.append(f"schemas must be serving-rollout.<name>/vN, got {bad}")
    return found


def write_new(path, text):
    """One file created new (0640), never over another; a partial write is removed."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
    except FileExistsError:
        raise WriteError(f"{path} already exists: a run folder is never overwritten") from None
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
    except OSError:
        os.remove(path)  # never leave a truncated document behind
        raise


def write_documents(folder, host, run_id, documents, identifiers=()):
    """Each document as {schema, host, run_id, **body}, sorted JSON, redacted, in `folder` (made 0750).
    Returns the names written; WriteError names what stopped it (a full or read-only disk included)."""
    labels = list(identifiers)
    host = redact_identifiers([host], labels)[0]
    documents = redact_identifiers(redact_secrets(documents), labels)
    written, path = [], folder
    try:
        os.makedirs(folder, mode=0o750, exist_ok=True)
        for doc in documents:
            path = os.path.join(folder, doc["name"])
            write_new(path, json.dumps({"schema": doc["schema"], "host": host, "run_id": run_id, **doc["body"]},
                                       indent=4, sort_keys=True) + "\n")
            written.append(doc["name"])
    except OSError as exc:  # a full or read-only disk: named, no traceback
        raise WriteError(f"cannot write {path}: {exc.strerror}", written) from None
    except WriteError as exc:
        raise WriteError(str(exc), written) from None
    return written
