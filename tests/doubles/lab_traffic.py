#!/usr/bin/env python3
"""LAB ONLY, a TEST DOUBLE of a serving host's users: a steady stream of chat completions of mixed lengths to the
engine on this host, one at a time, for as long as it runs (a fleet promotion's bake compares the engine's metrics
over such traffic before and after the promotion). Failed or refused requests are counted by the engine, not here:
the stream goes on through a restart as users' requests would.

  lab_traffic.py [--port 30000] [--pause-s 0.05] [--seed 0]   (the API key from $SGLANG_API_KEY)
"""

import argparse
import json
import os
import random
import time
import urllib.error
import urllib.request


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--pause-s", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    headers = {"Content-Type": "application/json"}
    if os.environ.get("SGLANG_API_KEY"):
        headers["Authorization"] = f"Bearer {os.environ['SGLANG_API_KEY']}"
    count = 0
    while True:
        count += 1
        body = {"model": "default", "max_tokens": rng.randint(16, 120),
                "messages": [{"role": "user", "content": "word " * rng.randint(50, 1500)}]}
        request = urllib.request.Request(f"http://127.0.0.1:{args.port}/v1/chat/completions",
                                         data=json.dumps(body).encode(), method="POST",
                                         headers={**headers, "X-Request-Id": f"lab-traffic-{count}"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                response.read()
        except (urllib.error.URLError, OSError):
            time.sleep(0.5)  # the engine restarting or refusing: as a user, try again shortly
        time.sleep(args.pause_s)


if __name__ == "__main__":
    main()
