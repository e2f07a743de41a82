"""The numerical-equivalence probe: the same fixed prompts, greedy, with logprobs, on each arm.

A changed communication or memory path can corrupt silently: with the IOMMU on, peer copies have
arrived zeroed while the kernel logged IO_PAGE_FAULT, and a latency or bandwidth test still passed.
Greedy decoding of fixed prompts shows it: the same model on the same inputs picks the same tokens
unless the numbers under it changed. How much they may change is the control's (the catalog's
`numerics`): exact where the kernels are the same, a near-tie flipped where the reduction order or
the kernels legitimately change.

A divergence is EXPLAINED when the original's own choice at that position led its runner-up by no
more than the tolerance's tie margin (numerics noise can flip a near-tie, never a confident choice);
a confident choice replaced is corruption. Before the first divergence of a prompt the chosen
tokens' logprobs are compared; after it the two continuations differ in context, so they are not.

Pure: `probe` takes the chat function (engine_client.chat or the tests' own) and never raises.
"""

from .engine_client import chat as http_chat
from .prompts import with_target

# What a control may change in the numbers (module_utils/controls.py names one per control):
# max_logprob_drift: the largest |logprob difference| of a chosen token before its prompt diverges;
# tie_margin: a divergence is explained where the original's top two differed by at most this (nats).
TOLERANCES = {
    "exact": {"max_logprob_drift": 0.0, "tie_margin": 0.0,
              "why": "the same kernels on another path: the same tokens and the same logprobs"},
    "reduction-order": {"max_logprob_drift": 0.05, "tie_margin": 0.1,
                        "why": "the collective's reduction order may change: rounding moves logprobs a little "
                               "and may flip a near-tie"},
    "kernels": {"max_logprob_drift": 0.25, "tie_margin": 0.5,
                "why": "other kernels (an all-reduce implementation, an engine upgrade) round differently"},
    "version-change": {"max_logprob_drift": 0.5, "tie_margin": 1.0,
                       "why": "another engine release: its kernels, fusions and defaults may change the rounding and "
                              "flip a near-tie; a confident answer of a fixed prompt may not change"},
}
PROMPT_LENGTHS = (48, 200, 800)  # words: short, mid and a prefill long enough to span several chunks


class EquivalenceError(ValueError):
    """A bad probe setting or tolerance, naming the bad value."""


def tolerance(name_or_spec):
    """A tolerance from its name or an operator's {max_logprob_drift, tie_margin}; None: not judged."""
    if name_or_spec in (None, "", {}):
        return None
    if isinstance(name_or_spec, str):
        if name_or_spec not in TOLERANCES:
            raise EquivalenceError(f"unknown numerics tolerance {name_or_spec!r}; known: {', '.join(TOLERANCES)}")
        return {"name": name_or_spec, **TOLERANCES[name_or_spec]}
    if not isinstance(name_or_spec, dict):
        raise EquivalenceError(f"a numerics tolerance is a name or a mapping, got {name_or_spec!r}")
    spec = dict(name_or_spec)
    for key in ("max_logprob_drift", "tie_margin"):
        value = spec.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise EquivalenceError(f"numerics tolerance {key} must be a number >= 0, got {value!r}")
    return {"name": spec.get("name", "operator"), "max_logprob_drift": float(spec["max_logprob_drift"]),
            "tie_margin": float(spec["tie_margin"]), "why": spec.get("why", "set by the operator")}


def prompts(count):
    """`count` fixed prompts (the same on every arm and every run: no nonce, so compared across arms)."""
    if not 1 <= int(count) <= 256:
        raise EquivalenceError(f"the probe's prompt count must be 1..256, got {count!r}")
    return [with_target(f"Continue the list of words, item {i}.", PROMPT_LENGTHS[i % len(PROMPT_LENGTHS)],
                        salt=f"{0xE0 + i:08x}") for i in range(int(count))]


def request_body(prompt, tokens, model="default"):
    # ignore_eos: every arm generates `tokens` positions (a random-weight model ends at once otherwise)
    return {"model": model, "messages": [{"role": "user", "content": prompt}], "temperature": 0, "seed": 0,
            "max_tokens": int(tokens), "ignore_eos": True, "logprobs": True, "top_logprobs": 2}


def parse_answer(logprobs):
    """{tokens, logprobs, margins} from an OpenAI chat choice's logprobs; margins[j] is how far the
    chosen token led its runner-up (None where the engine gave no runner-up)."""
    content = (logprobs or {}).get("content")
    if not isinstance(content, list) or not content:
        raise EquivalenceError("the engine returned no token logprobs (asked with logprobs=true, top_logprobs=2)")
    tokens, values, margins = [], [], []
    for item in content:
        tokens.append(str(item.get("token")))
        values.append(float(item.get("logprob")))
        others = [float(t["logprob"]) for t in item.get("top_logprobs") or [] if str(t.get("token")) != tokens[-1]]
        margins.append(round(values[-1] - max(others), 6) if others else None)
    return {"tokens": tokens, "logprobs": values, "margins": margins}


def probe(base_url, count, tokens, model="default", api_key=None, timeout_s=120.0, chat=http_chat):
    """Each fixed prompt's greedy answer: {answers: [{tokens, logprobs, margins} | {error}], errors}."""
    answers, errors = [], []
    for index, prompt in enumerate(prompts(count)):
        result = chat(base_url, request_body(prompt, tokens, model), api_key=api_key, timeout=timeout_s,
                      request_id=f"serving-rollout-numerics-{index}")
        try:
            if not result["ok"]:
                raise EquivalenceError(result["error"])
            answers.append(parse_answer(result.get("logprobs")))
        except (EquivalenceError, TypeError, ValueError) as exc:
            answers.append({"error": str(exc)})
            errors.append(f"prompt {index}: {exc}")
    return {"answers": answers, "errors": errors}


def _first_divergence(ref, got):
    for j, (a, b) in enumerate(zip(ref["tokens"], got["tokens"], strict=False)):
        if a != b:
            return j
    return None if len(ref["tokens"]) == len(got["tokens"]) else min(len(ref["tokens"]), len(got["tokens"]))


def compare(reference, answers, spec):
    """The candidate's answers against the original's: agreement, drift, divergences and, when a
    tolerance is given, a verdict (pass/fail) with the reason; `recorded` when not judged."""
    if len(reference) != len(answers):
        raise EquivalenceError(f"{len(answers)} answers against {len(reference)} reference answers")
    spec = tolerance(spec)
    prompts_out, compared, agreed, drift = [], 0, 0, 0.0
    for index, (ref, got) in enumerate(zip(reference, answers, strict=True)):
        if "error" in ref or "error" in got:
            raise EquivalenceError(f"prompt {index} has no answer to compare: {ref.get('error') or got.get('error')}")
        at = _first_divergence(ref, got)
        end = len(ref["tokens"]) if at is None else at
        deltas = [abs(a - b) for a, b in zip(ref["logprobs"][:end], got["logprobs"][:end], strict=True)]
        item = {"prompt": index, "first_divergence": at, "max_logprob_drift": round(max(deltas, default=0.0), 6)}
        if at is not None and at < len(ref["tokens"]) and at < len(got["tokens"]):
            margin = ref["margins"][at]
            item.update({"original": ref["tokens"][at], "candidate": got["tokens"][at], "original_margin": margin,
                         "explained": spec is not None and margin is not None and margin <= spec["tie_margin"]})
        elif at is not None:
            item.update({"original_length": len(ref["tokens"]), "candidate_length": len(got["tokens"]),
                         "explained": False})
        prompts_out.append(item)
        compared += len(ref["tokens"])
        agreed += end
        drift = max(drift, item["max_logprob_drift"])
    diverged = [p for p in prompts_out if p["first_divergence"] is not None]
    out = {"prompts": len(prompts_out), "identical": len(prompts_out) - len(diverged),
           "agreement": round(agreed / compared, 6) if compared else None,
           "first_divergence": min((p["first_divergence"] for p in diverged), default=None),
           "max_logprob_drift": round(drift, 6), "divergences": diverged, "tolerance": spec}
    if spec is None:
        return {**out, "verdict": "recorded", "reason": "not judged: this control's numerics have no tolerance"}
    reasons = []
    if drift > spec["max_logprob_drift"]:
        worst = max(prompts_out, key=lambda p: p["max_logprob_drift"])
        reasons.append(f"logprob drift {drift:.4g} > {spec['max_logprob_drift']:g} (prompt {worst['prompt']})")
    for item in diverged:
        if item["explained"]:
            continue
        if "original" in item:
            margin = item["original_margin"]
            led = "with no runner-up given" if margin is None else f"where the original's choice led by {margin:.4g}"
            reasons.append(f"prompt {item['prompt']} diverged at position {item['first_divergence']} "
                           f"({item['original']!r} -> {item['candidate']!r}) {led} (a tie within "
                           f"{spec['tie_margin']:g} may flip)")
        else:
            reasons.append(f"prompt {item['prompt']} answered {item['candidate_length']} tokens against "
                           f"{item['original_length']}")
    verdict = "fail" if reasons else "pass"
    summary = (f"{out['identical']}/{out['prompts']} prompts identical, greedy agreement "
               f"{out['agreement']:.4f}, max logprob drift {drift:.4g} (tolerance {spec['name']})")
    return {**out, "verdict": verdict,
            "reason": summary if not reasons else f"numerics differ beyond {spec['name']}: " + "; ".join(reasons[:3])
            + (f"; and {len(reasons) - 3} more" if len(reasons) > 3 else "") + f" [{summary}]"}


def record_for(result, reference, spec):
    """The probe's verdict: an error when a request failed; else the comparison's, when a reference is given."""
    if result["errors"]:
        return {"verdict": "error", "reason": "the numerics probe got no answer: " + "; ".join(result["errors"][:3])}
    if reference is None:
        return {"verdict": "pass", "reason": f"{len(result['answers'])} greedy answers recorded"}
    comparison = compare(reference, result["answers"], spec)
    return {"verdict": comparison["verdict"], "reason": comparison["reason"], "comparison": comparison}
