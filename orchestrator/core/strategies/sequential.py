"""The tests an adaptive replay runs: counts per variant, a three-way sequential test, the trail.

A replay runs the whole decision procedure again from the stored evidence. Each test either
answers from the trials at hand or stops the replay with the trials it still needs
(`NeedTrials`); a test that ends the campaign raises `Concluded`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from orchestrator.core.evidence import TrialEvidence, failing_words, variant_key
from orchestrator.core.stats.clustered import (
    INDEPENDENT,
    RESTART_PRIOR,
    Dispersion,
    dispersion,
)
from orchestrator.core.stats.compare import (
    SUSPICION,
    WEAKER_SHARE,
    Answer,
    Counts,
    Judgement,
    judge,
)
from orchestrator.core.stats.exact import fisher_greater
from orchestrator.core.strategies.base import Status
from orchestrator.core.strategies.looks import (
    EXTENDED,
    LEANS_AT,
    LONG_CAP,
    at_look,
    beyond,
    runs_to,
)
from orchestrator.core.trail import at_words, p_words, variant_words

if TYPE_CHECKING:
    from orchestrator.core.strategies.adaptive import Adaptive

# A first look at a flip is let go once it looks failing at this level: one corrupt session
# against known-good's clean 0 of 160 gives p = 1/3. It proves nothing; the caller proves it
# later (the sufficiency test).
LOOKS_FAILING = 0.35
# A flip of the scan may pass on its first full trial at this level ("looks passing"): the
# confirmation that follows every scan tests the named set's own neighbours to the end, and a
# level let in by luck fails its neighbour there and is dropped (confirm.py). 0 of 80 sessions
# where known-bad fails 15 of 160 gives p = 0.02.
LOOKS_PASSING = 0.05
# The p a delta-debugging subset of the search fails at: it only narrows the search, and the
# minimal set it ends with is proven by confirmation (the culprit alone must fail at the FAIL
# level), so a narrowing FAIL need not be as sure as a named one.
NARROWING = 0.05
NEVER_STOP = -1.0  # a trial that must run to its end (a p-value is never below it)


def leans_passing(step: Step) -> bool:
    """Whether a test undecided at its budget leans passing (its p of passing within
    `LEANS_AT`) more than failing. Under background noise a clean variant can stay short of its
    PASS level for ever, and its p of failing against a known-good of the same rate is anything
    from 0 to 1; one that leans failing may be a culprit too weak to show."""
    return step.p_fail is not None and step.p_pass is not None and \
        step.p_pass <= LEANS_AT and step.p_pass < step.p_fail


@dataclass(frozen=True)
class Step:
    """One line of the decision trail (a ``TrailEntry``): an adaptive search's test, or a
    plug-in's that tests as it does."""

    phase: str
    levels: Mapping[str, str]
    answer: str
    failures: int
    judged: int
    trials: int
    p_fail: float | None  # None: no test was made (a reference, or a first look's other side)
    p_pass: float | None
    unfinished: int = 0  # sessions that trials stopped early never finished (not in judged)
    fail_at: float | None = None  # the p_fail a FAIL needed (None: no such test was made)
    pass_at: float | None = None  # the p_pass a PASS needed
    # a test that had no answer: why (a variant skipped, `git bisect skip`); a PASS given
    # without trials: what implied it (`confirm._implied`)
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"phase": self.phase, "levels": dict(self.levels), "answer": self.answer,
                "corrupted": self.failures, "sessions": self.judged,
                "unfinished": self.unfinished, "trials": self.trials, "p_fail": self.p_fail,
                "p_pass": self.p_pass, "fail_at": self.fail_at, "pass_at": self.pass_at,
                **({"reason": self.reason} if self.reason else {})}  # a skipped variant's: why

    def line(self) -> str:
        unfinished = f" (+{self.unfinished} unfinished)" if self.unfinished else ""
        return (f"{self.phase:<22} {self.answer:<17} {self.failures}/{self.judged}{unfinished} "
                f"in {self.trials} trial(s)  p(worse than good)={p_words(self.p_fail)}"
                f"{at_words(self.fail_at)} p(better than bad)={p_words(self.p_pass)}"
                f"{at_words(self.pass_at)}  {variant_words(self.levels)}"
                + (f"  {self.reason}" if self.reason else ""))  # why it was skipped


class NeedTrials(Exception):
    def __init__(self, *variants: dict[str, str], stop_at: Mapping[str, float] | None = None,
                 ) -> None:
        self.variants = variants
        self.stop_at = dict(stop_at or {})  # variant key -> p of failing its trial may stop at


class Concluded(Exception):
    def __init__(self, outcome: Status, reason: str) -> None:
        self.outcome, self.reason = outcome, reason


@dataclass
class VariantCounts:
    """A variant's trials, summed. The counts the tests take (``pair``, ``curtailed``,
    ``seen``, ``at``) are sessions counted at the variant's design effect: the spread between
    trials (``spread``, stats/clustered.py) makes a trial's sessions worth fewer independent
    ones. ``failures`` and ``judged`` are the sessions themselves, for the reader."""

    failures: int = 0
    judged: int = 0
    trials: int = 0
    unfinished: int = 0  # planned sessions of trials stopped early that never finished
    stopped: Counts = (0, 0)  # what the trials stopped early had judged
    stopped_trials: int = 0
    first: tuple[int, int, int] = (0, 0, 0)  # the first trial alone (what a look saw):
    # failures, judged, unfinished
    full: list[Counts] = field(default_factory=list)  # each full trial's (failures, judged)
    sizes: list[int] = field(default_factory=list)  # each trial's judged sessions
    spread: Dispersion = INDEPENDENT  # between trials of one variant, over the evidence

    @property
    def sessions_pair(self) -> Counts:
        """Full trials' sessions: a trial stopped early ended with its failing sessions, which
        finish first, so its share of failures is no rate."""
        return (self.failures - self.stopped[0], self.judged - self.stopped[1])

    @property
    def pair(self) -> Counts:
        """Full trials, as independent sessions."""
        return self.spread.effective(self.sessions_pair, self.full_trials)

    @property
    def full_trials(self) -> int:
        return self.trials - self.stopped_trials

    @property
    def curtailed(self) -> Counts:
        """Every trial, each unfinished session counted clean: what a FAIL may rest on."""
        return self.spread.effective((self.failures, self.judged + self.unfinished),
                                     self.trials)

    @property
    def seen(self) -> Counts:
        """Every trial's judged sessions, the unfinished left out."""
        return self.spread.effective((self.failures, self.judged), self.trials)

    def at_most(self, rate: float, *, prior: bool = True) -> float:
        """How likely so few failures are, trial by trial, at a true rate of ``rate``: what a
        PASS is judged on (every trial where one stopped, else the full ones). A restart can
        make a failing variant look clean but not a clean one fail, so only here is the spread
        not yet seen assumed (`RESTART_PRIOR`): a PASS accuses a level, and one restart that
        landed low must not do it. ``prior``: False for a provisional PASS, which accuses
        nothing (confirmation proves it)."""
        spread = self.spread.with_prior(RESTART_PRIOR) if prior else self.spread
        if self.unfinished:
            return spread.at_most(self.failures, self.sizes, rate)
        return spread.at_most(self.sessions_pair[0], [n for _, n in self.full], rate)

    def first_look(self) -> Counts:
        """The first trial alone, its unfinished sessions counted clean."""
        failures, judged, unfinished = self.first
        return self.spread.effective((failures, judged + unfinished), 1)


def cells_of(evidence: Sequence[TrialEvidence]) -> dict[str, VariantCounts]:
    cells: dict[str, VariantCounts] = {}
    for trial in evidence:
        cell = cells.setdefault(variant_key(trial.levels), VariantCounts())
        if not cell.trials:
            cell.first = (trial.failures, trial.judged, trial.unfinished)
        cell.failures += trial.failures
        cell.judged += trial.judged
        cell.trials += 1
        cell.sizes.append(trial.judged)
        if trial.stopped_early:
            cell.unfinished += trial.unfinished
            cell.stopped = (cell.stopped[0] + trial.failures, cell.stopped[1] + trial.judged)
            cell.stopped_trials += 1
        else:
            cell.full.append((trial.failures, trial.judged))
    spread = dispersion(cell.full for cell in cells.values())
    for cell in cells.values():
        cell.spread = spread
    return cells


@dataclass
class Tests:
    """The tests of one replay, on the evidence's counts, with the trail they leave."""

    strategy: Adaptive
    cells: dict[str, VariantCounts]
    total_trials: int
    good_was_clean: bool = True  # known-good's reproduction trials had no failing session
    trail: list[Step] = field(default_factory=list)
    scan_passes: list[Step] = field(default_factory=list)  # the scan's flips that passed
    asking: str = ""  # the test being made (its phase): what a spent budget leaves open

    def counts(self, levels: Mapping[str, str]) -> VariantCounts:
        return self.cells.get(variant_key(levels), VariantCounts())

    def test(self, levels: dict[str, str], phase: str, *, look: bool = False,
             provisional: bool = False, narrowing: bool = False,
             against: Mapping[str, str] | None = None, stop_at: float | None = None,
             pass_at: float | None = None, quiet: bool = False) -> Answer:
        """FAIL or PASS; once the variant's trial budget is spent, PASS on the evidence at hand
        when it is clearly better than known-bad and not worse than known-good, else UNKNOWN.
        A variant that cannot be judged (unresolvable: `git bisect skip`) is UNKNOWN at once,
        with no trial asked ("skipped" in the trail, with why).

        ``look``: the variant's first trial may stop as soon as it looks failing, and a variant
        whose first trial does is let go as UNKNOWN ("looks failing") for the caller to prove,
        whatever trials it had since (a replay makes the same decisions every time).

        ``provisional``: a PASS may rest on the first full trial at `LOOKS_PASSING` ("looks
        passing"), for a caller whose later tests prove it (confirmation's neighbours).
        ``narrowing``: a FAIL at `NARROWING` (its trials stop there), for a caller whose later
        tests prove it (the culprit alone, in confirmation).

        ``against``: the failing variant a PASS must be clearly better than (known-bad unless
        told): where several culprits made known-bad fail, a variant holding one of them fails
        at that one's lower rate, and would pass against known-bad by luck far more often.
        Against the culprit alone no weaker failure is ruled out: on known-good's background
        its neighbour fails as it does (the level was not needed) or not at all.

        ``stop_at``: the p of failing its trials may stop at (the FAIL level unless told);
        ``pass_at``: a stricter level its PASS needs than the search's.

        ``quiet``: the caller takes anything but a FAIL as the variant being quiet, with no
        failure the campaign targets left in it (no other culprit in known-bad with one
        broken; a set that does not fail alone, or is not sufficient; a neighbour that keeps
        its level where several culprits are in play). Its PASS rules out at most known-good's
        rate plus the campaign's clean rate, trial by trial, against ``against`` too (the
        culprit alone rules out no weaker failure, a quiet claim still must): half of
        known-bad's rate, measured on restarts that may have landed high, can stand above a
        second culprit (two clean trials rule out 8% where known-bad read 16%, not the 5%
        another culprit failed at). Its UNKNOWN asks for the variant's own trials, unless the
        reference's few full trials hold the PASS back (`_next_for`). The test
        is what the verdict rests on, so while it leans either way at its budget it runs on
        to `LONG_CAP` times it, judged at its looks only, as the reproduction does."""
        s = self.strategy
        self.asking = phase
        cell = self.counts(levels)
        fail_alpha = max(NARROWING, self.fail_level()) if narrowing else self.fail_level()
        if narrowing and stop_at is None:
            stop_at = fail_alpha
        known = {variant_key(s.bad): Answer.FAIL, variant_key(s.good): Answer.PASS}
        if variant_key(levels) in known:  # reproduced already: no trial of its own
            answer = known[variant_key(levels)]
            self.trail.append(Step(phase, levels, f"{answer.value} (known)", cell.failures,
                                   cell.judged, cell.trials, None, None))
            return answer
        skip = s.skipped.get(variant_key(levels))
        if skip is not None:  # `git bisect skip`: no answer, the caller goes on without one
            self.trail.append(Step(phase, levels, "skipped", cell.failures, cell.judged,
                                   cell.trials, None, None, reason=skip.why()))
            return Answer.UNKNOWN
        stops = {} if stop_at is None else {variant_key(levels): stop_at}
        if cell.trials < s.min_trials:
            self.need(levels, stop_at={variant_key(levels): LOOKS_FAILING}
                      if look and not cell.trials else stops)
        good, bad = self.counts(s.good), self.counts(s.bad if against is None else against)
        if against is not None and not bad.pair[1]:
            # a reference is a rate: it needs a full trial (one stopped at its failures, which
            # finish first, understates how clean the rest would have been)
            self.need(dict(against), stop_at={variant_key(against): NEVER_STOP})
        if look and (seen := self._look(levels, phase, cell, good)) is not None:
            return seen
        pass_alpha = s.pass_alpha(good) if pass_at is None else min(pass_at, s.pass_alpha(good))
        most = s.max_trials_per_variant
        cap = LONG_CAP if quiet else EXTENDED
        # past the budget, a test that runs on answers only at its looks, at a spent level
        fail_look, pass_look = (at_look(a, cell.trials, most, cap)
                                for a in (fail_alpha, pass_alpha))
        fail_alpha = NEVER_STOP if fail_look is None else fail_look
        pass_alpha = NEVER_STOP if pass_look is None else pass_look
        j = judge(cell.pair, good.pair, bad.pair, fail_alpha, pass_alpha,
                  cell.curtailed if cell.unfinished else None,
                  cell.seen if cell.unfinished else None,
                  WEAKER_SHARE if against is None or quiet else 0.0, at_most=cell.at_most,
                  smallest=s.clean_rate if quiet else None)
        answer, said = j.answer, j.answer.value
        if answer is Answer.UNKNOWN and provisional and cell.full_trials == 1 and judge(
                cell.pair, good.pair, bad.pair, fail_alpha, LOOKS_PASSING, None, None,
                at_most=partial(cell.at_most, prior=False)).answer is Answer.PASS:
            answer, said = Answer.PASS, "looks passing"
        if answer is Answer.FAIL and j.p_fail > self.fail_level():
            said = "fail (narrowing)"
        if answer is Answer.UNKNOWN:
            to = runs_to(most, cell.trials, (j.p_fail, fail_look), (j.p_pass, pass_look),
                         cap=cap)
            # past the budget the variant alone runs on: its looks count its own trials
            more = ([levels] if cell.trials < to else []) if cell.trials > most else \
                self._next_for(levels, cell, good, bad, j, against or s.bad, pass_alpha, to,
                               quiet=quiet)
            if more:
                self.need(*more, stop_at={**stops, **self.past_budget(
                    levels, cell.trials, self.fail_level() if stop_at is None else stop_at,
                    cap)})
            if j.p_pass <= pass_alpha and j.p_fail > fail_alpha:
                # Budget spent on a variant that is clearly better than known-bad and not worse
                # than known-good: under background noise the suspicion margin can stay unmet
                # for ever by chance, so the evidence at hand decides.
                answer, said = Answer.PASS, "pass (at budget)"
        self.trail.append(Step(phase, levels, said, cell.failures, cell.judged, cell.trials,
                               j.p_fail, j.p_pass, cell.unfinished, fail_look,
                               LOOKS_PASSING if said == "looks passing" else pass_look))
        return answer

    def past_budget(self, levels: Mapping[str, str], trials: int, level: float, cap: int,
                    ) -> dict[str, float]:
        """Where the variant's next trial is past its budget: the p of failing it may stop at.
        A trial ends early once the FAIL it gives is certain, and past the budget a FAIL is
        given at a look only, at the look's level (`looks.at_look`): a trial stopped at
        ``level`` where the look needs half of it would count its first failing session in
        80, and the look would need more such trials, each adding little (so the two-culprit
        scenario's seed 122 spent the campaign's 120 trials on a culprit alone at 5%)."""
        most = self.strategy.max_trials_per_variant
        if trials < most:
            return {}
        looks = beyond(most, cap)
        look = next((n for n in looks if n > trials), trials + 1)
        at = at_look(level, look, most, cap)
        return {variant_key(levels): NEVER_STOP if at is None else at}

    def skipped(self, levels: Mapping[str, str]) -> bool:
        """Whether ``levels`` cannot be judged (the strategy met it unresolvable)."""
        return variant_key(levels) in self.strategy.skipped

    def noisy(self) -> bool:
        """Whether clean variants fail too: known-good has, or a variant judged to pass had."""
        return self.counts(self.strategy.good).failures > 0 or any(
            step.answer.startswith(("pass", "looks passing")) and step.failures
            for step in self.trail)

    def fail_level(self) -> float:
        """The p a FAIL needs: alpha; under background noise, where a clean variant can fail
        against known-good by luck, alpha shared over the factors as a PASS's is."""
        s = self.strategy
        return s.alpha / max(2, len(s.factors)) if self.noisy() else s.alpha

    def _look(self, levels: dict[str, str], phase: str, cell: VariantCounts,
              good: VariantCounts) -> Answer | None:
        """What the first trial alone says: FAIL if it proves it, UNKNOWN ("looks failing") if
        it looks failing, None if the variant may pass (it is then tested as any other)."""
        failures, judged, unfinished = cell.first
        p = fisher_greater(*cell.first_look(), *good.pair)
        if p > LOOKS_FAILING:
            return None
        answer = Answer.FAIL if p <= self.fail_level() else Answer.UNKNOWN
        said = "fail (first look)" if answer is Answer.FAIL else "looks failing"
        self.trail.append(Step(phase, levels, said, failures, judged, 1, p, None, unfinished,
                               self.fail_level()))
        return answer

    def _next_for(self, levels: dict[str, str], cell: VariantCounts, good: VariantCounts,
                  bad: VariantCounts, j: Judgement, against: Mapping[str, str],
                  pass_alpha: float, budget: int, *, quiet: bool = False,
                  ) -> list[dict[str, str]]:
        """What would settle an UNKNOWN best: a reference with fewer trials than the variant is
        the weak side of a comparison the variant already wins (a variant clearly better than
        known-bad is held back only by known-good's small sample, and the other way round), so
        it gets the trial; otherwise the variant does, up to its budget. A variant that leans
        failing against a known-good of fewer trials is held back by that sample too (15 of
        480 where 5% fail, against 0 of 160, is p = 0.013). ``budget``: the variant's trials,
        at most (extended where the test leans). ``quiet``: the PASS rules out the campaign's
        smallest failure, whatever known-bad's rate: the variant's own trials settle it, unless
        the reference's few full trials are what holds it back (a culprit alone of one full
        trial, 5 of 80 at a wide spread between restarts, is worth 1 of 20 sessions: more
        clean trials of the neighbour would never make it pass against that)."""
        s = self.strategy
        most = min(cell.trials, budget)
        if (j.p_pass <= pass_alpha or j.p_fail <= SUSPICION) and good.trials < most:
            return [dict(s.good)]
        held = not quiet or fisher_greater(
            *bad.pair, *(cell.seen if cell.unfinished else cell.pair)) > pass_alpha
        if held and j.p_fail > j.alpha and bad.full_trials < most:
            if variant_key(against) != variant_key(s.bad):
                self.need(dict(against), stop_at={variant_key(against): NEVER_STOP})
            return [dict(against)]
        return [levels] if cell.trials < budget else []

    def need(self, *variants: dict[str, str], stop_at: Mapping[str, float] | None = None,
             ) -> None:
        if self.total_trials >= self.strategy.max_trials:
            raise Concluded(Status.INCONCLUSIVE, self._spent(variants))
        raise NeedTrials(*variants, stop_at=stop_at)

    def _spent(self, variants: Sequence[Mapping[str, str]]) -> str:
        """Why the campaign stopped with its budget spent, and where: the test left open and
        the variant it still needed, with its counts ("trial budget of 120 spent; still open:
        confirm: without f3 (f0=a,f1=b,f2=a,f3=b: 9 of 640 sessions corrupt in 8 trials)")."""
        said = f"trial budget of {self.strategy.max_trials} spent"
        if not variants:
            return said
        cell = self.counts(variants[0])
        counts = f"{variant_words(variants[0])}: " + (
            f"{cell.failures} of {cell.judged} sessions {failing_words(self.strategy.failing)}"
            f" in {cell.trials} trial{'s' if cell.trials > 1 else ''}" if cell.trials
            else "no trial yet")
        return f"{said}; still open: {self.asking or 'a test'} ({counts})"
