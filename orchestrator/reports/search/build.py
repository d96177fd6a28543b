"""A search's part of the report model: the verdict's ``optimize`` section (its rows as
optimize_rank.py's ``Candidate.to_json`` writes them) as a ``Search``, levels in the
campaign's order of factors, each row marked as the answer, production or known-good; and
the headline a search reads with (the best safe configuration, or why none was named)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from experiments.campaign import Campaign
from orchestrator.reports.campaign.model import Headline
from orchestrator.reports.search.model import (
    Configuration,
    Search,
    VersusProduction,
    search_from_json,
)
from orchestrator.reports.search.text import (
    bound_text,
    confidence,
    differences_text,
    labelled,
    number,
    objectives_text,
    signed,
    slo_text,
    trials_text,
    versus_text,
)

ROWS = ("ranked", "pareto", "rejected", "unproven")


def _ordered(levels: Mapping[str, str], order: Sequence[str]) -> dict[str, str]:
    rank = {name: i for i, name in enumerate(order)}
    return dict(sorted(levels.items(), key=lambda item: rank.get(item[0], len(rank))))


def search_section(section: Mapping[str, Any] | None, campaign: Campaign) -> Search | None:
    """The verdict's search (its finding's JSON, ``Verdict.finding_json("optimize")``), ready
    to render; None when the verdict holds none."""
    if section is None:
        return None
    order = [f.name for f in campaign.factors]
    production = dict(section.get("production") or {})
    good = dict(campaign.known_good or {})
    best = dict(section.get("best") or {})

    def row(data: Mapping[str, Any]) -> dict[str, Any]:
        levels = dict(data["levels"])
        role = ("production" if production and levels == production
                else "known-good" if good and levels == good else "")
        return {**data, "levels": _ordered(levels, order), "role": role,
                "best": bool(best) and levels == best}

    plain = {name: [row(c) for c in section.get(name) or []] for name in ROWS}
    # the front's rows as ranked (with their marks: confirmed, on the front), in its order
    ranked = {c["key"]: c for c in plain["ranked"]}
    front = {c["key"] for c in plain["pareto"]}
    for c in plain["ranked"]:
        c["pareto"] = c.get("pareto", False) or c["key"] in front
    plain["pareto"] = [ranked.get(c["key"], {**c, "pareto": True}) for c in plain["pareto"]]
    versus = section.get("versus_production")
    if versus is not None and versus.get("production"):
        versus = {**versus, "production": _ordered(versus["production"], order)}
    return search_from_json({
        **section, **plain, "versus_production": versus,
        "best": _ordered(best, order) if best else None,
        "production": _ordered(production, order) if production else None,
        "undeployable": [{**u, "levels": _ordered(u["levels"], order)}
                         for u in section.get("undeployable") or []],
        "factors": order})


def _against_production(best: Configuration, search: Search) -> str:
    """The answer's first objective against production's, as the verdict's comparison
    measured it (``_compared``), and the test of the difference (``versus_text``)."""
    versus = search.versus_production
    levels = versus.production if versus is not None else search.production
    production = search.named(levels)
    if production is None or production.key == best.key or not best.objectives:
        return ""
    figure = _compared(best, production, versus, search.limits.alpha)
    if not figure:
        return ""
    standing = "" if production.safe else (
        f"; production itself is not proven safe: {production.why[0]}" if production.why
        else "")
    tested = f", {versus_text(versus, search.limits.alpha)}" if versus is not None else ""
    return f"; {figure}{tested}{standing}"


def _compared(best: Configuration, production: Configuration,
              versus: VersusProduction | None, alpha: float) -> str:
    """The first objective's figure as the verdict compared it: the ratio on the final
    phase's pairs (each pair on one pool); a Welch test's difference where it read one pool's
    trials, not all (optimize_versus.py); else the means of all trials. On several pools
    those means set one pool's speed against another's: they can say worse where the pairs
    say better."""
    mine, theirs = best.objectives[0], production.objectives[0]
    said = f"{mine.metric} against production ({labelled(production.levels)}: "
    d = versus.first if versus is not None else None
    if d is not None and d.pairs is not None:
        if d.ratio is None:
            return ""
        ci = ("" if d.ratio_ci is None else f", {confidence(2 * alpha)} CI "
              f"{d.ratio_ci[0] - 1:+.1%} … {d.ratio_ci[1] - 1:+.1%}")
        return (f"{d.ratio - 1:+.1%} {said}the ratio of the geometric means on "
                f"{d.pairs} pair{'s' * (d.pairs != 1)} of the final phase{ci})")
    if d is not None and tuple(d.trials) != (len(mine.values), len(theirs.values)):
        if d.difference is None:
            return ""
        return (f"{signed(d.difference)} {d.unit} {said}on one pool's trials, "
                f"{d.trials[0]} vs {d.trials[1]})")
    if mine.mean is None or theirs.mean is None or not theirs.mean:
        return ""
    return f"{mine.mean / theirs.mean - 1:+.1%} {said}{number(theirs.mean)} {theirs.unit})"


def _no_better(best: Configuration, search: Search) -> str | None:
    """The headline when the answer is not shown better than production (measured in the same
    run), or is production itself; None when it is shown better or nothing was compared."""
    versus = search.versus_production
    if versus is None or not versus.measured or versus.shown_better:
        return None
    alpha = search.limits.alpha
    if versus.is_production:
        return (f"Production is the best safe configuration: {labelled(best.levels)}: "
                f"{objectives_text(best, alpha)}; no other configuration measured was proven "
                "safe and faster")
    production = search.named(versus.production)
    theirs = (f": {objectives_text(production, alpha)}, {trials_text(production.trials)}"
              if production is not None else "")
    why = (versus.why if versus.why.startswith("not shown better")
           else f"not shown better, {versus.why}")
    standing = ("; production itself is not proven safe"
                if production is not None and not production.safe else "")
    return (f"No better than production ({labelled(versus.production or {})}{theirs}): the best "
            f"safe configuration, {labelled(best.levels)}: {objectives_text(best, alpha)}, "
            f"{trials_text(best.trials)}, is {why}: {differences_text(versus, alpha)}{standing}")


def search_headline(search: Search, status: str, reason: str) -> Headline:
    """The verdict of a search in one sentence, and how sure: the proof of its safety."""
    best = search.winner
    alpha = search.limits.alpha
    if status == "optimum" and best is not None:
        front = (f" (one of {len(search.pareto)} on the Pareto front, ranked by "
                 f"{search.objectives[0]})" if len(search.objectives) > 1 and search.pareto
                 else "")
        sentence = _no_better(best, search) or (
            f"Best safe configuration{front}: {labelled(best.levels)}: "
            f"{objectives_text(best, alpha)}{_against_production(best, search)}")
        proofs = [f"corruption {bound_text(best.corruption)}",
                  f"wedging {bound_text(best.wedging)}", *(slo_text(s) for s in best.slo)]
        slo = "; the SLOs on the mean of each trial's p99" if best.slo else ""
        sure = (f"proven safe on {best.trials} trials: {'; '.join(proofs)} (one-sided "
                f"{confidence(alpha)} exact bounds on the pooled sessions{slo}); the "
                f"objectives' intervals are two-sided {confidence(alpha)} t intervals over its "
                "trials")
        return Headline(status=status, sentence=sentence + ".", confidence=sure, reason=reason)
    unconfirmed = sum(not c.confirmed for c in search.ranked)
    sure = (f"not decided: {len(search.ranked)} proven safe ({unconfirmed} of them not "
            f"re-run to confirmation), {len(search.rejected)} shown unsafe, "
            f"{len(search.unproven)} measured too little to prove safe, "
            f"{len(search.undeployable)} skipped (their trials failed before they were "
            f"measured)")
    return Headline(status=status, sentence=f"No safe configuration named: {reason}.",
                    confidence=sure, reason=reason)

