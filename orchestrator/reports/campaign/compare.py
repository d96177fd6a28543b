"""Two campaigns over the same factors, side by side (``bisect report A --compare B``).

Per variant the change in its failing rate from A to B with a 95% interval (Newcombe's hybrid
score interval of the difference) and a three-way answer: worse in B, better in B, or no clear
change (the interval holds zero). Then what changed between them: each node's facts (build,
driver, commit of its source tree), the commit ranges, the tool, the campaign file (a diff).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any

from orchestrator.core.stats.proportions import newcombe_difference
from orchestrator.reports.campaign.answers import counts
from orchestrator.reports.campaign.model import Interval, NodeFacts, Report, VariantRow
from orchestrator.reports.files import clean
from orchestrator.reports.renderer import Writes
from orchestrator.reports.text import share

WORSE, BETTER, NO_CLEAR_CHANGE = "worse", "better", "no clear change"
ONLY_A, ONLY_B, NOT_JUDGED = "only in A", "only in B", "not judged in both"
NODE_FIELDS = ("host", "gpu", "driver", "server_version", "server_build", "commit")
MAX_DIFF_LINES = 400


class NotComparable(ValueError):
    """The two campaigns do not bisect the same thing: no variant-by-variant change means
    anything."""


@dataclass(frozen=True)
class VariantChange:
    key: str
    levels: dict[str, str]
    role: str  # A's role for the variant, else B's
    failed_a: int
    judged_a: int
    failed_b: int
    judged_b: int
    rate_a: float | None  # None: not run (or nothing judged) in A
    rate_b: float | None
    change: float | None  # rate B - rate A
    ci95: Interval | None
    answer: str  # WORSE | BETTER | NO_CLEAR_CHANGE | ONLY_A | ONLY_B | NOT_JUDGED
    # a rate that is a lower bound: every trial of the variant stopped early (VariantRow)
    lower_bound_a: bool = False
    lower_bound_b: bool = False


@dataclass(frozen=True)
class FactChange:
    node: str
    fact: str
    a: str | None  # None: the node is not in A's campaign (or does not say)
    b: str | None


@dataclass(frozen=True)
class Comparison:
    a: Report
    b: Report
    variants: list[VariantChange]
    nodes: list[FactChange]
    commits: list[FactChange]  # the commit ranges' keys that differ (fact = the key)
    tool: tuple[str, str]
    campaign_diff: list[str]  # unified diff lines of the campaign files; empty: the same
    diff_cut: int = 0  # lines of the diff left out beyond MAX_DIFF_LINES
    notes: list[str] = field(default_factory=list)

    family = "compare"  # its renderers' (renderer.FORMATS)

    def to_json(self) -> dict[str, Any]:
        return {
            "a": _side(self.a), "b": _side(self.b),
            "variants": [{**v.__dict__, "ci95": list(v.ci95) if v.ci95 else None}
                         for v in self.variants],
            "nodes": [n.__dict__ for n in self.nodes],
            "commits": [c.__dict__ for c in self.commits],
            "tool": {"a": self.tool[0], "b": self.tool[1]},
            "campaign_diff": self.campaign_diff, "diff_cut": self.diff_cut,
            "notes": self.notes,
        }


def _side(report: Report) -> dict[str, Any]:
    facts = report.campaign
    return {"id": facts.id, "name": facts.name, "status": facts.status,
            "verdict": report.headline.status, "sentence": report.headline.sentence,
            "created_at": facts.created_at, "trials": report.cost.trials}


def comparable(a: Report, b: Report) -> None:
    """Raise ``NotComparable`` (with the reason, in one sentence) unless ``a`` and ``b`` are
    two campaigns over the same factors with the same target."""
    fa, fb = set(a.campaign.factors), set(b.campaign.factors)
    if fa != fb:
        only_a, only_b = sorted(fa - fb), sorted(fb - fa)
        said = "; ".join(s for s in (
            f"only {a.campaign.id} has {', '.join(map(repr, only_a))}" if only_a else "",
            f"only {b.campaign.id} has {', '.join(map(repr, only_b))}" if only_b else "") if s)
        raise NotComparable(f"campaigns {a.campaign.id} and {b.campaign.id} are not over the "
                            f"same factors ({said}): nothing to compare variant by variant")
    if a.campaign.target != b.campaign.target:
        raise NotComparable(f"campaign {a.campaign.id} bisects {a.campaign.target} and "
                            f"{b.campaign.id} {b.campaign.target}: their rates are of "
                            "different failures")
    keys_a = {v.key for v in a.variants}
    if not any(v.key in keys_a for v in b.variants):
        raise NotComparable(f"campaigns {a.campaign.id} and {b.campaign.id} ran no variant in "
                            "common: nothing to compare")


def _change(key: str, va: VariantRow | None, vb: VariantRow | None) -> VariantChange:
    ka, na = counts(va) if va else (0, 0)
    kb, nb = counts(vb) if vb else (0, 0)
    shown = va or vb
    assert shown is not None
    rate_a, rate_b = (ka / na if na else None), (kb / nb if nb else None)
    if va is None or vb is None:
        answer, change, ci = (ONLY_B if va is None else ONLY_A), None, None
    elif not na or not nb:
        answer, change, ci = NOT_JUDGED, None, None
    else:
        ci = newcombe_difference(kb, nb, ka, na)
        change = kb / nb - ka / na
        answer = WORSE if ci[0] > 0 else BETTER if ci[1] < 0 else NO_CLEAR_CHANGE
    role = (va.role if va else "") or (vb.role if vb else "")
    return VariantChange(key, dict(shown.levels), role, ka, na, kb, nb, rate_a, rate_b, change,
                         ci, answer, bool(va and va.lower_bound), bool(vb and vb.lower_bound))


def _node_changes(a: list[NodeFacts], b: list[NodeFacts]) -> list[FactChange]:
    by_a, by_b = {n.node: n for n in a}, {n.node: n for n in b}
    changes = []
    for node in sorted(by_a.keys() | by_b.keys()):
        na, nb = by_a.get(node), by_b.get(node)
        for fact in NODE_FIELDS:
            va = getattr(na, fact) if na else None
            vb = getattr(nb, fact) if nb else None
            if va != vb:
                changes.append(FactChange(node, fact, va, vb))
    return changes


def _commit_changes(a: dict[str, Any] | None, b: dict[str, Any] | None) -> list[FactChange]:
    a, b = a or {}, b or {}
    return [FactChange("commits", key, None if key not in a else str(a[key]),
                       None if key not in b else str(b[key]))
            for key in sorted(a.keys() | b.keys()) if a.get(key) != b.get(key)]


def compare(a: Report, b: Report) -> Comparison:
    """``b`` against ``a`` (A the baseline: "worse" means B's rate is higher)."""
    comparable(a, b)
    rows_a, rows_b = {v.key: v for v in a.variants}, {v.key: v for v in b.variants}
    order = [v.key for v in a.variants] + [v.key for v in b.variants if v.key not in rows_a]
    variants = [_change(key, rows_a.get(key), rows_b.get(key)) for key in order]
    diff = list(difflib.unified_diff(
        a.provenance.campaign_file.splitlines(), b.provenance.campaign_file.splitlines(),
        f"A: {a.campaign.id}", f"B: {b.campaign.id}", lineterm=""))
    notes = []
    if a.campaign.strategy != b.campaign.strategy:
        notes.append(f"strategies differ: {a.campaign.strategy} in A, "
                     f"{b.campaign.strategy} in B")
    if a.campaign.known_good != b.campaign.known_good:
        notes.append("known-good differs: the rates are measured against different "
                     "references")
    return Comparison(
        a, b, variants, _node_changes(a.provenance.nodes, b.provenance.nodes),
        _commit_changes(a.commits, b.commits),
        (a.provenance.tool_version, b.provenance.tool_version),
        diff[:MAX_DIFF_LINES], max(0, len(diff) - MAX_DIFF_LINES), notes)


# --- rendered ----------------------------------------------------------------------------------


def _rate(rate: float | None, lower_bound: bool = False) -> str:
    """As the campaign's report shows it: ≥ where every trial stopped early (a lower bound)."""
    return "–" if rate is None else ("≥ " if lower_bound else "") + share(rate)


def _delta(v: VariantChange) -> str:
    if v.change is None or v.ci95 is None:
        return "–"
    return f"{v.change * 100:+.1f} pp ({v.ci95[0] * 100:+.1f} … {v.ci95[1] * 100:+.1f} pp)"


def render_compare_markdown(c: Comparison) -> str:
    from orchestrator.reports.text import levels_text, table, text

    a, b = c.a.campaign, c.b.campaign
    worse = sum(v.answer == WORSE for v in c.variants)
    better = sum(v.answer == BETTER for v in c.variants)
    lines = [f"**Compared:** B {text(b.name)} ({text(b.id)}) against A {text(a.name)} "
             f"({text(a.id)}): {worse} variant(s) worse in B, {better} better.", "",
             f"A: {text(c.a.headline.sentence, 1000)}  ", f"B: {text(c.b.headline.sentence, 1000)}"]
    lines += [f"\nNote: {text(note, 500)}" for note in c.notes]
    lines += ["", "### Variants", ""]
    lines += table(["variant", "role", "A failed/judged#", "A rate#", "B failed/judged#",
                    "B rate#", "change (95% CI)#", "answer"],
                   [[levels_text(v.levels), text(v.role or "–"), f"{v.failed_a}/{v.judged_a}",
                     _rate(v.rate_a, v.lower_bound_a), f"{v.failed_b}/{v.judged_b}",
                     _rate(v.rate_b, v.lower_bound_b), _delta(v),
                     text(v.answer)] for v in c.variants])
    changed = [*c.nodes, *c.commits]
    if c.tool[0] != c.tool[1]:
        changed.append(FactChange("bisect", "version", c.tool[0], c.tool[1]))
    lines += ["", "### What changed", ""]
    lines += table(["where", "fact", "A", "B"],
                   [[text(f.node), text(f.fact), text(f.a if f.a is not None else "–"),
                     text(f.b if f.b is not None else "–")] for f in changed]) \
        if changed else ["No node, commit or tool fact differs."]
    if c.campaign_diff:
        # A fence longer than any run of backticks in the diff: it cannot be closed early.
        fence = "`" * max(3, 1 + max((len(m) for line in c.campaign_diff
                                      for m in re.findall("`+", line)), default=0))
        lines += ["", "<details><summary>Campaign file diff</summary>", "", fence + "diff",
                  *(clean(line) for line in c.campaign_diff), fence, "", "</details>"]
    else:
        lines += ["", "The campaign files are the same."]
    return "\n".join(lines) + "\n"


def render_compare_html(c: Comparison) -> str:
    from orchestrator.reports.page import render_page

    changed = [*c.nodes, *c.commits]
    if c.tool[0] != c.tool[1]:
        changed.append(FactChange("bisect", "version", c.tool[0], c.tool[1]))
    rows = [{"name": ", ".join(f"{f}={lvl}" for f, lvl in v.levels.items()),
             "role": v.role, "a": f"{v.failed_a}/{v.judged_a}",
             "rate_a": _rate(v.rate_a, v.lower_bound_a), "b": f"{v.failed_b}/{v.judged_b}",
             "rate_b": _rate(v.rate_b, v.lower_bound_b), "delta": _delta(v),
             "answer": v.answer, "css": {WORSE: "worse", BETTER: "better"}.get(v.answer, "")}
            for v in c.variants]
    return render_page(f"bisect: {c.b.campaign.name} against {c.a.campaign.name}",
                       "compare.html.j2", a=c.a, b=c.b, notes=c.notes, variants=rows,
                       changed=changed, diff="\n".join(c.campaign_diff), cut=c.diff_cut)


HTML = Writes("html", ".html", render_compare_html)

MARKDOWN = Writes("md", ".md", render_compare_markdown)
