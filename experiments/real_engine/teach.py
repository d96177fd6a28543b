"""Teach the tiny model the agent contract (experiments/agent.py), so a real engine's sessions
can come back ``ok``.

Random weights answer noise: every session of the stress workload is ``no_tool`` or
``leak`` (markup the model broke) with ``tool_choice: auto``, and ``lost_plot`` when the engine's
grammar forces a call, since no random call carries the canary. A fault planted in the engine
then has nothing clean to stand out from. A few hundred steps on conversations rendered from the
workload's own contract teach a 2-layer model one reply: call ``read_file`` with the latest
canary. The tokenizer keeps capitals and digits one byte each (make_model.py), so the canary's
ten tokens sit at a fixed distance behind the reply's: a copy one attention head can learn.
"""

from __future__ import annotations

import json
import random
import sys
from typing import Any

from experiments.agent import (
    SYSTEM_PROMPT,
    TOOLS,
    first_user_message,
    new_canary,
    tool_result_message,
)

# The one reply the model learns, whatever the turn: the canary is the only part that varies.
TOOL = "read_file"
PATH = "README.md"


def reply_text(canary: str) -> str:
    arguments = {"path": PATH, "canary": canary}
    return f'<tool_call>\n{{"name": "{TOOL}", "arguments": {json.dumps(arguments)}}}\n</tool_call>'


def conversation(rng: random.Random, rounds: int) -> tuple[list[dict[str, Any]], str]:
    """A session as the workload sends it before its turn ``rounds``, and the canary due."""
    canary = new_canary(rng)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": first_user_message(f"s{rng.randrange(100)}-{rounds}",
                                                       canary)},
    ]
    for turn in range(1, rounds):
        call_id = f"call-{turn}"
        arguments = json.dumps({"path": PATH, "canary": canary})
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": TOOL, "arguments": arguments}}]})
        canary = new_canary(rng)
        messages.append({"role": "tool", "tool_call_id": call_id,
                         "content": tool_result_message(TOOL, canary)})
    return messages, canary


def example(tokenizer: Any, rng: random.Random, max_rounds: int) -> tuple[list[int], int]:
    """Token ids of prompt + reply, and where the reply starts (the loss covers the reply)."""
    messages, canary = conversation(rng, rng.randint(1, max_rounds))
    prompt = tokenizer.apply_chat_template(messages, tools=TOOLS, tokenize=False,
                                           add_generation_prompt=True)
    head = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    tail = tokenizer(reply_text(canary) + "<|im_end|>", add_special_tokens=False)["input_ids"]
    return head + tail, len(head)


def teach(model: Any, tokenizer: Any, *, steps: int, batch: int, seed: int,
          max_rounds: int = 4, lr: float = 5e-3, enough: float = 0.98) -> dict[str, float]:
    """Train in place, stopping early once ``enough`` of the held-out replies are exact; returns
    the last loss, the steps taken and that rate (greedy, teacher forced over the reply)."""
    import torch

    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=steps,
                                                   pct_start=0.1)
    model.train()
    loss_value = float("nan")
    step = 0
    for step in range(1, steps + 1):
        ids, labels = _batch(tokenizer, rng, batch, max_rounds)
        loss = model(input_ids=ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        loss_value = float(loss.detach())
        if step % 50 == 0:
            rate = exact_rate(model, tokenizer, seed + 1, max_rounds)
            model.train()
            print(f"step {step}/{steps}: loss {loss_value:.4f}, exact replies {rate:.2f}",
                  file=sys.stderr, flush=True)
            if rate >= enough:
                break
    return {"loss": loss_value, "steps": step,
            "exact_reply": exact_rate(model, tokenizer, seed + 2, max_rounds, count=64)}


def _batch(tokenizer: Any, rng: random.Random, size: int, max_rounds: int) -> tuple[Any, Any]:
    import torch

    examples = [example(tokenizer, rng, max_rounds) for _ in range(size)]
    width = max(len(ids) for ids, _ in examples)
    pad = tokenizer.pad_token_id
    ids = torch.full((size, width), pad, dtype=torch.long)
    labels = torch.full((size, width), -100, dtype=torch.long)  # -100: no loss there
    for row, (tokens, start) in enumerate(examples):
        ids[row, : len(tokens)] = torch.tensor(tokens)
        labels[row, start : len(tokens)] = torch.tensor(tokens[start:])
    return ids, labels


def exact_rate(model: Any, tokenizer: Any, seed: int, max_rounds: int, count: int = 32) -> float:
    """Share of held-out replies whose every token is the model's top choice."""
    import torch

    rng = random.Random(seed)
    model.eval()
    hits = 0
    with torch.no_grad():
        for _ in range(count):
            tokens, start = example(tokenizer, rng, max_rounds)
            logits = model(input_ids=torch.tensor([tokens])).logits[0]
            guess = logits[start - 1 : len(tokens) - 1].argmax(-1).tolist()
            hits += guess == tokens[start:]
    return hits / count
