"""One reader for every engine and NCCL log line, before any rule reads it.

A real host's lines reach the tool wrapped: a progress bar's carriage returns (tqdm redraws one
journal message many times: "Capturing CUDA graphs: 10%|#|\\rCapturing CUDA graphs: 20%|##|"),
ANSI colours, Ray's de-duplication suffix ("NCCL INFO NCCL_P2P_LEVEL set by environment to NVL
[repeated 15x across cluster]") and a kubectl logs --prefix ("[pod/vllm-0/vllm] "). A rule anchored
at the line's end, or a phase a progress bar redraws, is lost under them. The per-process prefixes at
a line's start (journald, compose, Ray's "(RayWorkerWrapper pid=N, ip=...)", torch's "[rank0]:",
the engines' levels) stay: rules search anywhere in a line, and engine_adapters strips those for
the line it shows.

Pure functions over text; no I/O.
"""

import json
import re

# CSI sequences (colours, cursor moves: ESC [ ... letter), OSC sequences (ESC ] ... BEL or ESC \),
# and a lone ESC with one character after it.
_ESCAPE_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]")
# Control characters other than tab (a carriage return splits a line before this applies).
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# Ray's log de-duplication: the same line from N more workers, the first time with Ray's notice after it
# ("[repeated 8x across cluster] (Ray deduplicates logs by default. Set RAY_DEDUP_LOGS=0 ...)").
_RAY_REPEATED_RE = re.compile(r"\s*\[repeated \d+x across cluster\]"
                              r"(?: \(Ray deduplicates logs by default\.[^)]*\))?\s*$")
# kubectl logs --prefix: "[pod/<pod>/<container>] ".
_KUBECTL_PREFIX_RE = re.compile(r"^\[pod/[\w.-]+/[\w.-]+\] ")


def clean_line(segment):
    """One segment of a line (no newline, no carriage return) without escape sequences, control
    characters, Ray's repeat suffix or kubectl's prefix."""
    segment = _CONTROL_RE.sub("", _ESCAPE_RE.sub("", segment))
    return _KUBECTL_PREFIX_RE.sub("", _RAY_REPEATED_RE.sub("", segment))


def lines(text):
    """The log's lines as a reader sees them: each carriage-return redraw of a progress bar is a
    line of its own (the last one is what a terminal showed; every one is what the engine said),
    cleaned by clean_line; lines left empty are dropped."""
    out = []
    for line in (text or "").split("\n"):
        for segment in line.split("\r"):
            cleaned = clean_line(segment)
            if cleaned.strip():
                out.append(cleaned)
    return out


def clean(text):
    """The log as one text of clean lines (see lines)."""
    return "\n".join(lines(text))


# How journal_entries wants journalctl to print: JSON, every field in full (--all: no "[N blob data]"), only
# MESSAGE besides the cursor and timestamps journalctl always adds (systemd >= 236), so a poll carries the
# engine's words and not thirty fields of metadata per line.
JOURNAL_JSON = ("-o", "json", "--all", "--output-fields=MESSAGE")


def _field(value):
    """A journal field as `journalctl -o json` prints it: text, or its bytes as a list of numbers where
    journald holds unprintable or non-UTF-8 bytes (a carriage return, a colour), or null."""
    if isinstance(value, list):
        return bytes(value).decode("utf-8", "replace")
    return value if isinstance(value, str) else ""


def journal_entries(out):
    """[{"time": unix seconds, "cursor": ..., "lines": [clean lines]}] of `journalctl -o json --all`
    output, one per journal entry: what the engine printed, as journald stored it (never "[N blob
    data]"), cut into lines by lines()."""
    entries = []
    for raw in (out or "").splitlines():
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"journalctl printed a line that is not JSON: {raw[:120]!r}") from exc
        stamp = entry.get("__REALTIME_TIMESTAMP")
        entries.append({"time": int(stamp) / 1e6 if str(stamp or "").isdigit() else None,
                        "cursor": entry.get("__CURSOR"), "lines": lines(_field(entry.get("MESSAGE")))})
    return entries
