"""The HTML report: the verdict, the variants and the evidence, rendered by Jinja (autoescaped)."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from db.store import Store
from experiments.outcomes import is_corrupt
from orchestrator.stored import campaign_of, verdict_of

MAX_EVIDENCE = 20
MAX_EVIDENCE_CHARS = 400


def _environment() -> Environment:
    return Environment(
        loader=PackageLoader("templates", ""),
        autoescape=select_autoescape(enabled_extensions=("html", "j2"), default=True),
    )


def _evidence(store: Store, campaign_id: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for trial in store.trials(campaign_id):
        if not any(is_corrupt(o) and n for o, n in trial.counts.items()):
            continue
        for session in store.sessions(trial.id):
            if is_corrupt(session.outcome):
                rows.append({
                    "variant": ",".join(f"{k}={v}" for k, v in trial.levels.items()),
                    "key": session.key,
                    "outcome": session.outcome,
                    "turn": session.first_bad_turn,
                    "text": (session.evidence or "")[:MAX_EVIDENCE_CHARS],
                })
                if len(rows) >= MAX_EVIDENCE:
                    return rows
    return rows


def render_report(store: Store, campaign_id: str) -> str:
    record = store.get_campaign(campaign_id)
    campaign = campaign_of(store, campaign_id)
    template = _environment().get_template("report.html.j2")
    return template.render(
        campaign=asdict(record),
        factors=[f.name for f in campaign.factors],
        verdict=verdict_of(store, campaign_id).to_json(),
        evidence=_evidence(store, campaign_id),
    )


def write_report(store: Store, campaign_id: str, path: Path) -> Path:
    html = render_report(store, campaign_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.unlink(missing_ok=True)
    # Owner-only, like the store it is made from (its evidence is what the servers answered).
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w",
                   encoding="utf-8") as file:
        file.write(html)
    tmp.replace(path)  # never a half-written report
    return path
