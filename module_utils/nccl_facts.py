"""NCCL facts: the version of the library a process loads, and what NCCL_DEBUG=INFO logs say.

The loaded library is what matters: torch's compile-time NCCL and a host libnccl can
differ on one host (the H200 observation has 2.28.9 in torch and 2.28.3 on the host).
"""

import ctypes
import json
import os
import re

from .log_lines import clean as clean_log

# NCCL >= 2.21 prints "NCCL INFO NCCL version 2.21.5+cuda12.4"; older releases a bare line
# "NCCL version 2.18.1+cuda12.1" from the rank that created the communicator.
VERSION_LINE_RE = re.compile(r"(?:NCCL INFO |^)NCCL version (\d+\.\d+\.\d+)(?:\+cuda(\d+\.\d+))?", re.MULTILINE)
# One connection NCCL set up: "Channel 03/0 : 2[2] -> 3[3] via P2P/IPC/read". Older releases
# print the bus id in the brackets (0[101c0]), "Ring 00 :" and "via direct shared memory"; edges to
# another node carry [send]/[receive]. Operators paste channel lines without NCCL's prefix too.
CHANNEL_RE = re.compile(
    r"(?:NCCL INFO |^)(?:Channel|Ring) (\d+)(?:/\d+)? : (\d+)\[([0-9a-fA-F]+)\] -> (\d+)\[([0-9a-fA-F]+)\]"
    r"(?: \[(send|receive)\])? via (direct shared memory|\S+(?: pointer\S*)?)", re.MULTILINE
)
# "NCCL_P2P_LEVEL set by environment to LOC": a setting NCCL read (the proof an env control took).
SETTING_RE = re.compile(r"NCCL INFO (NCCL_\w+) set (?:by environment )?to (\S+?)\.?\s*$", re.MULTILINE)
# "host:pid:tid [dev] NCCL INFO comm 0x.. rank 3 nRanks 8 nNodes 1 localRanks 8 localRank 3"
COMM_RE = re.compile(
    r"([\w.-]+):\d+:\d+ \[\d+\] NCCL INFO (?:\w+ )?comm 0x[0-9a-fA-F]+ rank (\d+) n[Rr]anks (\d+)"
    r"(?: (?:cudaDev \d+ .*|nNodes (\d+).*))?"
)
NVLS_RE = re.compile(r"NCCL INFO (?:Connected NVLS|NVLS comm|NVLS multicast support is available)")
COLLNET_RE = re.compile(r"NCCL INFO (?:Connected CollNet|CollNet \d+/\d+ :|.*via COLLNET)")
WARN_RE = re.compile(r"NCCL WARN .*")


def decode_version(code):
    """ncclGetVersion's integer: >= 2.9 is major*10000+minor*100+patch, older major*1000+..."""
    if not isinstance(code, int) or code <= 0:
        raise ValueError(f"not an NCCL version code: {code!r}")
    if code >= 20900:
        major, rest = divmod(code, 10000)
    else:
        major, rest = divmod(code, 1000)
    minor, patch = divmod(rest, 100)
    return f"{major}.{minor}.{patch}"


def _loaded_path(name):
    """Path of a loaded shared library, from this process's memory map."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                if os.path.basename(path).startswith(name.split(".so")[0] + ".so"):
                    return path
    except OSError:
        pass
    return None


def loaded_version(library="libnccl.so.2"):
    """{found, version, code, path} or {found: False, reason}."""
    try:
        lib = ctypes.CDLL(library)
    except OSError as exc:
        return {"found": False, "library": library, "reason": f"cannot load {library}: {exc}"}
    code = ctypes.c_int(0)
    try:
        status = lib.ncclGetVersion(ctypes.byref(code))
    except AttributeError:
        return {"found": False, "library": library, "reason": f"{library} has no ncclGetVersion"}
    if status != 0:
        return {"found": False, "library": library, "reason": f"ncclGetVersion returned {status}"}
    return {"found": True, "library": library, "path": _loaded_path(os.path.basename(library)),
            "code": code.value, "version": decode_version(code.value)}


IMAGE_PROBE = (
    "import ctypes,glob,json,site\n"
    "c=[p for d in site.getsitepackages() for p in glob.glob(d+'/nvidia/nccl/lib/libnccl.so.2')]\n"
    "out={}\n"
    "for lib in ['libnccl.so.2']+c:\n"
    "  try:\n"
    "    v=ctypes.c_int(0); ctypes.CDLL(lib).ncclGetVersion(ctypes.byref(v)); out[lib]=v.value\n"
    "  except Exception as e: out[lib]=str(e)\n"
    "print(json.dumps(out))\n"
)


def image_probe_command(runtime, image, python="python3"):
    """The read-only command that asks an image which NCCL its python would load."""
    return [runtime, "run", "--rm", "--network=none", "--entrypoint", python, image, "-c", IMAGE_PROBE]


def normalize_transport(raw):
    if raw.startswith("SHM/") or raw == "direct shared memory":
        return "SHM"
    if raw.startswith("NET/"):
        return "NET"
    if raw.startswith("P2P/direct"):
        return "P2P/direct"
    if raw.startswith("P2P/CUMEM"):
        return "P2P/CUMEM"
    if raw.startswith("P2P/IPC"):
        return "P2P/IPC"
    return raw


def parse_log(text):
    """Versions, communicator sizes, every connection NCCL reports (ring and tree, every channel),
    a per ordered rank pair summary, and the P2P proof of a NCCL_DEBUG=INFO log, read through the one
    line reader (module_utils/log_lines.py: Ray's repeat suffix, progress bars, colours)."""
    text = clean_log(text)
    versions = sorted({m.group(1) for m in VERSION_LINE_RE.finditer(text)})
    cuda = sorted({m.group(2) for m in VERSION_LINE_RE.finditer(text) if m.group(2)})
    channels = []
    pairs = {}
    for match in CHANNEL_RE.finditer(text):
        channel, src, _, dst, _, remote, raw = match.groups()
        transport = normalize_transport(raw)
        channels.append({"channel": int(channel), "src": int(src), "dst": int(dst),
                         "transport": transport, "raw": raw, "remote": bool(remote)})
        pairs.setdefault((int(src), int(dst)), set()).add(transport)
    comms = {}
    for match in COMM_RE.finditer(text):
        host, rank, nranks, nnodes = match.groups()
        known = comms.setdefault(int(rank), {"host": host, "nranks": int(nranks), "nnodes": None})
        if nnodes:
            known["nnodes"] = int(nnodes)
    pair_list = [{"src": s, "dst": d, "transports": sorted(t)} for (s, d), t in sorted(pairs.items())]
    parsed = {
        "versions": versions,
        "cuda": cuda,
        "channels": channels,
        "pairs": pair_list,
        "ranks": {str(rank): info for rank, info in sorted(comms.items())},
        "nranks": max((c["nranks"] for c in comms.values()), default=None),
        "nvls": bool(NVLS_RE.search(text)),
        "collnet": bool(COLLNET_RE.search(text)),
        "warnings": WARN_RE.findall(text),
        "settings": {m.group(1): m.group(2) for m in SETTING_RE.finditer(text)},
        "summary": summarize_pairs(pair_list),
    }
    parsed["proof"] = p2p_proof(parsed)
    return parsed


def summarize_pairs(pairs):
    """One line per unordered rank pair, e.g. '0<->1: P2P/IPC both directions, no SHM'."""
    by_pair = {(p["src"], p["dst"]): set(p["transports"]) for p in pairs}
    lines = []
    for a, b in sorted({tuple(sorted(k)) for k in by_pair}):
        forward, backward = by_pair.get((a, b), set()), by_pair.get((b, a), set())
        both = forward & backward
        if forward == backward and len(both) == 1:
            text = f"{next(iter(both))} both directions"
        else:
            text = (f"{a}->{b} {'+'.join(sorted(forward)) or 'none'}, "
                    f"{b}->{a} {'+'.join(sorted(backward)) or 'none'}")
        if "SHM" not in forward | backward:
            text += ", no SHM"
        lines.append(f"{a}<->{b}: {text}")
    return lines


def _is_p2p(transport):
    return transport.startswith("P2P/")


def p2p_proof(parsed):
    """Whether NCCL's P2P transport carries every connection between ranks on this host.

    NCCL's single-node rings run one direction per channel and its trees are chains, so a
    healthy 8-rank log does not show both directions of every pair. The proof instead asks:
    every connection between two local ranks uses P2P (one SHM or NET edge fails it and is
    named), and every rank both sends and receives over P2P. Ranks on another host (known
    from the communicator lines) are reached over NET by design and are not judged.
    Returns {in_effect, reasons, ranks, edges, p2p_edges}.
    """
    edges = parsed["channels"]
    hosts = {int(rank): info["host"] for rank, info in parsed.get("ranks", {}).items()}
    single_node = any(info.get("nnodes") == 1 for info in parsed.get("ranks", {}).values())

    def local(edge):
        # NCCL marks an edge to another node [send]/[receive]; otherwise unknown placement counts
        # as local: a serving unit is one host, so NET there is a failure.
        if edge.get("remote") and not single_node:
            return False
        src, dst = edge["src"], edge["dst"]
        return single_node or src not in hosts or dst not in hosts or hosts[src] == hosts[dst]

    judged = [e for e in edges if local(e)]
    reasons = []
    if not judged:
        reasons.append("no NCCL connection lines between local ranks in the log")
    bad = sorted({(e["channel"], e["src"], e["dst"], e["raw"]) for e in judged if not _is_p2p(e["transport"])})
    for channel, src, dst, raw in bad[:8]:
        reasons.append(f"rank {src} -> rank {dst} on channel {channel:02d} via {raw}")
    if len(bad) > 8:
        reasons.append(f"... and {len(bad) - 8} more connections without P2P")
    ranks = sorted({e["src"] for e in judged} | {e["dst"] for e in judged})
    expected = parsed.get("nranks")
    if expected and (single_node or len(set(hosts.values())) <= 1):
        missing = sorted(set(range(expected)) - set(ranks))
        if missing:
            reasons.append(f"ranks {missing} of {expected} have no connection in the log")
    p2p_edges = [e for e in judged if _is_p2p(e["transport"])]
    senders, receivers = {e["src"] for e in p2p_edges}, {e["dst"] for e in p2p_edges}
    if judged and not p2p_edges:
        reasons.append("no connection between local ranks uses P2P")
    for rank in ranks if p2p_edges else []:
        if rank not in senders:
            reasons.append(f"rank {rank} never sends over P2P")
        if rank not in receivers:
            reasons.append(f"rank {rank} never receives over P2P")
    return {"in_effect": not reasons, "reasons": reasons, "ranks": ranks,
            "edges": len(judged), "p2p_edges": len(p2p_edges), "remote_edges": len(edges) - len(judged)}


def p2p_in_effect(parsed):
    """True when P2P carries every local connection and every rank sends and receives over it."""
    return p2p_proof(parsed)["in_effect"]


def image_versions(run, runtime, image):
    """The NCCL and CUDA versions inside `image`, asked by running it once (`run`: host_commands' runner)."""
    rc, out, err = run(image_probe_command(runtime, image))
    if rc != 0:
        return {"reason": f"{runtime} run {image} failed (rc={rc}): {err.strip()[-500:]}"}
    try:
        found = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"reason": f"unexpected output from the image probe: {out[-300:]!r}"}
    return {lib: {"code": v, "version": decode_version(v)} if isinstance(v, int) and v > 0
            else {"reason": str(v)} for lib, v in found.items()}
