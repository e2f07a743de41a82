"""The engine's own account of a window of requests, from its Prometheus /metrics read before and
after: requests and mean TTFT and E2E from its histograms (_sum, _count), tokens generated, and for
speculative decoding its accept length. Read beside the client's figures (module_utils/cells.py),
so a client-side artefact and an engine-side effect can be told apart.

A bake's reading (`reading`, `bake_reading`) is the engine's series at one moment in the shape a Prometheus
query of the same series gives (serving_rollout/bake_metrics.py): each histogram's cumulative bucket counts by
`le`, each counter and gauge summed over its label sets.

The names are each engine's (module_utils/engine_adapters.py `metrics`). Pure, standard library.
"""

import re
import time

from .engine_adapters import adapter
from .engine_client import get_text

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)(=~|=)"((?:[^"\\]|\\.)*)"')  # a selector's: equal, or a regex
HISTOGRAMS = ("ttft", "e2e")  # what a bake reads by bucket
SERIES = ("requests", "errors", "generated", "kv_usage")  # what a bake reads as one summed value


def totals(text):
    """{sample name: value summed over its label sets} of a Prometheus text exposition (_bucket
    samples and comments left out: the window needs sums, counts, counters and gauges)."""
    if not isinstance(text, str):
        raise ValueError(f"totals needs the /metrics text, got {type(text).__name__}")
    out = {}
    for name, _, value in samples(text):
        if not name.endswith("_bucket"):
            out[name] = out.get(name, 0.0) + value
    return out


def scrape(engine, base_url, api_key=None, timeout=10.0, get=get_text):
    """The engine's totals now: {available, totals} or {available: False, reason}."""
    names = adapter(engine).get("metrics") or {}
    if not names:
        return {"available": False, "reason": f"no /metrics names known for engine {engine!r}"}
    result = get(base_url, "/metrics", api_key=api_key, timeout=timeout)
    if not result["ok"]:
        hint = f" ({engine} serves it with {names['enable']})" if names.get("enable") else ""
        return {"available": False, "reason": f"{result['error']}{hint}"}
    wanted = {f"{names[k]}{suffix}" for k in ("ttft", "e2e") for suffix in ("_sum", "_count")} | \
        {names[k] for k in ("generated", "accepted", "drafts", "accept_length") if names.get(k)}
    return {"available": True, "totals": {k: v for k, v in totals(result["text"]).items() if k in wanted}}


def window(engine, before, after):
    """What the engine counted between two scrapes: {available, requests, ttft_sum_s, e2e_sum_s,
    generated_tokens, accepted_tokens, drafts, accept_length_gauge} (sums, so windows add up)."""
    if not (before or {}).get("available") or not (after or {}).get("available"):
        return {"available": False, "reason": (after or {}).get("reason") or (before or {}).get("reason")}
    names = adapter(engine)["metrics"]
    b, a = before["totals"], after["totals"]

    def delta(name):
        return a[name] - b.get(name, 0.0) if name and name in a else None

    out = {"available": True, "requests": delta(f"{names['e2e']}_count"),
           "ttft_sum_s": delta(f"{names['ttft']}_sum"), "ttft_count": delta(f"{names['ttft']}_count"),
           "e2e_sum_s": delta(f"{names['e2e']}_sum"), "generated_tokens": delta(names["generated"]),
           "accepted_tokens": delta(names.get("accepted")), "drafts": delta(names.get("drafts"))}
    if names.get("accept_length") and names["accept_length"] in a:
        out["accept_length_gauge"] = a[names["accept_length"]]
    return out


def merge(windows):
    """Windows of one cell's chunks as one: sums added; unavailable when any chunk's was."""
    windows = [w for w in windows if w is not None]
    if not windows:
        return None
    missing = [w for w in windows if not w.get("available")]
    if missing:
        return {"available": False, "reason": missing[0].get("reason")}
    out = {"available": True}
    for key in ("requests", "ttft_sum_s", "ttft_count", "e2e_sum_s", "generated_tokens", "accepted_tokens", "drafts"):
        values = [w.get(key) for w in windows]
        out[key] = None if any(v is None for v in values) else sum(values)
    gauges = [w["accept_length_gauge"] for w in windows if w.get("accept_length_gauge") is not None]
    if gauges:
        out["accept_length_gauge"] = gauges[-1]
    return out


def figures(merged):
    """The engine's means over a merged window: {requests, ttft_mean_s, e2e_mean_s, generated_tokens,
    accept_length} (accept length: 1 + accepted / drafts, else the engine's gauge; None without
    speculation)."""
    if not (merged or {}).get("available"):
        return {"available": False, "reason": (merged or {}).get("reason") or "not read"}

    def mean(total, count):
        return round(total / count, 6) if total is not None and count else None

    accept = None
    if merged.get("drafts"):
        accept = round(1 + merged["accepted_tokens"] / merged["drafts"], 4)
    elif merged.get("accept_length_gauge"):
        accept = round(merged["accept_length_gauge"], 4)
    return {"available": True, "requests": merged.get("requests"),
            "ttft_mean_s": mean(merged.get("ttft_sum_s"), merged.get("ttft_count")),
            "e2e_mean_s": mean(merged.get("e2e_sum_s"), merged.get("requests")),
            "generated_tokens": merged.get("generated_tokens"), "accept_length": accept}


def selector(text):
    """(name, [(label, op, value)]) of an adapter's series selector: 'name' or 'name{label="v",label=~"a|b"}' (the
    matchers PromQL takes as they are)."""
    name, _, rest = text.partition("{")
    return name, _MATCHER.findall(rest)


def matches(labels, matchers):
    """Whether a sample's labels meet a selector's matchers (=~ anchored, as PromQL's)."""
    return all(re.fullmatch(value, labels.get(label, "")) if op == "=~" else labels.get(label) == value
               for label, op, value in matchers)


def samples(text):
    """[(name, {label: value}, value)] of a Prometheus text exposition, NaN left out."""
    out = []
    for line in text.splitlines():
        match = _SAMPLE.match(line.strip())
        if not match:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        if value == value:  # NaN (an empty gauge) is no reading
            out.append((match.group(1), dict(_LABEL.findall(match.group(2) or "")), value))
    return out


def _summed(found, wanted):
    name, matchers = selector(wanted)
    values = [v for n, have, v in found if n == name and matches(have, matchers)]
    return sum(values) if values else None


def _buckets(found, name):
    out = {}
    for sample_name, labels, value in found:
        if sample_name == f"{name}_bucket" and "le" in labels:
            out[labels["le"]] = out.get(labels["le"], 0.0) + value
    return out


def reading(engine, text):
    """The engine's series a bake compares, from its /metrics text: {histogram role: {le: cumulative count}, series
    role: value}; a role the engine's adapter names but the text lacks is left out (the judge names it missing)."""
    names = adapter(engine).get("metrics") or {}
    found = samples(text)
    out = {role: _buckets(found, names[role]) for role in HISTOGRAMS if names.get(role)}
    out = {role: buckets for role, buckets in out.items() if buckets}
    for role in (r for r in SERIES if names.get(r)):
        value = _summed(found, names[role])
        if value is not None:
            out[role] = value
    return out


def bake_reading(engine, base_url, api_key=None, timeout=10.0, get=get_text, now=None):
    """{at (epoch s), ok, series | error}: the engine's /metrics read now, as `reading` shapes it."""
    at = (now or time.time)()
    result = get(base_url, "/metrics", api_key=api_key, timeout=timeout)
    if not result["ok"]:
        return {"at": at, "ok": False, "error": f"GET /metrics: {result['error']}"}
    return {"at": at, "ok": True, "series": reading(engine, result["text"])}
