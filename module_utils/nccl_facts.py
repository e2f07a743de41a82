"""NCCL facts: the version of the library a process loads, and what NCCL_DEBUG=INFO logs say.

The loaded library is what matters: torch's compile-time NCCL and a host libnccl can
differ on one host (the H200 observation has 2.28.9 in torch and 2.28.3 on the host).
"""

import ctypes
import os
import re

VERSION_LINE_RE = re.compile(r"NCCL INFO NCCL version (\d+\.\d+\.\d+)(?:\+cuda(\d+\.\d+))?")
CHANNEL_RE = re.compile(
    r"NCCL INFO Channel (\d+)(?:/\d+)? : (\d+)\[(\d+)\] -> (\d+)\[(\d+)\] via (\S+(?: pointer)?)"
)
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
    if raw.startswith("SHM/"):
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
    """Versions, per-channel transports and a per ordered rank pair summary of a NCCL log."""
    versions = sorted({m.group(1) for m in VERSION_LINE_RE.finditer(text or "")})
    cuda = sorted({m.group(2) for m in VERSION_LINE_RE.finditer(text or "") if m.group(2)})
    channels = []
    pairs = {}
    for match in CHANNEL_RE.finditer(text or ""):
        channel, src, _, dst, _, raw = match.groups()
        transport = normalize_transport(raw)
        channels.append({"channel": int(channel), "src": int(src), "dst": int(dst),
                         "transport": transport, "raw": raw})
        pairs.setdefault((int(src), int(dst)), set()).add(transport)
    pair_list = [{"src": s, "dst": d, "transports": sorted(t)} for (s, d), t in sorted(pairs.items())]
    return {
        "versions": versions,
        "cuda": cuda,
        "channels": channels,
        "pairs": pair_list,
        "warnings": WARN_RE.findall(text or ""),
        "summary": summarize_pairs(pair_list),
    }


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


def p2p_in_effect(parsed):
    """True when every ordered pair that appears uses only P2P transports, both directions."""
    pairs = parsed["pairs"]
    keys = {(p["src"], p["dst"]) for p in pairs}
    if not pairs or any((d, s) not in keys for s, d in keys):
        return False
    return all(all(t.startswith("P2P/") for t in p["transports"]) for p in pairs)
