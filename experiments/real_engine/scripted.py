"""A model that keeps the agent contract, for a real vLLM: its sampling steered, its engine real.

Random weights answer noise, so every session of the stress workload comes back corrupt and a
fault planted in the engine has nothing clean to stand out from; teaching the tiny model the
canary copy did not work in the time there was (BENCHMARKS.md, "A real engine"). This logits
processor, loaded by vLLM itself (``--logits-processors
experiments.real_engine.scripted:AgentReply``, with this checkout on ``PYTHONPATH``), makes
every request whose prompt holds a canary sample, token by token, the contract's one reply
(teach.py's: ``read_file`` with the latest canary, in the hermes markup) and then the end of
turn. Everything else is vLLM's own: the HTTP server, the chat template, the scheduler and its
batches, the forward pass of every token (the weights still run; their logits are overruled),
the hermes tool parser that reads the reply back, and its speed under each flag. A fault in
the parser, the scheduler or the server shows as it would under a real model.

Runs inside vLLM's venv: torch and transformers are there; vLLM's processor interface is
imported only there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vllm.v1.sample.logits_processor import (
    BatchUpdate,
    LogitsProcessor,
    MoveDirectionality,
)

from experiments.agent import find_canary
from experiments.real_engine.teach import reply_text

if TYPE_CHECKING:
    import torch
    from vllm.config import VllmConfig

END_OF_TURN = "<|im_end|>"


class AgentReply(LogitsProcessor):
    """Each row of the batch whose prompt holds a canary samples its scripted reply."""

    def __init__(self, vllm_config: VllmConfig, device: torch.device,
                 is_pin_memory: bool) -> None:
        from transformers import AutoTokenizer

        tokenizer: Any = AutoTokenizer.from_pretrained(vllm_config.model_config.tokenizer)
        self.tokenizer = tokenizer
        self.end: int = tokenizer.convert_tokens_to_ids(END_OF_TURN)
        # batch row -> (the reply's token ids, the row's output token ids: vLLM's live list)
        self.rows: dict[int, tuple[list[int], list[int]]] = {}

    def is_argmax_invariant(self) -> bool:
        return False  # it decides the token, greedy or not

    def reply(self, prompt: list[int] | None) -> list[int] | None:
        canary = find_canary(self.tokenizer.decode(prompt or [])) if prompt else None
        if canary is None:
            return None  # not the workload's: the model answers as it will
        ids = self.tokenizer(reply_text(canary), add_special_tokens=False)["input_ids"]
        return [*ids, self.end]

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        for index in batch_update.removed:
            self.rows.pop(index, None)
        for index, _params, prompt, output in batch_update.added:
            reply = self.reply(prompt)
            if reply is None:
                self.rows.pop(index, None)
            else:
                self.rows[index] = (reply, output)
        for source, target, direction in batch_update.moved:
            moving = self.rows.pop(source, None)
            other = self.rows.pop(target, None)
            if moving is not None:
                self.rows[target] = moving
            if direction is MoveDirectionality.SWAP and other is not None:
                self.rows[source] = other

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        for index, (reply, output) in self.rows.items():
            step = len(output)
            token = reply[step] if step < len(reply) else self.end
            logits[index] = float("-inf")
            logits[index, token] = 0.0
        return logits
