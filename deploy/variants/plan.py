"""Moving one node from the variants of one trial to those of the next, touching only what differs.

Variants are stacked in a fixed order (git checkouts first, then patches, each group in factor
order) because a patch may target files of the checked-out tree and a checkout refuses a tree
with patched files. Moving keeps the longest common prefix of the stack, reverts the rest of the
old stack newest first and applies the rest of the new one: patches to the same file then always
come off in the reverse order they went on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from deploy.transports.base import Transport
from deploy.variants.base import Applied, Variant
from deploy.variants.gitref import GitRef


def ordered(variants: Sequence[Variant]) -> list[Variant]:
    return sorted(variants, key=lambda variant: 0 if variant.kind == "git" else 1)  # stable


@dataclass(frozen=True)
class Step:
    revert: list[Variant]  # newest first
    apply: list[Variant]


def plan(current: Sequence[Variant], wanted: Sequence[Variant]) -> Step:
    stack = ordered(wanted)
    keep = 0
    while (keep < min(len(current), len(stack))
           and current[keep].fingerprint == stack[keep].fingerprint):
        keep += 1
    return Step(list(reversed(current[keep:])), stack[keep:])


class NodeVariants:
    """What is applied on one node, by this process. Not thread-safe: one per node per pool."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.current: list[tuple[Variant, Applied]] = []

    def move_to(self, wanted: Sequence[Variant]) -> bool:
        """Apply ``wanted`` (in any order); True when the node changed, i.e. its services must
        restart. On an error the node holds exactly what ``current`` says (each step is
        all-or-nothing, and a failed checkout returns its tree to the original HEAD)."""
        step = plan([variant for variant, _ in self.current], wanted)
        moving = {v.tree for v in step.apply if isinstance(v, GitRef)}
        for variant in step.revert:
            # A tree about to be checked out at another ref moves there directly, keeping its
            # recorded original: reverting first would build the original in between for nothing.
            if not (isinstance(variant, GitRef) and variant.tree in moving):
                variant.revert(self.transport)
            self.current.pop()
        for variant in step.apply:
            self.current.append((variant, variant.apply(self.transport)))
        return bool(step.revert or step.apply)

    def applied(self) -> list[Applied]:
        return [applied for _, applied in self.current]

    def restore(self) -> None:
        """Revert everything, newest first: the node as it was found (git trees rebuilt)."""
        while self.current:
            self.current[-1][0].revert(self.transport)
            self.current.pop()


def recover(transport: Transport, candidates: Sequence[Variant]) -> list[str]:
    """Undo what an earlier, interrupted process left on the node: ``candidates`` are every
    variant the campaign could have applied there (all levels of all factors). Only those with a
    record on the node are reverted (``revert`` is a no-op otherwise). Returns what was undone:
    patch fingerprints, and ``git:TREE`` for a tree (its record is per tree, not per ref)."""
    undone, trees = [], set()
    for variant in reversed(ordered(candidates)):
        if isinstance(variant, GitRef):
            if variant.tree in trees:
                continue
            trees.add(variant.tree)
        if variant.revert(transport):
            undone.append(f"git:{variant.tree}" if isinstance(variant, GitRef)
                          else variant.fingerprint)
    return undone
