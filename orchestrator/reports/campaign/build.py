"""The report model built from the store: the recomputed verdict (``orchestrator.stored``), read
as the ``Verdict`` value it is (its failures, typed trail entries and finding), and what the
trials observed. Nothing is stored anew; every renderer takes the ``Report`` only.

Sizes are capped so that a campaign of hundreds of trials stays a small report: a few excerpts
per outcome class, the time series of a few dozen trials, each downsampled (``Report.omitted``
counts what was left out)."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from db.store import Store
from experiments.campaign import Campaign
from experiments.outcomes import WEDGE_LOG_KINDS, Outcome, is_corrupt
from orchestrator.core.attribution import TRIAL_ALPHA, Culprit
from orchestrator.core.evidence import (
    CORRUPTING,
    WEDGING,
    Failing,
    TrialEvidence,
    cells,
    spread_of,
    target_of,
    variant_key,
)
from orchestrator.core.own_effect import rated
from orchestrator.core.stats.proportions import wilson
from orchestrator.core.trail import culprit_words
from orchestrator.core.verdict import Verdict, judged_trials
from orchestrator.reports.campaign.model import (
    CampaignFacts,
    Cost,
    CulpritRow,
    Headline,
    Interaction,
    InteractionPoint,
    Report,
    TrailRow,
    UnresolvableRow,
    VariantRow,
)
from orchestrator.reports.campaign.observed import excerpts, series
from orchestrator.reports.campaign.provenance import provenance
from orchestrator.reports.search.build import search_headline, search_section
from orchestrator.reports.text import p_text, percent, share
from orchestrator.stored import recompute

FAILURES: Mapping[str, Failing] = {"corruption": CORRUPTING, "wedging": WEDGING}
LOG_PREFIX = "log:"  # a wedge log event's key in CulpritRow.outcomes ("error" is an outcome too)


def build_report(store: Store, campaign_id: str) -> Report:
    """The report of a campaign: its record and trials read once, its verdict recomputed from
    them (``orchestrator.stored.recompute``) and read as a value."""
    record = store.get_campaign(campaign_id)
    campaign = Campaign.model_validate(record.spec)
    trials = store.trials(campaign_id, status=None)
    verdict = recompute(campaign, trials)
    done = [t for t in trials if t.status == "done"]
    steps = store.campaign_steps(campaign_id)
    failures = verdict.failures()
    culprits = culprit_rows(failures, target_of(verdict.failing), verdict.trials,
                            campaign.level_names(), verdict.culprits_of())
    cost = verdict.cost_json()
    facts = CampaignFacts(
        id=record.id, name=record.name, status=record.status, target=target_of(verdict.failing),
        strategy=campaign.strategy.kind, created_at=record.created_at.isoformat(),
        finished_at=record.finished_at.isoformat() if record.finished_at else None,
        factors=campaign.level_names(), known_good=dict(campaign.known_good or {}),
        known_bad=dict(campaign.known_bad or {}), alpha=campaign.strategy.alpha)
    omitted: dict[str, int] = {}
    search = search_section(verdict.finding_json("optimize"), campaign)
    return Report(
        campaign=facts,
        headline=headline(verdict, culprits, campaign.strategy.alpha) if search is None
        else search_headline(search, verdict.status.value, verdict.reason),
        culprits=culprits,
        cost=Cost(**{k: cost[k] for k in (
            "trials", "restarts", "sessions", "stopped_early", "gpu_s_equivalent", "wall_s",
            "unjudged_trials")}),
        variants=variant_rows(verdict, campaign, culprits),
        interaction=interaction(culprits, verdict, campaign),
        trail=[trail_row(entry.to_json()) for entry in verdict.log],
        evidence=excerpts(store, done, omitted),
        series=series(store, done, culprits, omitted, steps),
        provenance=provenance(store, record, campaign, trials, steps),
        commits=verdict.finding_json("commits"),
        omitted=omitted,
        unresolvable=[UnresolvableRow(levels=_ordered(u.levels, campaign.level_names()),
                                      attempts=u.attempts, error=u.error)
                      for u in verdict.unresolvable],
        optimize=search,
    )


# --- culprits and the headline -------------------------------------------------------------


def culprit_rows(failures: Mapping[str, Mapping[str, Any]], target: str,
                 evidence: Sequence[TrialEvidence], factors: Mapping[str, Sequence[str]],
                 measured: Mapping[str, Sequence[Culprit]] | None = None) -> list[CulpritRow]:
    """Every culprit of every failure (``Verdict.failures``: the target's first), with what it
    comes with; its levels in the campaign's order of factors. ``measured``: the same
    culprits as values (``Verdict.culprits_of``), which say what their counts pool."""
    rows = []
    for failure in sorted(failures, key=lambda name: name != target):
        values = list((measured or {}).get(failure, ()))
        for at, c in enumerate(failures[failure]["culprits"]):
            value = values[at] if at < len(values) else None
            holding = [t for t in evidence
                       if all(t.levels.get(f) == lvl for f, lvl in c["factors"].items())]
            left_out = max(0, len(holding) - c.get("trials_with", 0)) if value else 0
            stopped = min(left_out, sum(t.stopped_early for t in holding))
            rows.append(CulpritRow(
                failure=failure, levels=_ordered(c["factors"], factors), kind=c["kind"],
                failed_with=c["corrupted_with"], sessions_with=c["sessions_with"],
                rate_with=c["rate_with"], failed_without=c["corrupted_without"],
                sessions_without=c["sessions_without"], rate_without=c["rate_without"],
                effect=c["effect"], ci95=(c["ci95"][0], c["ci95"][1]), p_value=c["p_value"],
                trial_p_value=c["trial_p_value"], own=c.get("own"),
                session_p_value=c.get("session_p_value"),
                outcomes=_comes_with(value, FAILURES.get(failure, CORRUPTING)),
                variants_with=list(value.variants_in) if value else [],
                variants_without=list(value.variants_out) if value else [],
                trials_with=c.get("trials_with", 0), trials_without=c.get("trials_without", 0),
                stopped_with=stopped, unjudged_with=left_out - stopped))
    return rows


def _ordered(levels: Mapping[str, str], factors: Mapping[str, Sequence[str]]) -> dict[str, str]:
    rank = {name: i for i, name in enumerate(factors)}
    return dict(sorted(levels.items(), key=lambda item: rank.get(item[0], len(rank))))


def _comes_with(culprit: Culprit | None, failing: Failing) -> dict[str, int]:
    """The failing outcome classes and wedge log events of the sessions and trials the
    culprit's counts pool (so that they add up to ``failed_with``)."""
    if culprit is None:
        return {}
    counted = {o: n for o, n in culprit.outcomes_in.items() if o in failing and n}
    counted.update({LOG_PREFIX + kind: culprit.events_in[kind] for kind in WEDGE_LOG_KINDS
                    if culprit.events_in.get(kind)})
    return counted


def _clause(row: CulpritRow, commits: bool) -> str:
    if commits:
        return (f"from commit {row.levels.get('commit', '?')} on: {share(row.rate_with)} of "
                f"sessions ({row.failed_with} of {row.sessions_with}), "
                f"{share(row.rate_without)} before it ({row.failed_without} of "
                f"{row.sessions_without}) (p = {p_text(row.p_value)})")
    return (f"{culprit_words(row.levels)}: {share(row.rate_with)} of sessions with it "
            f"({row.failed_with} of {row.sessions_with}), {share(row.rate_without)} without "
            f"({row.failed_without} of {row.sessions_without}) (p = {p_text(row.p_value)})")


def headline(verdict: Verdict, culprits: Sequence[CulpritRow], alpha: float) -> Headline:
    """``alpha``: the campaign's threshold, which the sentence names where nothing passed it."""
    status, reason, target = verdict.status.value, verdict.reason, target_of(verdict.failing)
    found = verdict.finding_json("commits")  # a commit search's change point
    commits = found is not None
    own = [c for c in culprits if c.failure == target]
    other = [c for c in culprits if c.failure != target]
    failing = target.capitalize()
    if status == "culprit" and own:
        sentence = f"{failing} follows " + "; and ".join(_clause(c, commits) for c in own)
        weakest = max(own, key=lambda c: -1.0 if c.p_value is None else c.p_value)
        confidence = _confidence(weakest, alpha, found)
    elif status == "not_reproduced":
        # the target's own reason: what the other failure follows is said below, from its rows
        said = verdict.failures().get(target, {}).get("reason") or reason
        sentence = f"{failing} was not reproduced: {said}"
        confidence = (f"nothing to attribute to {target}: known-bad did not fail as it should"
                      + (f" (the {other[0].failure} culprits are its own)" if other else ""))
    elif status == "no_culprit":
        sentence = f"No culprit found for {target}: {reason}"
        confidence = f"no factor or pair passed the campaign's threshold (alpha = {alpha:g})"
    else:
        sentence = f"Inconclusive: {reason}"
        confidence = "not decided: the evidence is not enough either way"
    if other:
        names = "; ".join(_clause(c, False) for c in other)
        sentence += f"; {other[0].failure} follows {names}"
    return Headline(status=status, sentence=sentence.rstrip(".") + ".", confidence=confidence,
                    reason=reason)


def _confidence(culprit: CulpritRow, alpha: float, commits: Mapping[str, Any] | None) -> str:
    """How sure, in words earned by the trials' evidence: the p of the sessions counted at
    their design effects (the spread between trials), and whole trials as units. Strong needs
    both: a p far below alpha, and the trials alone significant at TRIAL_ALPHA. The pooled
    sessions' p is said last, as a description."""
    if commits is not None:  # a commit search's finding
        mass = commits.get("posterior")
        return (f"the first bad commit holds {percent(mass)} of the posterior probability"
                if mass is not None else "a commit search's posterior")
    p, trial_p = culprit.p_value, culprit.trial_p_value
    if p is None:
        return "no test was made"
    by_trials = trial_p is not None and trial_p <= TRIAL_ALPHA
    strength = ("strong" if p < alpha / 100 and by_trials else
                "clear" if p <= alpha and by_trials else "weak")
    trials = "" if trial_p is None else (
        f"; taking whole trials as the units, p = {p_text(trial_p)} "
        f"({'within' if by_trials else 'not within'} {TRIAL_ALPHA:g})")
    sessions = "" if culprit.session_p_value is None else (
        f"; the pooled sessions alone would say p = {p_text(culprit.session_p_value)}, which "
        "takes every session as independent")
    return (f"{strength}: a difference this large would arise by chance with probability "
            f"{p_text(p)} (one-sided Fisher's exact test, each variant's sessions counted at "
            f"its design effect from the spread between its trials){trials}; the campaign's "
            f"threshold is alpha = {alpha:g}{sessions}")


# --- variants, the interaction, the trail ----------------------------------------------------


def _median(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 3) if known else None


def _latency(trials: Sequence[TrialEvidence], name: str, at: str) -> float | None:
    return _median(getattr(getattr(t.performance, name, None), at, None) for t in trials)


def variant_rows(verdict: Verdict, campaign: Campaign,
                 culprits: Sequence[CulpritRow]) -> list[VariantRow]:
    """A row per variant tried: its sessions, outcomes, errors and wedge events over all its
    done trials; its rate and interval on its judgeable trials that ran to their end (a trial
    stopped early ends with its failing sessions, which finish first: 9 of 9 is no 100%), or,
    where every one stopped, a lower bound that counts the sessions never run as clean. The
    interval counts the sessions at the variant's design effect (the spread between trials)."""
    judged = {id(t) for t in judged_trials(verdict.trials)}
    spread = spread_of(verdict.cells)
    everything = cells(t for t in verdict.trials if t.sessions)
    order = campaign.level_names()
    everything.sort(key=lambda c: [_level_rank(order[f], c.levels.get(f)) for f in order])
    good, bad = campaign.known_good or {}, campaign.known_bad or {}
    rows = []
    for cell in everything:
        levels = _ordered(cell.levels, order)
        key = _key(levels)
        counted = [t for t in cell.trials if id(t) in judged]
        rates = rated(counted)  # the rule a culprit's own effect follows too
        failed = sum(t.failures for t in rates)
        judged_n = sum(t.judged + t.unfinished for t in rates)
        low, high = wilson(*spread.effective((failed, judged_n), len(rates)))
        outcomes: dict[str, int] = {}
        for trial in cell.trials:
            for outcome, n in trial.counts.items():
                outcomes[outcome] = outcomes.get(outcome, 0) + n
        rows.append(VariantRow(
            key=key, levels=levels,
            role="known-good" if levels == good else "known-bad" if levels == bad else "",
            culprit=any(all(levels.get(f) == lvl for f, lvl in c.levels.items())
                        for c in culprits),
            sessions=cell.sessions,
            corrupted=sum(n for o, n in outcomes.items() if is_corrupt(o)),
            outcomes=outcomes, rate=round(failed / judged_n, 6) if judged_n else 0.0,
            ci95=(round(low, 6), round(high, 6)), trials=len(cell.trials),
            errors=outcomes.get(Outcome.ERROR.value, 0),
            timeouts=outcomes.get(Outcome.TIMEOUT.value, 0),
            wedge_events=sum(cell.events(WEDGE_LOG_KINDS).values()),
            throughput=_median(t.performance.output_throughput if t.performance else None
                               for t in cell.trials),
            ttft_p50_ms=_latency(cell.trials, "ttft", "p50_ms"),
            ttft_p99_ms=_latency(cell.trials, "ttft", "p99_ms"),
            itl_p50_ms=_latency(cell.trials, "itl", "p50_ms"),
            itl_p99_ms=_latency(cell.trials, "itl", "p99_ms"),
            judged=judged_n, failed=failed, unfinished=sum(t.unfinished for t in rates),
            unjudged_trials=sum(id(t) not in judged for t in cell.trials),
            stopped_early=sum(t.stopped_early for t in cell.trials),
            lower_bound=bool(rates) and all(t.stopped_early for t in rates)))
    return rows


def _level_rank(levels: Sequence[str], level: str | None) -> float:
    """Where a level sorts: a switch's in its declared order; a numeric knob's (which lists no
    levels: a range holds them) by its value, so that 16 comes before 112."""
    if level in levels:
        return float(levels.index(level))
    try:
        return float(level) if level is not None else -1.0
    except ValueError:
        return -1.0


def _key(levels: Mapping[str, str]) -> str:
    return variant_key(dict(levels))


def interaction(culprits: Sequence[CulpritRow], verdict: Verdict,
                campaign: Campaign) -> Interaction | None:
    """The rate by the levels of a two-factor culprit's factors (the others pooled), judged
    for the culprit's failure; None unless a culprit has exactly two factors."""
    pair = next((c for c in culprits if len(c.levels) == 2), None)
    factors = campaign.level_names()
    if pair is None or any(f not in factors for f in pair.levels):
        return None
    row_factor, line_factor = list(pair.levels)
    failing = FAILURES.get(pair.failure, CORRUPTING)
    # full trials only: one stopped early ends with its failing sessions, no rate
    trials = [t.judged_as(failing) for t in (judged_trials(verdict.trials)
              if failing == CORRUPTING else verdict.trials) if not t.stopped_early]
    spread = spread_of(cells(trials))  # of the culprit's failure, between a variant's trials
    points = []
    for line_level in factors[line_factor]:
        for row_level in factors[row_factor]:
            inside = [t for t in trials if t.levels.get(row_factor) == row_level
                      and t.levels.get(line_factor) == line_level]
            failed, judged = sum(t.failures for t in inside), sum(t.judged for t in inside)
            if not judged:
                continue  # never tried: no point rather than a made-up 0%
            low, high = wilson(*spread.effective((failed, judged), len(inside)))
            points.append(InteractionPoint(
                row_level=row_level, line_level=line_level, rate=round(failed / judged, 6),
                ci95=(round(low, 6), round(high, 6)), sessions=judged, failed=failed))
    return Interaction(row_factor=row_factor, line_factor=line_factor, points=points)


def trail_row(step: dict[str, Any]) -> TrailRow:
    return TrailRow(
        phase=str(step.get("phase", "")), levels=dict(step.get("levels") or {}),
        answer=str(step.get("answer", "")), failures=step.get("corrupted"),
        judged=step.get("sessions"), trials=step.get("trials"), p_fail=step.get("p_fail"),
        p_pass=step.get("p_pass"), fail_at=step.get("fail_at"), pass_at=step.get("pass_at"),
        unfinished=step.get("unfinished") or 0)

