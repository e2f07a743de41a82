"""Prompts built to target token counts, unique per request (no prefix-cache hits).

Token counts here are word counts, an estimate: the engine's `usage.prompt_tokens` is the
actual count and is what records keep.
"""

import re
import uuid

FILLER = ("the", "river", "stone", "lantern", "quiet", "market", "orchard", "signal", "harbor", "meadow",
          "copper", "window", "garden", "thunder", "violet", "compass", "ember", "glacier", "saddle", "willow")


def nonce():
    return uuid.uuid4().hex[:12]


def filler_words(count, salt):
    """`count` filler words, varied by `salt` so no two prompts share a long prefix."""
    offset = int(salt[:8], 16) if salt else 0
    return [FILLER[(i * 7 + offset) % len(FILLER)] for i in range(count)]


def with_target(instruction, target_tokens, salt=None):
    """A prompt of about target_tokens words: a unique header, filler, then the instruction."""
    salt = salt or nonce()
    header = f"Request {salt}."
    words = max(0, target_tokens - len(header.split()) - len(instruction.split()))
    return " ".join([header, *filler_words(words, salt), instruction])


def needle_prompt(target_tokens, depth, needle, salt=None):
    """A needle sentence at `depth` (0 = start, 1 = end) of a prompt of about target_tokens words."""
    if not 0.0 <= depth <= 1.0:
        raise ValueError(f"depth must be within 0..1, got {depth!r}")
    salt = salt or nonce()
    sentence = f"The secret code is {needle}."
    question = "What is the secret code? Answer with the code only."
    header = f"Request {salt}."
    budget = max(0, target_tokens - len(header.split()) - len(sentence.split()) - len(question.split()))
    words = filler_words(budget, salt)
    cut = int(round(depth * len(words)))
    return " ".join([header, *words[:cut], sentence, *words[cut:], question])


CONTRACT_PATTERN = r"^[A-Z]+[0-9]+$"


def contract_violation(content, words, pattern=CONTRACT_PATTERN):
    """None when `content` is exactly `words` words each matching `pattern` (a string or a
    compiled pattern); else what is wrong. The one rule of the strict output contract."""
    got = (content or "").split()
    bad = [w for w in got if not re.match(pattern, w)]
    if len(got) == words and not bad:
        return None
    return f"{len(got)} words" + (f", not matching: {bad[:5]}" if bad else "")


def contract_prompt(words, salt=None):
    salt = salt or nonce()
    return (f"Request {salt}. Reply with exactly {words} code words: uppercase letters followed by digits, "
            "separated by single spaces, and nothing else.")
