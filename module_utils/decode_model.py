"""What one decode step of a tensor-parallel model spends in all-reduce, and so what a faster
all-reduce can save: sizes from the model's config.json, arithmetic on measured latencies.

Dense TP (Megatron-style) runs two all-reduces per layer (after attention and after the MLP
or MoE block), each of [tokens_per_step, hidden_size] in the activation dtype. tokens_per_step
is 1 for plain decode and k+1 for a speculative verify of k draft tokens (the 8-GPU handoff:
61 layers x 2 = 122 all-reduces of [3, 7168] bf16 = 43,008 B each per forward pass).
Pure functions.
"""

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "float8_e4m3fn": 1}
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")
HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model")


class ModelShapeError(ValueError):
    """A config or measurement that the arithmetic cannot use, named."""


def shape_from_config(config, source="config.json"):
    """{layers, hidden_size, dtype, dtype_bytes, source} from a HF config.json mapping (a
    multimodal config's text_config is used when the top level has no layers)."""
    if not isinstance(config, dict):
        raise ModelShapeError(f"{source}: not a JSON object")
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    merged = {**text, **{k: v for k, v in config.items() if k in LAYER_KEYS + HIDDEN_KEYS}} if text else config
    layers = next((merged[k] for k in LAYER_KEYS if isinstance(merged.get(k), int)), None)
    hidden = next((merged[k] for k in HIDDEN_KEYS if isinstance(merged.get(k), int)), None)
    if not layers or not hidden:
        raise ModelShapeError(f"{source}: no layer count ({'/'.join(LAYER_KEYS)}) or hidden size "
                              f"({'/'.join(HIDDEN_KEYS)}) found")
    # Activations run in the compute dtype; FP8 checkpoints still all-reduce bf16 activations.
    dtype = str(config.get("torch_dtype") or config.get("dtype") or text.get("torch_dtype") or "bfloat16")
    if dtype not in DTYPE_BYTES or DTYPE_BYTES[dtype] == 1:
        dtype = "bfloat16"
    return {"layers": layers, "hidden_size": hidden, "dtype": dtype, "dtype_bytes": DTYPE_BYTES[dtype],
            "source": source}


def tokens_per_step(speculative_num_draft_tokens=None):
    """1 for plain decode; the verify step of speculative decoding checks k drafts + 1."""
    if speculative_num_draft_tokens in (None, "", 0):
        return 1
    draft = int(speculative_num_draft_tokens)
    if draft < 0:
        raise ModelShapeError(f"speculative draft tokens must be >= 0, got {draft}")
    return draft + 1


def decode_allreduce(shape, tokens=1, allreduces_per_layer=2):
    """The all-reduce of one decode step: its size in bytes and how many run per step."""
    return {"bytes": tokens * shape["hidden_size"] * shape["dtype_bytes"],
            "per_step": shape["layers"] * allreduces_per_layer, "tokens_per_step": tokens}


def latency_at(points, nbytes):
    """Latency (us) at nbytes from measured {bytes: us} points: exact, else log-log interpolated
    between the neighbours; outside the measured range is refused (never extrapolated)."""
    import math

    if nbytes in points:
        return points[nbytes]
    below = [b for b in points if b < nbytes]
    above = [b for b in points if b > nbytes]
    if not below or not above:
        raise ModelShapeError(f"{nbytes} B is outside the measured sizes {sorted(points)}; measure it")
    lo, hi = max(below), min(above)
    t = (math.log(nbytes) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return math.exp(math.log(points[lo]) + t * (math.log(points[hi]) - math.log(points[lo])))


def predict(shape, baseline_us, candidate_us, tokens=1, allreduces_per_layer=2, accepted_per_step=None):
    """Predicted time saved by the candidate's all-reduce per decode step and per output token.

    baseline_us / candidate_us: {bytes: measured per-call latency (us)} of each arm.
    accepted_per_step: output tokens per step (1 plain; mean accepted length with speculation).
    """
    call = decode_allreduce(shape, tokens, allreduces_per_layer)
    before = latency_at(baseline_us, call["bytes"])
    after = latency_at(candidate_us, call["bytes"])
    per_step_us = call["per_step"] * (before - after)
    per_token = accepted_per_step or tokens
    return {**call, "baseline_us": before, "candidate_us": after, "saved_per_call_us": before - after,
            "saved_per_step_ms": per_step_us / 1000, "saved_per_token_ms": per_step_us / 1000 / per_token,
            "allreduce_ms_per_step_baseline": call["per_step"] * before / 1000}


def relative_effect(prediction, decode_ms_per_token):
    """Predicted fraction of the decode time per token saved, given the baseline's time per token."""
    if not decode_ms_per_token or decode_ms_per_token <= 0:
        raise ModelShapeError(f"baseline decode time per token must be > 0 ms, got {decode_ms_per_token!r}")
    return prediction["saved_per_token_ms"] / decode_ms_per_token


def below_min_effect(prediction, decode_ms_per_token, min_effect):
    """A flag before GPU time is spent: the predicted gain is smaller than the A/B can call."""
    effect = relative_effect(prediction, decode_ms_per_token)
    return {"predicted_effect": effect, "min_effect": min_effect, "flag": effect < min_effect,
            "reason": (f"predicted decode gain {effect:.1%} is below the A/B's minimum effect {min_effect:.1%}"
                       if effect < min_effect else None)}


def config_candidates(model, revision=None, hf_homes=(), snapshots=None):
    """Where a served model's config.json can be on the host, in the order to try: the model
    path itself (a local directory), then the Hugging Face cache of each HF_HOME
    (hub/models--ORG--NAME/snapshots/REVISION/config.json; without a revision, each snapshot
    that `snapshots(dir)` lists)."""
    if not model:
        return []
    found = [f"{model.rstrip('/')}/config.json"] if model.startswith(("/", ".")) else []
    repo_dir = "models--" + model.strip("/").replace("/", "--")
    for home in hf_homes:
        base = f"{home.rstrip('/')}/hub/{repo_dir}/snapshots"
        if revision:
            found.append(f"{base}/{revision}/config.json")
        elif snapshots:
            found += [f"{base}/{snap}/config.json" for snap in sorted(snapshots(base))]
    return found


def compare_with_cells(prediction, verdict_cells):
    """Predicted beside measured, per eligible cell of an A/B: the decode rate change and the E2E
    change the all-reduce saving predicts (from the baseline's own decode time), the measured
    deltas, and the gap. TTFT is not predicted: prefill all-reduces are of another size."""
    rows = []
    for cell in verdict_cells or []:
        metrics = cell.get("metrics") or {}
        decode, e2e, ttft = metrics.get("decode_tps"), metrics.get("e2e_s"), metrics.get("ttft_s")
        if not cell.get("eligible", True) or not decode or not e2e or not ttft:
            rows.append({"cell": cell.get("cell"), "compared": False,
                         "reason": "; ".join(cell.get("reasons") or []) or "no decode/E2E/TTFT metrics"})
            continue
        ms_per_token = 1000.0 / decode["baseline"]["median"]
        saved = prediction["saved_per_token_ms"] / ms_per_token  # fraction of decode time saved
        decode_time = e2e["baseline"]["median"] - ttft["baseline"]["median"]
        predicted_e2e = -decode_time * saved / e2e["baseline"]["median"]
        predicted_decode = 1.0 / (1.0 - saved) - 1.0 if saved < 1 else None
        rows.append({"cell": cell["cell"], "compared": True, "baseline_ms_per_token": ms_per_token,
                     "predicted_decode_delta": predicted_decode, "measured_decode_delta": decode.get("delta"),
                     "predicted_e2e_delta": predicted_e2e, "measured_e2e_delta": e2e.get("delta"),
                     "measured_ttft_delta": ttft.get("delta"),
                     "decode_gap": (decode.get("delta") - predicted_decode) if predicted_decode is not None
                     and decode.get("delta") is not None else None})
    return rows
