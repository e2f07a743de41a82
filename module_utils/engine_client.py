"""A small HTTP client for OpenAI-compatible serving engines (SGLang, vLLM).

Pure standard library so it runs on any managed host's Python. Errors never raise:
every call returns a dict with `ok` and, when not ok, an `error` naming the cause.
"""

import http.client
import json
import time
from urllib.parse import urlsplit


def _connection(base_url, timeout):
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"base URL must be http(s)://host[:port], got {base_url!r}")
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    return cls(parts.hostname, parts.port, timeout=timeout), parts.path.rstrip("/")


def _get(base_url, path, api_key, timeout):
    """GET path: (status, raw bytes) or (None, the error named)."""
    try:
        conn, prefix = _connection(base_url, timeout)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        conn.request("GET", prefix + path, headers=headers)
        response = conn.getresponse()
        raw = response.read()
        conn.close()
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return None, f"GET {path}: {type(exc).__name__}: {exc}"
    return response.status, raw


def get_text(base_url, path, api_key=None, timeout=10.0):
    """GET a text document (Prometheus' /metrics); returns {ok, status, text | error}."""
    status, raw = _get(base_url, path, api_key, timeout)
    if status is None:
        return {"ok": False, "status": None, "error": raw}
    if not 200 <= status < 300:
        return {"ok": False, "status": status, "error": f"GET {path}: HTTP {status}"}
    return {"ok": True, "status": status, "text": raw.decode("utf-8", "replace")}


def get_json(base_url, path, api_key=None, timeout=10.0):
    """GET a JSON document; returns {ok, status, body | error}."""
    status, raw = _get(base_url, path, api_key, timeout)
    if status is None:
        return {"ok": False, "status": None, "error": raw}
    try:
        body = json.loads(raw) if raw else {}
    except ValueError:
        return {"ok": False, "status": status, "error": f"GET {path}: body is not JSON: {raw[:200]!r}"}
    ok = 200 <= status < 300
    result = {"ok": ok, "status": status, "body": body}
    if not ok:
        result["error"] = f"GET {path}: HTTP {status}"
    return result


def _read_sse(response, started, result):
    """Consume an SSE stream of chat.completion.chunk events into result."""
    content, tool_calls = [], []
    saw_done = False
    for raw_line in response:
        line = raw_line.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            saw_done = True
            break
        try:
            chunk = json.loads(data)
        except ValueError:
            result["error"] = f"stream chunk is not JSON: {data[:200]!r}"
            return
        result["chunks"] += 1
        if isinstance(chunk.get("error"), dict):
            # vLLM's (and SGLang's) error inside an open stream (HTTP was already 200), then [DONE]:
            # {"error": {"message", "type", "code"}} - a failed request, never an answer without text
            error = chunk["error"]
            result["error"] = f"error in the stream: {error.get('type')} {error.get('code')}: " \
                              f"{str(error.get('message'))[:300]}"
            continue
        if chunk.get("usage"):
            result["usage"] = chunk["usage"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if (delta.get("content") or delta.get("tool_calls")) and result["ttft_s"] is None:
                result["ttft_s"] = time.perf_counter() - started
            if delta.get("content"):
                content.append(delta["content"])
            tool_calls.extend(delta.get("tool_calls") or [])
            if choice.get("finish_reason"):
                result["finish_reason"] = choice["finish_reason"]
    result["content"] = "".join(content)
    result["tool_calls"] = tool_calls
    if not saw_done:
        result["error"] = "stream ended without data: [DONE] (truncated)"


def chat(base_url, body, api_key=None, timeout=60.0, request_id=None):
    """POST /v1/chat/completions and time it from the client's side.

    Returns {ok, status, ttft_s, e2e_s, content, tool_calls, usage, finish_reason,
    chunks, logprobs, error} (logprobs: the choice's, non-streamed only). ttft_s is the time
    to the first content (or tool call) chunk for a
    streamed request, and equals e2e_s for a non-streamed one.
    """
    result = {"ok": False, "status": None, "ttft_s": None, "e2e_s": None, "content": None,
              "tool_calls": [], "usage": None, "finish_reason": None, "chunks": 0,
              "logprobs": None, "error": None}
    payload = json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    if request_id:  # the engine's own request log can be matched to the evidence (vLLM, SGLang take it)
        headers["X-Request-Id"] = request_id
    try:
        conn, prefix = _connection(base_url, timeout)
        started = time.perf_counter()
        conn.request("POST", prefix + "/v1/chat/completions", body=payload, headers=headers)
        response = conn.getresponse()
        result["status"] = response.status
        if response.status != 200:
            result["error"] = f"HTTP {response.status}: {response.read()[:300]!r}"
        elif body.get("stream"):
            _read_sse(response, started, result)
        else:
            raw = response.read()
            try:
                doc = json.loads(raw)
                message = doc["choices"][0]["message"]
            except (ValueError, KeyError, IndexError, TypeError):
                result["error"] = f"response is not a chat completion: {raw[:300]!r}"
            else:
                result["content"] = message.get("content")
                result["tool_calls"] = message.get("tool_calls") or []
                result["usage"] = doc.get("usage")
                result["finish_reason"] = doc["choices"][0].get("finish_reason")
                result["logprobs"] = doc["choices"][0].get("logprobs")  # asked with "logprobs": true
        result["e2e_s"] = time.perf_counter() - started
        conn.close()
    except (TimeoutError, OSError, http.client.HTTPException, ValueError) as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
    if result["ttft_s"] is None and result["error"] is None and not body.get("stream"):
        result["ttft_s"] = result["e2e_s"]
    result["ok"] = result["error"] is None
    return result


def wait_healthy(base_url, path, timeout_s, interval_s=0.5, unit_failed=None, clock=time.monotonic,
                 sleep=time.sleep, progress=None, stall_s=0):
    """Poll base_url+path until HTTP 200 or timeout_s: {ok, status, elapsed_s, polls, error, stage}.
    One call, no per-poll output (a successful wait prints nothing alarming). unit_failed(), when
    given, is asked between polls and stops the wait early with its reason (the unit died).

    progress(), when given, returns (marker, last_line) of the engine's start-up log: a new marker is
    progress, so a slow start that keeps logging is not a hang; no new marker for stall_s (> 0) with
    the process alive is a hang. Each failure is named as a crash, a hang or a slow start, with the
    last log line (the phase the engine was in)."""
    started = clock()
    polls, last = 0, None
    marker, line, moved = None, None, started
    while True:
        polls += 1
        last = get_json(base_url, path, timeout=min(5.0, max(timeout_s, 0.1)))
        now = clock()
        if last["status"] == 200:
            return {"ok": True, "status": 200, "elapsed_s": now - started, "polls": polls, "stage": "ready"}
        if progress:
            seen, seen_line = progress()
            if seen != marker:
                marker, line, moved = seen, seen_line or line, now
        phase = "" if not progress else f"; last log line: {line!r}" if line else "; nothing logged"
        dead = unit_failed() if unit_failed else None
        if dead:
            return {"ok": False, "status": last["status"], "elapsed_s": now - started, "polls": polls, "stage": "crash",
                    "error": f"crash: {dead} while waiting for {path}{phase}"}
        if progress and stall_s > 0 and now - moved >= stall_s:
            return {"ok": False, "status": last["status"], "elapsed_s": now - started, "polls": polls, "stage": "hang",
                    "error": f"hang: the engine logged nothing for {now - moved:.0f} s (stall limit {stall_s} s) with "
                             f"its process alive and {base_url}{path} not 200 "
                             f"(last: {last.get('error') or last['status']}){phase}"}
        if now - started >= timeout_s:
            # still logging when the time-out came (a line within the last 10 s): slow, not hung
            slow = bool(progress and line and now - moved < 10)
            logged = f"; the engine last logged {now - moved:.0f} s ago: {line!r}" if progress and line else phase
            return {"ok": False, "status": last["status"], "elapsed_s": now - started, "polls": polls,
                    "stage": "slow" if slow else "timeout",
                    "error": f"{'slow start: ' if slow else ''}no HTTP 200 from {base_url}{path} within {timeout_s} s "
                             f"(last: {last.get('error') or last['status']}){logged}"
                             + ("; it is still starting, not hung: raise the ready time-out if this engine loads longer"
                                if slow else "")}
        sleep(interval_s)


# The engine connection: what every task that talks to the engine needs, passed as one value (the rollout
# role's _rollout_connection) instead of four arguments by hand.
CONNECTION_SPEC = {"type": "dict", "default": {},
                   "options": {"base_url": {"type": "str"}, "model": {"type": "str"}, "api_key_var": {"type": "str"},
                               "env_files": {"type": "list", "elements": "path"}}}
CONNECTION = tuple(CONNECTION_SPEC["options"])
# A module that sends the engine requests takes the connection and the four values it spreads (their documentation:
# doc_fragments/engine_request.py).
ENGINE_ARGS = {"base_url": {"type": "str"}, "connection": CONNECTION_SPEC, "model": {"type": "str"},
               "api_key_var": {"type": "str"}, "env_files": {"type": "list", "elements": "path", "default": []}}


def connected(params):
    """params with the connection's values where the task left the argument unset (an explicit argument wins;
    an empty api_key_var means none). model falls back to 'default', env_files to []."""
    connection = params.get("connection") or {}
    merged = dict(params)
    for key in CONNECTION:
        if merged.get(key) in (None, "", []) and connection.get(key) not in (None, ""):
            merged[key] = connection[key]
    merged["model"] = merged.get("model") or "default"
    merged["env_files"] = merged.get("env_files") or []
    merged["api_key_var"] = merged.get("api_key_var") or None
    return merged


def connect_module(module):
    """A module's params with its connection merged in (connected); a module with no base_url fails naming it."""
    module.params.update(connected(module.params))
    if not module.params["base_url"]:
        module.fail_json(msg="no engine to talk to: base_url (or connection.base_url) is required, got none")
