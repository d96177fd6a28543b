"""Moving one node from the changes of one trial to those of the next, touching only what differs.

Changes are stacked in a fixed order (``stack_order``: git checkouts first, then patches, each
group in factor order) because a patch may target files of the checked-out tree and a checkout
refuses a tree with patched files. Moving keeps the longest common prefix of the stack, reverts
the rest of the old stack newest first and applies the rest of the new one: patches to the same
file then always come off in the reverse order they went on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from deploy.changes.base import Applied, Change
from deploy.transports.base import Transport


def ordered(changes: Sequence[Change]) -> list[Change]:
    return sorted(changes, key=lambda change: change.stack_order)  # stable


@dataclass(frozen=True)
class Step:
    revert: list[Change]  # newest first
    apply: list[Change]


def plan(current: Sequence[Change], wanted: Sequence[Change]) -> Step:
    stack = ordered(wanted)
    keep = 0
    while (keep < min(len(current), len(stack))
           and current[keep].fingerprint == stack[keep].fingerprint):
        keep += 1
    return Step(list(reversed(current[keep:])), stack[keep:])


class NodeChanges:
    """What is applied on one node, by this process. Not thread-safe: one per node per pool."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.current: list[tuple[Change, Applied]] = []

    def move_to(self, wanted: Sequence[Change]) -> bool:
        """Apply ``wanted`` (in any order); True when the node changed, i.e. its services must
        restart. On an error the node holds exactly what ``current`` says (each step is
        all-or-nothing, and a failed checkout returns its tree to the original HEAD)."""
        step = plan([change for change, _ in self.current], wanted)
        moving = {change.tree for change in step.apply if change.tree is not None}
        for change in step.revert:
            # A tree about to be checked out at another ref moves there directly, keeping its
            # recorded original: reverting first would build the original in between for nothing.
            if change.tree is None or change.tree not in moving:
                change.revert(self.transport)
            self.current.pop()
        for change in step.apply:
            self.current.append((change, change.apply(self.transport)))
        return bool(step.revert or step.apply)

    def applied(self) -> list[Applied]:
        return [applied for _, applied in self.current]

    def restore(self) -> None:
        """Revert everything, newest first: the node as it was found (git trees rebuilt)."""
        while self.current:
            self.current[-1][0].revert(self.transport)
            self.current.pop()


def recover(transport: Transport, candidates: Sequence[Change]) -> list[str]:
    """Undo what an earlier, interrupted process left on the node: ``candidates`` are every
    change the campaign could have applied there (all levels of all factors). Only those with a
    record on the node are reverted (``revert`` is a no-op otherwise). Returns what was undone:
    patch fingerprints, and ``git:TREE`` for a tree (its record is per tree, not per ref, so a
    tree is undone once whichever of its changes is asked)."""
    undone, trees = [], set()
    for change in reversed(ordered(candidates)):
        if change.tree is not None:
            if change.tree in trees:
                continue
            trees.add(change.tree)
        if change.revert(transport):
            undone.append(f"{change.kind}:{change.tree}" if change.tree is not None
                          else change.fingerprint)
    return undone
