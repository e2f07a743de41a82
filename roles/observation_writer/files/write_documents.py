#!/usr/bin/env python3
"""Write a run's observation documents on the controller in one step (one process, not one per file).

stdin: {"dir": <run folder>, "host": ..., "run_id": ..., "documents": [{name, schema, body}]},
already redacted. Each document is written as {schema, host, run_id, **body}, sorted JSON. The
run folder is created (0750); each file is created new (0640) and never overwritten: a run
folder is written once. Prints {"dir": ..., "written": [...]} as JSON.
"""

import json
import os
import re
import sys


def main():
    request = json.load(sys.stdin)
    folder, documents = request["dir"], request["documents"]
    bad = [doc.get("name") for doc in documents if not re.fullmatch(r"[a-z0-9-]+\.json", str(doc.get("name")))]
    if bad:
        sys.exit(f"document names must be <lower-case>.json, got {bad}")
    written, path = [], folder
    try:
        os.makedirs(folder, mode=0o750, exist_ok=True)
        for doc in documents:
            name = doc["name"]
            text = json.dumps({"schema": doc["schema"], "host": request["host"], "run_id": request["run_id"],
                               **doc["body"]}, indent=4, sort_keys=True) + "\n"
            path = os.path.join(folder, name)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
            except FileExistsError:
                sys.exit(f"{path} already exists: a run folder is never overwritten")
            try:
                with os.fdopen(fd, "w") as handle:
                    handle.write(text)
            except OSError:
                os.remove(path)  # never leave a truncated document behind
                raise
            written.append(name)
    except OSError as exc:  # a full or read-only disk: named, no traceback
        print(json.dumps({"dir": folder, "written": written, "error": f"cannot write {path}: {exc.strerror}"}))
        sys.exit(1)
    print(json.dumps({"dir": folder, "written": written}))


if __name__ == "__main__":
    main()
