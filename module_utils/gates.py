"""Correctness gates against an OpenAI-compatible engine. Each returns a record with inputs,
observed, expected, verdict (pass/fail), reason and duration; errors become failed gates.

`chat` is engine_client.chat (or any function with its signature), so tests run the gates
against the engine double and each of its faults.
"""

import json
import re
import time

from .engine_client import chat as http_chat
from .engine_client import get_json
from .prompts import (
    CONTRACT_PATTERN,
    contract_prompt,
    contract_violation,
    needle_prompt,
    nonce,
    with_target,
)

# Bounded names of letters: a real model's "Paris"/"France" fit, and a random-weight model (the
# lab's real vLLM) still ends its object within max_tokens with valid JSON, so the engine's
# structured output itself is checked (unbounded strings let xgrammar emit a raw tab: not JSON).
PLACE_NAME = {"type": "string", "pattern": "^[A-Za-z][A-Za-z .-]{0,23}$"}
PLACE_SCHEMA = {"type": "object", "properties": {"city": PLACE_NAME, "country": PLACE_NAME},
                "required": ["city", "country"], "additionalProperties": False}
ORDER_TOOL = {"type": "function", "function": {
    "name": "lookup_order", "description": "Look up an order by its id.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}}


def _request(options, messages, **extra):
    body = {"model": options.get("model", "default"), "messages": messages, "temperature": 0,
            "max_tokens": options.get("max_tokens", 64), **extra}
    return body, options.get("chat", http_chat)(options["base_url"], body, api_key=options.get("api_key"),
                                                  timeout=options.get("timeout_s", 60))


def _observed(result):
    return {"status": result["status"], "content": result["content"], "tool_calls": result["tool_calls"],
            "usage": result["usage"], "prompt_tokens": (result["usage"] or {}).get("prompt_tokens"),
            "ttft_s": result["ttft_s"], "e2e_s": result["e2e_s"], "error": result["error"]}


def smoke(options):
    # min_tokens (SGLang's and vLLM's sampling parameter): a model may end at once; an engine that
    # is alive still generates (the lab's random-weight model often ends on its first token).
    body, result = _request(options, [{"role": "user", "content": f"Request {nonce()}. Say hello."}], max_tokens=8,
                            min_tokens=4)
    ok = result["ok"] and bool((result["content"] or "").strip())
    reason = result["error"] or (None if ok else "empty completion")
    return body, _observed(result), "a non-empty completion", ok, reason


def json_gate(options):
    prompt = f"Request {nonce()}. Return the city and country of the Eiffel Tower as JSON. city: Paris country: France"
    body, result = _request(options, [{"role": "user", "content": prompt}], max_tokens=96, response_format={
        "type": "json_schema", "json_schema": {"name": "place", "schema": PLACE_SCHEMA, "strict": True}})
    expected = "a JSON object with string city and country"
    if not result["ok"]:
        return body, _observed(result), expected, False, result["error"]
    try:
        value = json.loads(result["content"] or "")
    except ValueError:
        return body, _observed(result), expected, False, "response is not JSON"
    missing = [k for k in PLACE_SCHEMA["required"] if not isinstance(value, dict) or not isinstance(value.get(k), str)]
    return body, _observed(result), expected, not missing, f"missing or non-string keys: {missing}" if missing else None


def needle(options):
    code = f"K{nonce()[:6].upper()}"
    prompt = needle_prompt(options.get("target_tokens", 4000), options.get("depth", 0.5), code)
    body, result = _request(options, [{"role": "user", "content": prompt}], max_tokens=16)
    body = {**body, "messages": [{"role": "user", "content": f"<{len(prompt.split())} words, needle {code} at depth "
                                                             f"{options.get('depth', 0.5)}>"}]}
    answer = (result["content"] or "").strip().strip(".").strip()
    ok = result["ok"] and answer == code
    reason = result["error"] or (None if ok else f"answered {answer!r}, expected {code!r}")
    return body, _observed(result), code, ok, reason


def tool_call(options):
    order = f"ORD-{nonce()[:6].upper()}"
    prompt = with_target(f"The customer asks about their order. order_id: {order} Look it up with the tool.",
                         options.get("target_tokens", 4000))
    body, result = _request(options, [{"role": "user", "content": prompt}], tools=[ORDER_TOOL])
    body = {**body, "messages": [{"role": "user", "content": f"<{len(prompt.split())} words, order {order}>"}]}
    expected = {"name": "lookup_order", "arguments": {"order_id": order}}
    if not result["ok"]:
        return body, _observed(result), expected, False, result["error"]
    calls = result["tool_calls"] or []
    if len(calls) != 1:
        return body, _observed(result), expected, False, f"expected one tool call, got {len(calls)}"
    function = calls[0].get("function", {})
    try:
        arguments = json.loads(function.get("arguments") or "")
    except ValueError:
        return body, _observed(result), expected, False, "tool call arguments are not JSON"
    ok = function.get("name") == "lookup_order" and arguments == {"order_id": order}
    return body, _observed(result), expected, ok, None if ok else f"called {function.get('name')} with {arguments}"


def contract(options):
    """Exactly N code words; a violation is recorded with the response, never dropped."""
    words = options.get("contract_words", 32)
    pattern = re.compile(options.get("contract_pattern", CONTRACT_PATTERN))
    body, result = _request(options, [{"role": "user", "content": contract_prompt(words)}],
                            max_tokens=options.get("max_tokens", 2 * words + 16))
    expected = f"exactly {words} words matching {pattern.pattern}"
    if not result["ok"]:
        return body, _observed(result), expected, False, result["error"]
    reason = contract_violation(result["content"], words, pattern)
    return body, _observed(result), expected, reason is None, reason


def server_info(options):
    """The engine's own account of its arguments (/server_info; older SGLang /get_server_info)."""
    for path in ("/server_info", "/get_server_info"):
        result = get_json(options["base_url"], path, api_key=options.get("api_key"),
                          timeout=options.get("timeout_s", 60))
        if result["ok"]:
            return {"path": path}, result["body"], "the engine's server info", True, None
    return {"path": "/server_info"}, {"status": result["status"]}, "the engine's server info", False, result["error"]


def version(options):
    """The engine's own version report: vLLM's /version, SGLang's /server_info (older /get_server_info)."""
    result = {"status": None, "error": "no version route answered"}
    for path in ("/version", "/server_info", "/get_server_info"):
        result = get_json(options["base_url"], path, api_key=options.get("api_key"),
                          timeout=options.get("timeout_s", 60))
        reported = (result.get("body") or {}).get("version") if result["ok"] and isinstance(result.get("body"), dict) \
            else None
        if reported:
            return {"path": path}, {"version": str(reported), "path": path}, "the engine's version report", True, None
    return {"path": "/version"}, {"status": result["status"]}, "the engine's version report", False, \
        result["error"] or "no version in the answer"


GATES = {"version": version, "server_info": server_info, "smoke": smoke, "json": json_gate, "needle": needle,
         "tool_call": tool_call, "contract": contract}


def run_gate(name, options, phase=""):
    """One gate's record. Unknown gates raise ValueError naming the valid ones."""
    if name not in GATES:
        raise ValueError(f"unknown gate {name!r}; valid gates: {', '.join(sorted(GATES))}")
    started = time.monotonic()
    try:
        inputs, observed, expected, ok, reason = GATES[name](options)
    except Exception as exc:  # a gate never crashes the run: the failure is its result
        inputs, observed, expected, ok, reason = {}, {}, None, False, f"{type(exc).__name__}: {exc}"
    return {"gate": name, "phase": phase, "engine": options["base_url"], "inputs": inputs,
            "observed": observed, "expected": expected, "verdict": "pass" if ok else "fail",
            "reason": reason, "duration_s": round(time.monotonic() - started, 4)}


def not_qualified_records(not_qualified, gates, phase):
    """One record per gate of `gates` named in `not_qualified` ({gate: why}): verdict not-qualified with the
    reason, as a gate record shows it. A gate that cannot be meaningful on a host's model (the lab's random
    weights) is never run and never passed. ValueError names a reason that is not a non-empty string."""
    if not isinstance(not_qualified, dict) or not all(isinstance(v, str) and v.strip() for v in not_qualified.values()):
        raise ValueError(f"not_qualified must map each gate to the reason it cannot qualify; got {not_qualified!r}")
    if not isinstance(gates, list):
        raise ValueError(f"gates must be a list of gate names; got {gates!r}")
    return [{"gate": gate, "phase": phase, "verdict": "not-qualified",
             "reason": f"not qualified: {not_qualified[gate]}", "inputs": {}, "observed": {}, "expected": None}
            for gate in gates if gate in not_qualified]


def failed_gate_message(record):
    """How a failed gate is named in a run's failure: the gate, its phase, the reason and what it saw."""
    return (f"gate {record['gate']} failed ({record['phase']}): {record['reason']}; "
            f"observed {(record.get('observed') or {}).get('content')}")
