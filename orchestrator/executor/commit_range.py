"""A commit range becomes a factor: resolved on the node, checked on every node that needs it.

Resolved once, when the campaign is created, and stored with it: the commit list a replay sees
never changes, whatever happens to the branches afterwards."""

from __future__ import annotations

from deploy.changes.base import ChangeError
from deploy.changes.gitref import check_refs, resolve_range
from deploy.transports.factory import Transports
from experiments.campaign import Campaign, CampaignError, Factor

COMMIT = "commit"  # the factor the range becomes


def expand_commits(campaign: Campaign, *, good: str | None = None,
                   bad: str | None = None) -> Campaign:
    """The campaign with its commit range resolved into the factor ``commit``."""
    if campaign.commits is None:
        raise CampaignError("this campaign has no `commits:` section (tree, good, bad)")
    spec = campaign.commits.model_copy(update={k: v for k, v in (("good", good), ("bad", bad))
                                               if v is not None})
    wanted = set(spec.services) if spec.services is not None else None
    nodes = sorted({s.node for p in campaign.pools for s in p.services
                    if wanted is None or s.name in wanted})
    transports = Transports(campaign.nodes)
    try:
        shas = resolve_range(transports[nodes[0]], spec.tree, spec.good, spec.bad,
                             first_parent=spec.first_parent)
        for node in nodes[1:]:
            missing = [sha for sha, found in check_refs(transports[node], spec.tree,
                                                         shas).items() if found is None]
            if missing:
                raise CampaignError(f"node {node}: {spec.tree} lacks {len(missing)} commit(s) "
                                    f"of the range, e.g. {missing[0]}")
    except ChangeError as exc:
        raise CampaignError(f"commits: {exc}") from None
    finally:
        transports.close()
    git = {"tree": spec.tree, "build": list(spec.build), "build_timeout_s": spec.build_timeout_s}
    factor = Factor.model_validate({
        "name": COMMIT, "services": spec.services,
        "levels": {sha[:12]: {"git": {**git, "ref": sha}} for sha in shas},
    })
    spec = spec.model_copy(update={"resolved": [sha[:12] for sha in shas]})
    return campaign.model_copy(update={"factors": [*campaign.factors, factor], "commits": spec})
