#!/usr/bin/env python3
"""LAB ONLY, a TEST DOUBLE of a serving host's users: a steady stream of chat completions of mixed lengths to the
engine on this host, one at a time, for as long as it runs (a fleet promotion's bake compares the engine's metrics
over such traffic before and after the promotion). Failed or refused requests are counted by the engine, not here:
the stream goes on through a restart as users' requests would.

  lab_traffic.py [--port 30000] [--model default] [--words 50-1500] [--tokens 16-120] [--pause-s 0.05] [--seed 0]
                 [--key-env SGLANG_API_KEY]   (the API key from that variable, when it is set)
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
    parser.add_argument("--model", default="default")
    parser.add_argument("--words", default="50-1500", help="the prompt's words, a range")
    parser.add_argument("--tokens", default="16-120", help="max_tokens, a range")
    parser.add_argument("--pause-s", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--key-env", default="SGLANG_API_KEY")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    words, tokens = ([int(n) for n in text.split("-")] for text in (args.words, args.tokens))
    headers = {"Content-Type": "application/json"}
    if os.environ.get(args.key_env):
        headers["Authorization"] = f"Bearer {os.environ[args.key_env]}"
    count = 0
    while True:
        count += 1
        body = {"model": args.model, "max_tokens": rng.randint(*tokens),
                "messages": [{"role": "user", "content": "word " * rng.randint(*words)}]}
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
