"""What a commit search says (commits.py decides): a commit in words, its trail entries (each
commit's posterior mass) and its finding (the first bad commit, the credible range, the
commits skipped). Pure: values in, words and plain dicts out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from orchestrator.core.strategies.base import PROBE_SKIPPED, Unresolvable

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
    credible range, the commits that could not be deployed; the subject and author of each
    commit named, where git gave them."""

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
