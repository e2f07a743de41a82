"""Make the lab's tiny model: a Llama-architecture config with seeded random weights (saved by
transformers) and a byte-level BPE tokenizer trained here on local text, with a ChatML chat
template that also renders tools (hermes style). No model hub: nothing is downloaded.

Its answers are random text: the lab's real vLLM serves it to exercise vLLM's own code
(readiness, logs, API, structured outputs, tool-call parsing, shutdown), never model quality.

    python make-model.py OUT_DIR      (run with the lab's vLLM venv: torch, transformers, tokenizers)
"""

import glob
import json
import sys
from pathlib import Path

import torch
from tokenizers import ByteLevelBPETokenizer
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

VOCAB = 4096
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
CHAT_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\nYou may call one or more functions. Function signatures:\n<tools>\n"
    "{%- for tool in tools %}{{ tool | tojson }}\n{%- endfor %}</tools>\n"
    "Return a call as <tool_call>{\"name\": <name>, \"arguments\": <args>}</tool_call><|im_end|>\n{%- endif %}"
    "{%- for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{%- if message['content'] is string %}{{ message['content'] }}{%- endif %}"
    "{%- if message.tool_calls is defined %}{%- for call in message.tool_calls %}<tool_call>"
    "{\"name\": \"{{ call.function.name }}\", \"arguments\": {{ call.function.arguments | tojson }}}"
    "</tool_call>{%- endfor %}{%- endif %}<|im_end|>\n{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}")


def corpus():
    """Local text to train the tokenizer on: this machine's Python sources and docs."""
    files = sorted(glob.glob("/usr/lib/python3*/**/*.py", recursive=True))[:400]
    return [f for f in files if Path(f).stat().st_size < 200_000]


def main(out):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = ByteLevelBPETokenizer()
    tokenizer.train(corpus(), vocab_size=VOCAB, min_frequency=2, special_tokens=SPECIAL, show_progress=False)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                   unk_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    torch.manual_seed(20261201)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=8192,
                         bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                         pad_token_id=fast.pad_token_id, tie_word_embeddings=False, torch_dtype="float32")
    LlamaForCausalLM(config).save_pretrained(out, safe_serialization=True)
    (out / "lab-model.json").write_text(json.dumps({"made_by": "lab/vllm/make-model.py", "weights": "random",
                                                    "seed": 20261201, "vocab": VOCAB}) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
