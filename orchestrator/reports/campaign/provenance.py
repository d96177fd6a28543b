"""Where a report's numbers came from: the campaign file (secrets redacted), the tool's version,
when it ran, each node's facts, and where each trial ran and its load came from.

The store keeps the campaign as validated (``spec``), never its secrets' values: a secret is a
reference (``{secret: NAME}``), shown as its placeholder. Values this process has read are taken
out as everywhere else (``experiments.secrets.redact``), and so is the value of any environment
variable or flag whose name says it is a credential, written in the file in plain text."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from importlib import metadata
from typing import Any

import yaml

from db.records import CampaignRecord, StepRecord, TrialRecord
from db.store import Store
from experiments.campaign import Campaign
from experiments.secrets import redact
from orchestrator.core.evidence import variant_key
from orchestrator.reports.campaign.model import (
    LoadPlacement,
    NodeFacts,
    Provenance,
    TrialProvenance,
)

PACKAGE = "bisect-serving"
FACTS_STEP = "facts"  # a trial's step per node (its `service` the node): what the node runs
FACT_KEYS = ("host", "gpu", "driver", "server_version", "server_build", "commit")
# Names that say their value is a credential: HF_TOKEN, OPENAI_API_KEY, --api-key, DB_PASSWORD.
# (Not --max-total-tokens nor --tokenizer-path: a token's count, a tokenizer's path.)
_CREDENTIAL = re.compile(r"(?i)(token(?![a-z])|secret|passw(or)?d|api[-_]?key|credential|"
                         r"authorization)")
REDACTED = "<redacted>"


def tool_version() -> str:
    try:
        return f"{PACKAGE} {metadata.version(PACKAGE)}"
    except metadata.PackageNotFoundError:
        return f"{PACKAGE} (not installed: version unknown)"


def _is_ref(value: Any) -> bool:
    return isinstance(value, dict) and set(value) <= {"secret", "secret_file"} and \
        any(value.get(k) for k in ("secret", "secret_file"))


def _redacted(value: Any, key: str = "") -> Any:
    """The spec with secret references as their placeholders and credential-named values out."""
    if _is_ref(value):
        return f"<secret {value.get('secret') or value.get('secret_file')}>"
    if isinstance(value, dict):
        return {k: _redacted(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        words = [_redacted(v) for v in value]
        # a credential's flag takes the next word (`--api-key VALUE`) or its own (`--api-key=V`)
        for i, word in enumerate(words):
            if isinstance(word, str) and word.startswith("-") and _CREDENTIAL.search(word):
                if "=" in word:
                    words[i] = f"{word.split('=', 1)[0]}={REDACTED}"
                elif i + 1 < len(words) and isinstance(words[i + 1], str) \
                        and not words[i + 1].startswith("<secret "):
                    words[i + 1] = REDACTED
        return words
    # `api_key_env: NAME` names the variable that holds the key: a reference, kept
    if isinstance(value, str) and key and _CREDENTIAL.search(key) and value \
            and not key.endswith("_env") and not value.startswith("<secret "):
        return REDACTED
    return value


def campaign_file(campaign: Campaign) -> str:
    """The campaign as stored, as YAML without the fields left at their defaults (close to
    what its author wrote), secrets redacted; its workload's seed always (the run seed its
    trials were drawn from, even 0): the file replays the campaign's sessions as it shows."""
    dumped = campaign.model_dump(mode="json", exclude_defaults=True)
    dumped.setdefault("workload", {})["seed"] = campaign.workload.seed
    shown = _redacted(dumped)
    text = yaml.safe_dump(shown, sort_keys=False, allow_unicode=True, width=100)
    return redact(text)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def node_facts(steps: Mapping[int, Sequence[StepRecord]],
               campaign: Campaign) -> list[NodeFacts]:
    """Each node's facts as its latest trial recorded them (``facts`` steps, one per node);
    a node of the campaign with none recorded is listed with what the file says of it. Only
    steps that ran count: a trial that failed before reading them stores its ``facts`` step
    skipped (no details), which must not blank what an earlier trial read."""
    latest: dict[str, dict[str, Any]] = {}
    for trial_id in sorted(steps):
        for step in steps[trial_id]:
            if step.name == FACTS_STEP and step.service and step.outcome == "ok":
                latest[step.service] = step.details
    declared = {n.name: n.host for n in campaign.nodes}
    rows = []
    for node in [*declared, *(n for n in latest if n not in declared)]:
        facts = latest.get(node, {})
        shown = {k: None if facts.get(k) is None else redact(str(facts[k])) for k in FACT_KEYS}
        if shown["host"] is None:
            shown["host"] = declared.get(node)
        rows.append(NodeFacts(node=node, **shown))
    return rows


def provenance(store: Store, record: CampaignRecord, campaign: Campaign,
               trials: Sequence[TrialRecord],
               steps: Mapping[int, Sequence[StepRecord]]) -> Provenance:
    """``steps``: the campaign's steps by trial id (``Store.campaign_steps``)."""
    started = min((t.started_at for t in trials), default=record.created_at)
    finished = record.finished_at or max(
        (t.finished_at for t in trials if t.finished_at is not None), default=None)
    # Without load generators each pool's actor ran its own load: nothing stored to read.
    generators = store.campaign_generators(record.id) if campaign.generators is not None else {}
    return Provenance(
        campaign_file=campaign_file(campaign),
        tool_version=tool_version(),
        started_at=_iso(started),
        finished_at=_iso(finished),
        nodes=node_facts(steps, campaign),
        trials=[TrialProvenance(
            id=t.id, variant=variant_key(t.levels), pool=t.pool, started_at=_iso(t.started_at),
            wall_s=t.wall_s,
            load=[LoadPlacement(node=g.node_id, address=g.address, sessions=g.sessions)
                  for g in generators.get(t.id, [])],
            status=t.status, failure=t.failure)
            for t in trials],
    )
