"""A commit range becomes a factor: resolved on the node, checked on every node that needs it.

Resolved once, when the campaign is created, and stored with it: the commit list a replay sees
never changes, whatever happens to the branches afterwards. Each commit's subject and author are
read then too, and stored beside it, for the verdict's words."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

from deploy.changes.base import ChangeError, tail
from deploy.changes.gitref import check_refs, resolve_range
from deploy.transports.base import Transport
from deploy.transports.factory import Transports
from experiments.campaign import Campaign, CampaignError, CommitDescription, Factor

COMMIT = "commit"  # the factor the range becomes
BATCH = 256  # commits per `git log`: a range of thousands stays far below any argv limit
MAX_CHARS = 200  # of a subject or an author's name, as stored


def _shown(text: str) -> str:
    """A subject or name as it may be shown anywhere: control and format characters (a
    terminal's escapes, bidi overrides) become spaces, and it is cut to MAX_CHARS."""
    text = "".join(" " if unicodedata.category(c) in ("Cc", "Cf") else c for c in text).strip()
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS - 1] + "…"


def describe(transport: Transport, tree: str, shas: Sequence[str]) -> dict[str, CommitDescription]:
    """Each commit's subject and author, by its level name (the first 12 hex digits). The
    fields travel NUL-separated (``-z``): git keeps NUL out of messages and names, so no subject
    can forge a field."""
    described: dict[str, CommitDescription] = {}
    for start in range(0, len(shas), BATCH):
        batch = shas[start:start + BATCH]
        result = transport.run(["git", "-C", tree, "log", "-z", "--no-walk=unsorted",
                                "--format=%H%x00%an%x00%s", "--end-of-options", *batch, "--"])
        fields = result.stdout.split("\0")
        if not result.ok or len(fields) != 3 * len(batch) + 1:
            raise ChangeError(transport.node, f"{tree}: cannot read the subjects of "
                                              f"{batch[0]}..{batch[-1]}: "
                                              f"{tail(result.stderr or result.stdout, 500)}")
        for sha, author, subject in zip(*[iter(fields[:-1])] * 3, strict=True):
            described[sha[:12]] = CommitDescription(subject=_shown(subject),
                                                    author=_shown(author))
    return described


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
        described = describe(transports[nodes[0]], spec.tree, shas)
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
    spec = spec.model_copy(update={"resolved": [sha[:12] for sha in shas],
                                   "described": described})
    return campaign.model_copy(update={"factors": [*campaign.factors, factor], "commits": spec})
