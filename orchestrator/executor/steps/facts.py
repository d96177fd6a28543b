"""The facts step: what a report's provenance says of one node, read once per trial."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from deploy.facts import node_facts
from experiments.strategy_config import SweepConfig
from orchestrator.executor.steps.base import Details, PoolParts, Running


def node_tree(parts: PoolParts, node: str) -> str | None:
    """The git source tree of ``node``: the one the trial's git change put at its commit, else
    the first one a level (or the commit range) declares for a service of the node."""
    _, applied = parts.sources.expected_code(node)
    if applied is not None:
        return applied[0]
    campaign = parts.campaign
    services = {s.name for s in parts.pool.services if s.node == node}
    for factor in campaign.factors:
        if factor.services is None or services & set(factor.services):
            for name in factor.levels:
                if (git := factor.level(name).git) is not None:
                    return git.tree
    commits = campaign.commits
    if commits is not None and (commits.services is None or services & set(commits.services)):
        return commits.tree
    plan = campaign.strategy
    if isinstance(plan, SweepConfig) and plan.source_tree is not None and (
            plan.source_services is None or services & set(plan.source_services)):
        return plan.source_tree
    return None


@dataclass(eq=False)
class Facts:
    """What a report's provenance says of one node (``service``: its name): host, GPU model and
    driver, server version and build, its tree's commit; read once per trial, after the deploy
    (the commit and the server are the variant's). Never fails the trial: what it cannot read
    is None (deploy.facts)."""

    service: str
    name: str = field(default="facts", init=False)

    async def run(self, parts: PoolParts) -> Details:
        node = self.service
        servers = list(dict.fromkeys(  # each server's base URL, once, in the pool's order
            f"{url.scheme}://{url.netloc}" for url in
            (urlsplit(s.health_url) for s in parts.pool.services if s.node == node)))
        facts = await asyncio.to_thread(
            node_facts, parts.transports[node], tree=node_tree(parts, node), servers=servers,
            api_key=parts.secrets.api_key(parts.pool.api_key_env))
        return facts.details()

    def settle(self, running: Running) -> None:
        pass
