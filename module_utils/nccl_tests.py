"""NVIDIA nccl-tests' all_reduce_perf: the command for one arm, and its result table parsed.

all_reduce_perf is the field's reference for collective latency. peer-path uses it as a
cross-check beside its own probe when it is on the host (or given by path): its numbers are
what operators compare against. Pure functions; p2p_check runs the command.
"""

import re

# "       43008         21504  bfloat16     sum      -1    10.33    4.16    4.16      0    9.96 ..."
ROW_RE = re.compile(
    r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)\s+"
    r"([\d.e+]+)\s+([\d.e+]+)\s+([\d.e+]+)\s+(\S+)\s+"
    r"([\d.e+]+)\s+([\d.e+]+)\s+([\d.e+]+)\s+(\S+)"
)
VERSION_RE = re.compile(r"nccl-tests version (\S+) nccl-headers=(\d+) nccl-library=(\d+)")
AVG_BW_RE = re.compile(r"# Avg bus bandwidth\s*:\s*([\d.]+)")
OUT_OF_BOUNDS_RE = re.compile(r"# Out of bounds values\s*:\s*(\d+)")


def _wrong(text):
    return None if text == "N/A" else int(float(text))


def parse_output(text):
    """{version, rows: [{bytes, count, type, op, out_of_place: {time_us, algbw, busbw, wrong},
    in_place: {...}}], avg_busbw_gbps, out_of_bounds, errors}. `wrong` is None when the run
    did not check its data (-c 0)."""
    rows = []
    for line in (text or "").splitlines():
        match = ROW_RE.match(line)
        if not match:
            continue
        g = match.groups()

        def half(time_us, algbw, busbw, wrong):
            return {"time_us": float(time_us), "algbw_gbps": float(algbw), "busbw_gbps": float(busbw),
                    "wrong": _wrong(wrong)}
        rows.append({"bytes": int(g[0]), "count": int(g[1]), "type": g[2], "op": g[3],
                     "out_of_place": half(*g[5:9]), "in_place": half(*g[9:13])})
    version = VERSION_RE.search(text or "")
    avg = AVG_BW_RE.search(text or "")
    bounds = OUT_OF_BOUNDS_RE.search(text or "")
    return {
        "version": version.group(1) if version else None,
        "nccl_library": int(version.group(3)) if version else None,
        "rows": rows,
        "avg_busbw_gbps": float(avg.group(1)) if avg else None,
        "out_of_bounds": int(bounds.group(1)) if bounds else None,
        "errors": [line.strip() for line in (text or "").splitlines()
                   if "#wrong=" in line or "Test NCCL failure" in line or "Test CUDA failure" in line],
    }


def wrong_total(parsed):
    """Wrong elements over every checked row (None when nothing was checked)."""
    counts = [half["wrong"] for row in parsed["rows"] for half in (row["out_of_place"], row["in_place"])
              if half["wrong"] is not None]
    return sum(counts) if counts else None


def command(binary, size, gpus, iters=1000, warmup=100, check=True, graph_launches=0):
    """all_reduce_perf for one size over `gpus` GPUs of one process (threads: -t 1 -g N), bf16."""
    argv = [binary, "-b", str(size), "-e", str(size), "-d", "bfloat16", "-o", "sum", "-t", "1",
            "-g", str(gpus), "-n", str(iters), "-w", str(warmup), "-c", "1" if check else "0"]
    if graph_launches:
        argv += ["-G", str(graph_launches)]
    return argv
