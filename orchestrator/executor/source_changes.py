"""The changes that alter a node's files rather than a command line: git refs and patches, with
the pre/post hooks of the levels. One per pool, inside its actor (deploy does the work)."""

from __future__ import annotations

from collections.abc import Iterable

from deploy.changes.base import Change, merged
from deploy.changes.gitref import GitRef
from deploy.changes.hooks import Hook, run_hooks
from deploy.changes.patch import FilePatch
from deploy.changes.plan import NodeChanges, plan, recover
from deploy.transports.factory import Transports
from experiments.campaign import Campaign, Level, Pool


def _level_changes(level: Level, workdir: str) -> list[Change]:
    changes: list[Change] = []
    if level.git is not None:
        changes.append(GitRef(level.git.tree, level.git.ref, workdir, tuple(level.git.build),
                              level.git.build_timeout_s))
    changes += [FilePatch(p.diff, p.root, workdir, p.strip) for p in level.patch]
    return changes


def recover_nodes(campaign: Campaign, transports: Transports) -> list[str]:
    """Undo what a killed driver left on the nodes (a checkout, a patch), before anything else:
    every change any level could have applied is asked; only those with a record act."""
    undone = []
    for node in campaign.nodes:
        candidates = [c for factor in campaign.factors for name in factor.levels
                      for c in _level_changes(factor.level(name), node.workdir)]
        if candidates:
            undone += [f"{node.name}: {what}" for what in recover(transports[node.name],
                                                                   candidates)]
    return undone


class SourceChanges:
    def __init__(self, campaign: Campaign, pool: Pool, transports: Transports) -> None:
        self.campaign, self.pool = campaign, pool
        self.workdirs = {node.name: node.workdir for node in campaign.nodes}
        self.nodes = {service.node for service in pool.services}
        self.state = {node: NodeChanges(transports[node]) for node in self.nodes}
        self.transports = transports

    def _nodes_of(self, services: Iterable[str] | None) -> set[str]:
        wanted = set(services) if services is not None else None
        return {s.node for s in self.pool.services if wanted is None or s.name in wanted}

    def wanted(self, levels: dict[str, str]) -> dict[str, list[Change]]:
        """Per node, the git refs and patches the variant asks for, in factor order."""
        wanted: dict[str, list[Change]] = {node: [] for node in self.nodes}
        for factor in self.campaign.factors:
            level = factor.level(levels[factor.name])
            for node in self._nodes_of(factor.services):
                wanted[node] += _level_changes(level, self.workdirs[node])
        return wanted

    def changing(self, levels: dict[str, str]) -> set[str]:
        """The nodes whose files the variant changes: their services must stop and restart."""
        changing = set()
        for node, wanted in self.wanted(levels).items():
            step = plan([change for change, _ in self.state[node].current], wanted)
            if step.revert or step.apply:
                changing.add(node)
        return changing

    def move_to(self, levels: dict[str, str]) -> None:
        """Bring every node to the variant's files (all-or-nothing per change)."""
        for node, wanted in self.wanted(levels).items():
            self.state[node].move_to(wanted)

    def run_hooks(self, levels: dict[str, str], phase: str, services: set[str]) -> None:
        """The ``pre`` or ``post`` commands of every level touching a restarted service."""
        for factor in self.campaign.factors:
            level = factor.level(levels[factor.name])
            hooks = [Hook(tuple(argv)) for argv in (level.pre if phase == "pre" else level.post)]
            touched = services if factor.services is None else services & set(factor.services)
            for node in sorted(self._nodes_of(touched)) if hooks and touched else []:
                run_hooks(self.transports[node], hooks, phase)

    def expected_code(self, node: str) -> tuple[dict[str, str], tuple[str, str] | None]:
        """What the proof of load checks on ``node``: what each applied change says proves it
        (patched files' sha256, the tree's commit), merged in the order applied (one tree: the
        proof checks one)."""
        expected = merged(applied.expected for applied in self.state[node].applied())
        return dict(expected.files), expected.git

    def applied(self) -> list[dict[str, object]]:
        return [a.as_dict() for state in self.state.values() for a in state.applied()]

    def restore(self) -> None:
        """Every node's files back to what they were before the campaign."""
        for state in self.state.values():
            state.restore()
