"""A tiny random-weight Llama model that a real engine (vLLM's CPU build) can serve, made here.

No model can be downloaded on these machines (docs: issue 30). This writes a Hugging Face model
folder: a Llama config (a few layers, a small hidden size), a byte-level BPE tokenizer trained on
local text, a chat template with tools in the hermes format that vLLM's ``hermes`` tool parser
reads (``<tool_call>{"name": ..., "arguments": ...}</tool_call>``, each tag one special token),
and random weights in safetensors: a few MB. With random weights the model's free text is noise;
with ``tool_choice: required`` the engine's grammar forces a well-formed call all the same.

Runs in the engine's own venv (torch, transformers, tokenizers): ``make real-engine-model``, or
``.venv-vllm/bin/python -m experiments.real_engine.make_model OUT``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tokenizers import Tokenizer

# The tokens the chat template and vLLM's hermes parser need whole: the parser finds the tags
# by text, but the engine's structural-tag grammar and streaming want each as one token.
SPECIALS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>",
    "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
]

# Qwen2.5's hermes layout, shortened: tools as JSON in the system turn, calls as <tool_call>
# blocks in the assistant turn. A tool result is a turn of its own that ends as a user turn
# does, so the latest canary always sits at the same distance from the end of the prompt.
CHAT_TEMPLATE = """\
{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}# Tools

You may call one or more functions. Function signatures within <tools></tools>:
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>

For each call, return a json object with function name and arguments within \
<tool_call></tool_call> tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}\
<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% elif message.role == 'assistant' %}<|im_start|>assistant
{% if message.content %}{{ message.content }}{% endif %}
{%- for call in message.tool_calls or [] %}
{%- set fn = call.function if call.function is defined else call %}
<tool_call>
{"name": "{{ fn.name }}", "arguments": \
{% if fn.arguments is string %}{{ fn.arguments }}{% else %}{{ fn.arguments | tojson }}{% endif %}}
</tool_call>
{%- endfor %}<|im_end|>
{% elif message.role == 'tool' %}<|im_start|>tool
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""


def corpus(root: Path, fold: bool) -> Iterator[str]:
    """The repository's own prose and code, so the tokenizer needs no download. ``fold`` (for
    teaching): lower-cased and without digits, so no merge holds a capital or a digit and a
    canary (capitals and digits, experiments/agent.py) is one token per character, which
    teach.py relies on. Unfolded, merges hold digits ("17", "2026"), so random weights write
    numbers with many digits: the planted fault (a "7" in a call's arguments) needs them to show
    at all (BENCHMARKS.md "A real engine": 0 of 24 runs with the folded tokenizer)."""
    for pattern in ("*.md", "experiments/**/*.py", "orchestrator/**/*.py"):
        for path in sorted(root.glob(pattern)):
            text = path.read_text(encoding="utf-8", errors="replace")
            yield text.lower().translate(_NO_DIGITS) if fold else text


_NO_DIGITS = str.maketrans("", "", "0123456789")


def train_tokenizer(root: Path, vocab_size: int, fold: bool) -> Tokenizer:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(corpus(root, fold), trainer=trainer)
    return tokenizer


def make_model(out: Path, root: Path, *, layers: int, hidden: int, vocab: int, seed: int,
               teach_steps: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    raw = train_tokenizer(root, vocab, fold=teach_steps > 0)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=raw, bos_token="<|endoftext|>", eos_token="<|im_end|>",
        pad_token="<|endoftext|>", unk_token=None,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = 8192
    fast.save_pretrained(out)
    ids = {token: raw.token_to_id(token) for token in SPECIALS}
    config = LlamaConfig(
        vocab_size=len(fast), hidden_size=hidden, intermediate_size=hidden * 2,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=8192, rms_norm_eps=1e-5, tie_word_embeddings=False,
        bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )
    torch.manual_seed(seed)
    torch.set_num_threads(1)  # a shared 2-core machine
    model = LlamaForCausalLM(config)
    if teach_steps:
        from experiments.real_engine.teach import teach

        print(json.dumps(teach(model, fast, steps=teach_steps, batch=8, seed=seed)))
    model.save_pretrained(out, safe_serialization=True)
    # A taught model answers greedily, the same each time, so only the engine's own behaviour
    # varies. Random weights sample (temperature 1): greedy, they loop on one number until
    # max_tokens and no forced call ever closes (BENCHMARKS.md "A real engine").
    sampling = {"temperature": 0.0} if teach_steps else {}
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": config.bos_token_id, "eos_token_id": config.eos_token_id,
         "pad_token_id": config.pad_token_id, **sampling}, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="model folder to write")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2],
                        help="repository whose text trains the tokenizer")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--teach-steps", type=int, default=0,
                        help="steps teaching the agent contract (teach.py); 0: random weights")
    args = parser.parse_args()
    make_model(args.out, args.root, layers=args.layers, hidden=args.hidden, vocab=args.vocab,
               seed=args.seed, teach_steps=args.teach_steps)


if __name__ == "__main__":
    main()
