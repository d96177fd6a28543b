"""Evidence as the pure core sees it: finished trials reduced to plain values.

Built from the store by the runner; strategies and the verdict never see ORM rows or Ray.
What counts as failing is one value, a set of outcome names (``Failing``): a trial is judged
against it, its counts never rewritten.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from experiments.outcomes import CORRUPTION, INFRA
from orchestrator.core.stats.clustered import Counts, Dispersion, dispersion

Levels = Mapping[str, str]
Failing = frozenset[str]  # the outcome names (experiments.outcomes) that count as failing

CORRUPTING: Failing = frozenset(outcome.value for outcome in CORRUPTION)
# A server that hangs or refuses under load, as 75 of 80 sessions did in the investigation.
WEDGING: Failing = frozenset(outcome.value for outcome in INFRA)
# The campaign file's `strategy.target`, and the verdict JSON's `target`.
TARGETS: Mapping[str, Failing] = {"corruption": CORRUPTING, "wedging": WEDGING}


def failing_for(target: str) -> Failing:
    """The outcomes a campaign's `target:` (corruption | wedging) counts as failing."""
    return TARGETS[target]


def target_of(failing: Failing) -> str:
    """The name of a failing set as campaign files and the verdict JSON spell it."""
    return next((name for name, outcomes in TARGETS.items() if outcomes == failing),
                ",".join(sorted(failing)))


def failing_words(failing: Failing) -> str:
    """What a session failing so is, in a reason: "corrupt", "wedged (an error or a
    timeout)"."""
    return {CORRUPTING: "corrupt", WEDGING: "wedged (an error or a timeout)"}.get(
        failing, "failing")


def variant_key(levels: Levels) -> str:
    """Canonical name of a variant: ``a=x,b=y`` in factor-name order."""
    return ",".join(f"{name}={levels[name]}" for name in sorted(levels))


@dataclass(frozen=True)
class Latency:
    """Percentiles of one latency over a trial's completed requests, in milliseconds."""

    p50_ms: float
    p90_ms: float
    p99_ms: float


@dataclass(frozen=True)
class Performance:
    """What a trial's workload measured (experiments.workload.results.StressResult.performance;
    the names of sglang ``bench_serving``). Rates are per second of the workload's wall time;
    a trial stopped early measured only the sessions that finished before the stop.

    ``goodput``: sessions per second that finished ``ok`` (every turn judged correct: no
    corruption, no error, no timeout) and, where the workload sets an SLO, whose every request
    met it. (``bisect stress``'s ``goodput`` is vLLM's: requests per second within the SLO.)
    A latency is None where the workload did not measure it (ITL and TPOT need streaming)."""

    wall_s: float
    requests: int  # sent
    completed: int  # a whole response arrived
    output_tokens: int  # of the completed requests, as the server's usage counted them
    good_sessions: int
    request_throughput: float  # completed requests per second
    output_throughput: float  # output tokens per second
    goodput: float  # good sessions per second
    ttft: Latency | None = None
    tpot: Latency | None = None
    itl: Latency | None = None
    e2e: Latency | None = None


@dataclass(frozen=True)
class TrialEvidence:
    levels: Levels
    counts: Mapping[str, int]
    restarts: int = 0
    wall_s: float = 0.0
    workload_s: float = 0.0
    stopped_early: bool = False
    events: Mapping[str, int] = field(default_factory=dict)  # service log events by kind
    planned: int = 0  # sessions the workload planned (0: not known)
    failing: Failing = CORRUPTING  # what counts as failing: the campaign's target
    performance: Performance | None = None  # None: stored before it was measured
    seq: int = 0  # the trial's number in its campaign (0: not known)
    pool: str = ""  # the pool it ran on ("": not known)

    @property
    def sessions(self) -> int:
        return sum(self.counts.values())

    @property
    def failures(self) -> int:
        """Sessions whose outcome is in ``failing``."""
        return self._failures(self.failing)

    @property
    def infra(self) -> int:
        """Errors and timeouts, whatever the target."""
        return sum(self.counts.get(outcome.value, 0) for outcome in INFRA)

    @property
    def judged(self) -> int:
        """Sessions that reached a verdict of their own. An error or a timeout says nothing of
        corruption: not judged, unless it is what fails (for wedging every session is judged)."""
        return self._judged(self.failing)

    @property
    def unfinished(self) -> int:
        """Planned sessions a stop ended before they finished; they are not stored."""
        return max(0, self.planned - self.sessions) if self.stopped_early else 0

    @property
    def rate(self) -> float:
        return self.failures / self.judged if self.judged else 0.0

    def judged_as(self, failing: Failing) -> TrialEvidence:
        """The same trial judged against another failing set (its counts unchanged)."""
        return dataclasses.replace(self, failing=failing)

    def counted(self, failing: Failing) -> tuple[int, int]:
        """(failures, judged) of ``judged_as(failing)``, without making it (a ranking counts
        every trial of every configuration so, at each step)."""
        return self._failures(failing), self._judged(failing)

    def _failures(self, failing: Failing) -> int:
        return sum(n for outcome, n in self.counts.items() if outcome in failing)

    def _judged(self, failing: Failing) -> int:
        return self.sessions - sum(self.counts.get(outcome.value, 0) for outcome in INFRA
                                   if outcome not in failing)


@dataclass(frozen=True)
class Cell:
    """All trials of one variant, pooled. Its sums are computed once (a value, never changed):
    attribution pools each cell again for every condition it tries, over a hundred a step."""

    levels: Levels
    trials: tuple[TrialEvidence, ...] = field(default_factory=tuple)

    @functools.cached_property
    def sessions(self) -> int:
        return sum(t.sessions for t in self.trials)

    @functools.cached_property
    def failures(self) -> int:
        return sum(t.failures for t in self.trials)

    @functools.cached_property
    def judged(self) -> int:
        return sum(t.judged for t in self.trials)

    @functools.cached_property
    def infra(self) -> int:
        return sum(t.infra for t in self.trials)

    @property
    def rate(self) -> float:
        return self.failures / self.judged if self.judged else 0.0

    def per_trial(self) -> list[Counts]:
        """(failures, judged) of each full trial: the spread between them is what a trial's
        sessions share (a trial stopped at its failures has no rate)."""
        return [(t.failures, t.judged) for t in self.trials if not t.stopped_early]

    def effective(self, spread: Dispersion) -> Counts:
        """(failures, judged) as independent sessions, at this variant's design effect."""
        return spread.effective((self.failures, self.judged), len(self.trials))

    def events(self, kinds: Iterable[str]) -> dict[str, int]:
        """The trials' log events of these kinds, summed; kinds never seen are left out."""
        totals = {kind: sum(t.events.get(kind, 0) for t in self.trials) for kind in kinds}
        return {kind: n for kind, n in totals.items() if n}

    def matches(self, condition: Levels) -> bool:
        return all(self.levels.get(name) == level for name, level in condition.items())


# syzkaller's rule: a trial that is mostly infrastructure errors says nothing about the variant.
MAX_INFRA_SHARE = 2 / 3


def judged_trials(evidence: Sequence[TrialEvidence]) -> list[TrialEvidence]:
    """The trials that are not mostly sessions without a verdict of their own (errors and
    timeouts, unless they are what fails)."""
    return [t for t in evidence
            if t.sessions and (t.sessions - t.judged) / t.sessions <= MAX_INFRA_SHARE]


def cells(evidence: Iterable[TrialEvidence]) -> list[Cell]:
    grouped: dict[str, list[TrialEvidence]] = {}
    for trial in evidence:
        grouped.setdefault(variant_key(trial.levels), []).append(trial)
    return [Cell(dict(trials[0].levels), tuple(trials)) for trials in grouped.values()]


def pooled(group: Sequence[Cell], spread: Dispersion | None = None) -> tuple[int, int]:
    """(failures, judged) over a group of cells: sessions, or with ``spread`` each variant's
    sessions as independent ones at its own design effect (Rao and Scott)."""
    if spread is None:
        return sum(c.failures for c in group), sum(c.judged for c in group)
    counts = [c.effective(spread) for c in group]
    return sum(k for k, _ in counts), sum(n for _, n in counts)


def spread_of(group: Iterable[Cell]) -> Dispersion:
    """The spread of failure rates between trials of one variant, over these cells."""
    return dispersion(c.per_trial() for c in group)
