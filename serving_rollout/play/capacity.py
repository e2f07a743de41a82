"""KV-cache capacity per arm, from the engine's own start-up report (the engine adapters read
SGLang's `KV Cache is allocated. #tokens: N` / `max_total_num_tokens=N`, vLLM's `KV cache size:
N tokens`, and the concurrency each states). A candidate that fits fewer tokens (cuMem, custom
all-reduce buffers, graph capture all take memory) serves fewer requests at once under load,
whatever its single-stream latency: more than `max_loss` of the baseline's tokens lost is a
reject unless the operator (or the plan) accepts it.

Pure; ValueError names the bad value."""


def arm_capacity(scan):
    """{kv_cache_tokens, max_concurrency} of one invocation's journal scan (None where not logged)."""
    scan = scan or {}
    return {"kv_cache_tokens": scan.get("kv_cache_tokens"), "max_concurrency": scan.get("max_concurrency")}


def kv_judgement(arms, max_loss=0.05, accepted=False):
    """The candidate's KV capacity against the baseline's: the original before the run (baseline-1),
    else the restored original (baseline-2). verdict: kept, lost (beyond max_loss), or unknown (an
    arm's engine did not report it); reason: one sentence with the figures."""
    if not isinstance(max_loss, int | float) or isinstance(max_loss, bool) or not 0 <= max_loss < 1:
        raise ValueError(f"max_loss must be a fraction from 0 to below 1, got {max_loss!r}")
    arms = arms or {}
    baseline = next((arms[arm]["kv_cache_tokens"] for arm in ("baseline-1", "baseline-2")
                     if (arms.get(arm) or {}).get("kv_cache_tokens")), None)
    candidate = (arms.get("candidate") or {}).get("kv_cache_tokens")
    record = {"baseline_tokens": baseline, "candidate_tokens": candidate, "change": None,
              "max_loss": max_loss, "accepted": bool(accepted),
              "max_concurrency": {arm: (arms.get(arm) or {}).get("max_concurrency")
                                  for arm in ("baseline-1", "candidate", "baseline-2")}}
    if not baseline or candidate is None:
        missing = [name for name, value in (("baseline", baseline), ("candidate", candidate)) if not value]
        return dict(record, verdict="unknown",
                    reason=f"KV capacity not judged: the {' and '.join(missing)} engine reported no KV cache size")
    change = candidate / baseline - 1
    record["change"] = round(change, 4)
    figures = f"{candidate} tokens against the baseline's {baseline} ({change:+.1%}; limit -{max_loss:.0%})"
    if change >= -max_loss:
        return dict(record, verdict="kept", reason=f"KV capacity kept: {figures}")
    accepted_text = " (a loss the operator accepted: rollout_kv_loss_accepted)" if accepted else ""
    return dict(record, verdict="lost", reason=f"KV capacity lost: {figures}{accepted_text}")
