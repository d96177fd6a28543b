"""A verdict for people and for tools (``--json``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text

from orchestrator.cli.common import emit_json, out
from orchestrator.core.trail import culprit_words

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
    levels = culprit_words(culprit["factors"])
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
