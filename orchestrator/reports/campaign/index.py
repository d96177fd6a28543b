"""A static index of every campaign in a store (``bisect report --index -o DIR``): its name,
status, culprit, date and cost, each linking its HTML report, written beside it in DIR.

The index is a plain page (``page.render_page``, as ``compare``'s HTML): autoescaped, nothing
fetched, one inline style allowed by its hash and no script at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from db.store import Store
from orchestrator.core.trail import culprit_words
from orchestrator.reports.campaign.model import Report
from orchestrator.reports.files import write_private
from orchestrator.reports.page import render_page
from orchestrator.reports.search.model import Search
from orchestrator.reports.search.text import labelled, number


@dataclass(frozen=True)
class Entry:
    id: str
    name: str
    status: str
    created: str
    report: Report | None
    href: str | None  # the report's file, relative to the index
    problem: str = ""  # why there is no report

    @property
    def verdict(self) -> str:
        return self.report.headline.status if self.report else ""

    @property
    def culprits(self) -> list[str]:
        """The culprits; for a search, its best safe configuration (or that none was named)."""
        if self.report is not None and self.report.optimize is not None:
            return [_best(self.report.optimize)]
        return [f"{c.failure}: " + culprit_words(c.levels)
                for c in (self.report.culprits if self.report else [])]

    @property
    def cost(self) -> list[str]:
        if self.report is None:
            return ["", "", "", ""]
        cost = self.report.cost
        return [str(cost.trials), f"{cost.sessions:,}", f"{cost.gpu_s_equivalent:,.0f}",
                f"{cost.wall_s:,.0f}"]


def _best(search: Search) -> str:
    best = search.winner
    if best is None:
        return "no safe configuration named"
    shown = "; ".join(f"{o.metric} {number(o.mean)}" for o in best.objectives)
    versus = search.versus_production
    if versus is not None and versus.is_production:
        return f"best: {labelled(best.levels)} ({shown}), production itself"
    if versus is not None and versus.measured and not versus.shown_better:
        return f"best: {labelled(best.levels)} ({shown}), no better than production"
    return f"best: {labelled(best.levels)} ({shown})"


def file_name(campaign_id: str, taken: set[str]) -> str:
    """The report's file name in DIR: the id with anything but letters, digits, ``.``, ``-``
    and ``_`` replaced (an id is a store's value, not a path); never hidden, never taken."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", campaign_id).lstrip(".") or "campaign"
    name, n = f"{stem}.html", 1
    while name.lower() in taken or name.lower() == "index.html":
        n += 1
        name = f"{stem}-{n}.html"
    taken.add(name.lower())
    return name


def render_index(entries: list[Entry], store: str) -> str:
    return render_page("bisect campaigns", "index.html.j2", entries=entries, store=store)


def write_index(store: Store, directory: Path, shown_store: str) -> list[Path]:
    """Every campaign's HTML report into ``directory`` and the index linking them
    (``index.html``). The paths written, the index last."""
    from orchestrator.reports.campaign.build import build_report
    from orchestrator.reports.renderer import render

    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    entries: list[Entry] = []
    taken: set[str] = set()
    for record in store.list_campaigns():
        created = record.created_at.strftime("%Y-%m-%d %H:%M UTC")
        try:
            report = build_report(store, record.id)
            page = render(report, "html")
        # One campaign whose report cannot be made (a spec this version no longer reads, a
        # store row it cannot judge) must not hide the others: it is listed with the reason.
        except Exception as exc:
            entries.append(Entry(record.id, record.name, record.status, created, None, None,
                                 f"{type(exc).__name__}: {exc}"))
            continue
        name = file_name(record.id, taken)
        written.append(write_private(directory / name, page))
        entries.append(Entry(record.id, record.name, record.status, created, report, name))
    written.append(write_private(directory / "index.html", render_index(entries, shown_store)))
    return written
