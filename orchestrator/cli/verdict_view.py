"""A verdict for people and for tools (``--json``), and a decision trail's lines."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text

from orchestrator.cli.common import emit_json, out

if TYPE_CHECKING:
    from orchestrator.core.verdict import Verdict


def print_verdict(verdict: Verdict, campaign_id: str, as_json: bool,
                  paths: dict[str, str], seed: int | None = None) -> None:
    """``paths``: the store (and the report, where one was written) the JSON names; ``seed``:
    the campaign's run seed (``--seed`` replays its draw), in the JSON beside its id."""
    document = verdict.to_json()
    if as_json:
        emit_json({"campaign": campaign_id, **({"seed": seed} if seed is not None else {}),
                   **paths, **document})
        return
    # Level names come from the campaign file and reasons from servers: never rich markup.
    out.print(Text("verdict", style="bold") + Text(f" {document['status']}: {document['reason']}"),
              highlight=False)
    # each failure's culprits from its own entry: the target's first (`culprits`), then the
    # other's under its name (a wedge culprit is never printed as the target's)
    failures = document.get("failures", {})
    target = document["target"]
    for culprit in failures.get(target, {}).get("culprits", document["culprits"]):
        _print_culprit(culprit, commits="commits" in document)
    for name, failure in failures.items():
        if name != target and failure["culprits"]:  # the other failure's
            out.print(Text(f"  {name}: ", style="bold") + Text(failure["reason"]),
                      highlight=False)
            for culprit in failure["culprits"]:
                _print_culprit(culprit, commits="commits" in failure)
    if "optimize" in document:
        from orchestrator.cli.optimize_view import print_search

        print_search(document["optimize"])
    cost = document["cost"]
    out.print(
        f"  cost: {cost['trials']} trials, {cost['restarts']} restarts, {cost['sessions']} "
        f"sessions, {cost['wall_s']:.0f} s here, {cost['gpu_s_equivalent']:.0f} GPU-s real-world",
        highlight=False,
    )


def _print_culprit(culprit: dict[str, Any], *, commits: bool) -> None:
    effect = (f"(effect {culprit['effect']:+.1%}, 95% CI {culprit['ci95'][0]:+.1%}…"
              f"{culprit['ci95'][1]:+.1%}, p={culprit['p_value']:.2g})")
    if commits:  # the reason names the commits, with subject and author
        out.print(f"  from {culprit['factors']['commit']} on: {culprit['rate_with']:.1%} "
                  f"vs {culprit['rate_without']:.1%} before it {effect}",
                  highlight=False, markup=False)
        return
    levels = " AND ".join(f"{f}={lvl}" for f, lvl in culprit["factors"].items())
    out.print(f"  culprit {levels}: {culprit['rate_with']:.1%} vs "
              f"{culprit['rate_without']:.1%} {effect}", highlight=False, markup=False)
    own = culprit.get("own")
    if own is not None:  # on its own: the culprit alone against known-good and its neighbours
        seen = [*(f"{kind} {n['with']} vs {n['without']}" for kind, n in own["outcomes"].items()),
                *(f"log {kind} {n['with']} vs {n['without']}"
                  for kind, n in own["log_events"].items())]
        out.print(f"    alone: {own['rate_with']:.1%} vs {own['rate_without']:.1%} (95% CI "
                  f"{own['ci95'][0]:+.1%}…{own['ci95'][1]:+.1%}); {', '.join(seen) or 'clean'}",
                  highlight=False, markup=False)


def _p(value: float | None) -> str:
    return "–" if value is None else f"{value:.2g}"  # None: no test was made at this step


def _at(level: float | None) -> str:
    return "" if level is None else f" (at ≤{level:.2g})"  # the threshold it was compared to


def _skipped(error: str) -> str:
    """Why a commit was skipped: its deploy's error, or the user's probe (exit 125)."""
    from orchestrator.core.strategies.base import PROBE_SKIPPED

    if error.startswith(PROBE_SKIPPED):
        return "the probe skipped it (exit 125)"
    return f"cannot be deployed: {error}"


def sweep_change(step: dict[str, Any]) -> str:
    """A sweep comparison's change as a reader says it: rates in points, figures in percent;
    with the change its SAME rules out: the threshold where a variant is compared, 40% of it
    where a suspect's fresh trials confirm it (a suspect is made at 40% of the threshold)."""
    said = "rules out" if step.get("phase") == "confirm" else "threshold"
    if step["metric"] in ("corruption", "wedging"):
        return (f"{step['baseline']:.1%} -> {step['current']:.1%} "
                f"({step['change'] * 100:+.1f} points, {said} +{step['min_effect'] * 100:g})")
    from orchestrator.core.stats.regression import moved

    # signed as the metric moved (a throughput drop negative), its threshold as far the bad way
    metric = step["metric"]
    return (f"{moved(metric, step['change']):+.1%} ({said} "
            f"{moved(metric, step['min_effect']):+.0%})")


def trail_line(index: int, step: dict[str, Any]) -> str:
    """One line a step: readable at any width."""
    variant = ",".join(f"{f}={lvl}" for f, lvl in step["levels"].items())
    if "posterior" in step:  # a commit search's: the posterior mass, no test
        from orchestrator.core.strategies.commits import commit_words
        sha = step["levels"]["commit"]
        commit = commit_words(sha, {sha: (step["subject"], step["author"])}
                              if "subject" in step else {})
        skipped = f"  skipped, {_skipped(step.get('reason', ''))}" \
            if step["phase"] == "skipped" else ""
        return (f"{index:3} posterior {step['posterior']:.4f}  {step['corrupted']}/"
                f"{step['sessions']} in {step['trials']} trial(s)  {commit}{skipped}")
    if "metric" in step:  # a sweep's: one metric of a variant against its reference
        return (f"{index:3} {step['phase']:<8} {step['variant']:<16} {step['metric']:<12} "
                f"{step['answer']:<10} {sweep_change(step)}  in {step['trials']} trial(s)  "
                f"p(worse)={_p(step['p_worse'])}{_at(step.get('alpha_worse', step['alpha']))} "
                f"p(same)={_p(step['p_same'])}{_at(step['alpha'])}  {variant}")
    if "standing" in step:  # a search's: one trial, and where its configuration stands
        value = "–" if step["value"] is None else f"{step['value']:.4g}"
        lead = f"  leader {step['leader']}" if step["leader"] else ""
        return (f"{index:3} trial {step['trial']:<4} {step['phase']:<7} {step['objective']} "
                f"{value:<9} {step['corrupted']}/{step['sessions']} corrupt  "
                f"{step['standing']} after {step['trials']} trial(s)  {variant}{lead}")
    unfinished = f" (+{step['unfinished']} unfinished)" if step.get("unfinished") else ""
    return (f"{index:3} {step['phase']:<22} {step['answer']:<17} "
            f"{step['corrupted']}/{step['sessions']}{unfinished} in {step['trials']} trial(s)  "
            f"p(worse than good)={_p(step['p_fail'])}{_at(step.get('fail_at'))} "
            f"p(better than bad)={_p(step['p_pass'])}{_at(step.get('pass_at'))}  "
            f"{variant}"
            + (f"  {step['reason']}" if "reason" in step else ""))  # why it was skipped
