"""What a commit search says (commits.py decides): a commit in words, its trail entries (each
commit's posterior mass), its finding (the first bad commit, the credible range, the commits
skipped) and its replay as a conclusion. Pure: values in, words and plain dicts out."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from orchestrator.core.attribution import Culprit, measure
from orchestrator.core.evidence import TrialEvidence, cells, variant_key
from orchestrator.core.strategies.base import (
    PROBE_SKIPPED,
    UNFINISHED,
    Conclusion,
    Status,
    Unresolvable,
)
from orchestrator.core.verdict import judged_trials

if TYPE_CHECKING:
    from orchestrator.core.strategies.commits import CommitReplay

FACTOR = "commit"


def commit_words(sha: str, described: Mapping[str, tuple[str, str]]) -> str:
    """A commit as the verdict names it: ``abc123 'Fix topk kernel' (Jane Doe)``, or its SHA
    alone where git gave nothing (a campaign stored before subjects were)."""
    if sha not in described:
        return sha
    subject, author = described[sha]
    return f"{sha} '{subject}' ({author})"


def _said(sha: str, described: tuple[str, str] | None) -> dict[str, str]:
    return {} if described is None else dict(zip(("subject", "author"), described, strict=True))


@dataclass(frozen=True)
class CommitStep:
    """One commit of the range in the trail: its posterior mass and its counts. No test is
    made at a step (``p_fail`` and ``p_pass`` are kept in its JSON, as every trail has them,
    and left empty)."""

    phase: str  # "posterior", or "skipped" (it cannot be deployed)
    sha: str
    posterior: float
    corrupted: int
    sessions: int
    trials: int
    described: tuple[str, str] | None = None  # (subject, author), where git gave them
    reason: str | None = None  # the first line of why it cannot be deployed

    def to_json(self) -> dict[str, Any]:
        return {"phase": self.phase, "levels": {FACTOR: self.sha},
                "answer": f"{self.posterior:.4f}", "posterior": self.posterior,
                **_said(self.sha, self.described), "corrupted": self.corrupted,
                "sessions": self.sessions, "trials": self.trials, "p_fail": None,
                "p_pass": None, "fail_at": None, "pass_at": None,
                **({"reason": self.reason} if self.reason is not None else {})}

    def line(self) -> str:
        commit = commit_words(self.sha, {} if self.described is None
                              else {self.sha: self.described})
        # a step of the other failure's search ("wedging: skipped") says no more (as ever)
        skipped = f"  skipped, {_skipped(self.reason or '')}" if self.phase == "skipped" else ""
        return (f"posterior {self.posterior:.4f}  {self.corrupted}/{self.sessions} in "
                f"{self.trials} trial(s)  {commit}{skipped}")


def _skipped(error: str) -> str:
    """Why a commit was skipped: its deploy's error, or the user's probe (exit 125)."""
    if error.startswith(PROBE_SKIPPED):
        return "the probe skipped it (exit 125)"
    return f"cannot be deployed: {error}"


@dataclass(frozen=True)
class CommitSearch:
    """The change point a commit search found: the first bad commit (a run of them where
    skipped commits sit right before it), its posterior mass, the commit before it, the 90%
    credible range, the commits skipped (their trials failed before they were measured); the
    subject and author of each commit named, where git gave them."""

    first_bad: tuple[str, ...]
    mass: float
    last_good: str | None
    credible90: tuple[str, str]
    skipped: tuple[Unresolvable, ...] = ()
    described: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    kind: ClassVar[str] = "commits"

    def to_json(self) -> dict[str, Any]:
        return {
            "first_bad": list(self.first_bad), "posterior": round(self.mass, 6),
            "last_good": self.last_good, "credible90": list(self.credible90),
            "skipped": [{"commit": u.levels[FACTOR], "attempts": u.attempts, "error": u.error}
                        for u in self.skipped],
            "described": {sha: _said(sha, words) for sha, words in self.described.items()},
        }


def conclude_commit_replay(
    replay: CommitReplay,
    commits: Sequence[str],
    evidence: Sequence[TrialEvidence],
    unresolvable: Sequence[Unresolvable] = (),
    described: Mapping[str, tuple[str, str]] | None = None,
    named: str = "",
) -> Conclusion:
    """The change point as a conclusion: the first bad commit, its effect measured as every
    commit from it on against every commit before it. When skipped commits (that cannot be
    deployed) sit right before it, the culprit is that run, ``A^..B`` in git's notation.
    ``described``: each commit's subject and author, beside its SHA in the trail and the JSON;
    ``named``: the failure its trail's steps are named by ("wedging: posterior"), where this
    search is the other failure's."""
    described = described or {}
    prefix = f"{named}: " if named else ""

    judged = judged_trials(evidence)
    status = Status.INCONCLUSIVE if replay.status is None else replay.status
    reason = replay.reason or UNFINISHED
    why = {u.levels.get(FACTOR): u for u in unresolvable}
    if replay.unverifiable in why:
        reason += f": {why[replay.unverifiable].error.splitlines()[0]}"
    culprits: tuple[Culprit, ...] = ()
    if replay.status is Status.CULPRIT and replay.first_bad:
        first = commits.index(replay.first_bad[0])
        sides = [dataclasses.replace(t, levels={**t.levels, FACTOR: "after" if commits.index(
            t.levels[FACTOR]) >= first else "before"}) for t in judged if not t.stopped_early]
        measured = measure({FACTOR: "after"}, cells(sides))
        named = replay.first_bad[0] if len(replay.first_bad) == 1 else \
            f"{replay.first_bad[0]}^..{replay.first_bad[-1]}"
        pooled = {side: tuple(dict.fromkeys(
            variant_key(t.levels) for t in judged if not t.stopped_early and t.judged
            and (commits.index(t.levels[FACTOR]) >= first) == (side == "after")))
            for side in ("after", "before")}  # the commits, not the two sides' names
        culprits = (dataclasses.replace(measured, factors={FACTOR: named},
                                        variants_in=pooled["after"],
                                        variants_out=pooled["before"]),)
    tested = {sha: [t for t in judged if t.levels.get(FACTOR) == sha] for sha in commits}
    log = (CommitStep(prefix + ("skipped" if sha in replay.skipped else "posterior"), sha, p,
                      sum(t.failures for t in tested[sha]), sum(t.judged for t in tested[sha]),
                      len(tested[sha]), described.get(sha),
                      why[sha].error.splitlines()[0] if sha in why else None)
           for sha, p in zip(commits, replay.posterior, strict=True)
           if p >= 0.001 or tested[sha] or sha in replay.skipped)
    mentioned = [*replay.first_bad, *([replay.last_good] if replay.last_good else []),
                 replay.credible[0], replay.credible[-1], *replay.skipped]
    search = CommitSearch(
        tuple(replay.first_bad), replay.mass, replay.last_good,
        (replay.credible[0], replay.credible[-1]),
        tuple(why[sha] for sha in replay.skipped if sha in why),
        # The subject and author of every commit named above, where git gave them.
        {sha: described[sha] for sha in dict.fromkeys(mentioned) if sha in described})
    return Conclusion(status, reason, culprits, tuple(log), finding=search)
