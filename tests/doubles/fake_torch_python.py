#!/usr/bin/env python3
"""fake_torch_python: a TEST DOUBLE of a GPU host's torch interpreter for p2p_check.

p2p_check runs `<python> p2p_worker.py <command> <json>`; pointed at this script, it
answers like the worker would on two healthy NVLink GPUs, or with the fault named in
P2P_DOUBLE_MODE: hang_peer, hang_allreduce (a child of the worker hangs too, so the
kill must take the whole process group), corrupt, busy, error.
It never counts as a real peer-path proof.
"""

import json
import os
import subprocess
import sys
import time

MARK = "P2PCHECK_RESULT "
MODE = os.environ.get("P2P_DOUBLE_MODE", "ok")


def emit(result):
    print(MARK + json.dumps({"status": "ok", **result}), flush=True)


def hang():
    # A grandchild that outlives its parent unless the process group is killed.
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)  # p2p-double-grandchild"])
    time.sleep(300)


def main():
    _, command, raw = sys.argv[1:4]
    args = json.loads(raw)
    if command == "preflight":
        gpus = args["gpus"] or [0, 1]
        emit({"nvml": "ok", "gpus": [{
            "index": g, "bus_id": f"00000000:00:0{6 + g}.0",
            "compute_processes": [{"pid": 4242, "used_memory": 1 << 30}] if MODE == "busy" else [],
            "nvlink_remotes": ["FFFFFFFF:FF:FF.0"] * 18, "nvlink_peers": [p for p in gpus if p != g],
            "pcie_gen": 5, "pcie_width": 16} for g in gpus]})
    elif command == "peer":
        if MODE == "hang_peer":
            hang()
        corrupt = MODE == "corrupt"
        emit({"in_process": [{"src": s, "dst": d, "can_access_peer": True, "bytes": args["bytes"],
                              "verified": not (corrupt and s == 1), "mismatched_bytes": 17 if corrupt and s == 1 else 0,
                              "uni_gbps": 380.0, "bidir_gbps": 700.0, "latency_us": 22.0}
                             for s, d in args["pairs"]],
              "ipc": [{"src": s, "dst": d, "bytes": args["ipc_bytes"], "verified": True,
                       "mismatched_bytes": 0, "gbps": 350.0} for s, d in args.get("ipc_pairs", args["pairs"])],
              "ipc_exit_code": 0})
    elif command in ("allreduce", "allreduce_graph"):
        if MODE == "hang_allreduce":
            hang()
        if MODE == "error":
            print("RuntimeError: NCCL error: unhandled system error", flush=True)
            sys.exit(1)
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        p2p = os.environ.get("NCCL_P2P_DISABLE") != "1"
        transport = "P2P/CUMEM" if p2p else "SHM/direct/direct"
        label = "00/0" if p2p else "00"
        print(f"fake:1:1 [{rank}] NCCL INFO NCCL version 2.28.9+cuda13.0")
        print(f"fake:1:1 [{rank}] NCCL INFO Channel {label} : {rank}[{rank}] -> "
              f"{(rank + 1) % world}[{(rank + 1) % world}] via {transport}", flush=True)
        # Small sizes: an eager loop is launch-bound (40/45 us); in a CUDA graph P2P shows (7.5/14 us).
        small = (7.5 if p2p else 14.0) if command == "allreduce_graph" else (40.0 if p2p else 45.0)
        sizes = [{"bytes": b, "median_us": small if b < 1 << 20 else (137.0 if p2p else 1200.0),
                  "samples_us": [], "algbw_gbps": 1.0, "busbw_gbps": 1.0, "correct": True}
                 for b in args["sizes"]]
        emit({"rank": rank, "world_size": world, "sizes": sizes})


if __name__ == "__main__":
    main()
