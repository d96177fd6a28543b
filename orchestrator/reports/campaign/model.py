"""The report model: everything a report shows, as plain frozen values (built from the store by
``build.build_report``; rendered by one module per format, found by ``renderer.render``).
``Report.to_json`` is what ``--format json`` prints, versioned; ``Report.from_json`` reads it
back (``--compare`` of saved reports). Pure data: no store, no templates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, TypedDict

from experiments.optimize_config import direction
from orchestrator.reports.search.model import Search, search_from_json

REPORT_VERSION = 1

Point = tuple[float, float]  # (seconds since the trial's first sample, value)
Interval = tuple[float, float]


@dataclass(frozen=True)
class CampaignFacts:
    id: str
    name: str
    status: str  # the campaign's own status (running, done, failed, interrupted, refused)
    target: str  # what the campaign bisects: "corruption" | "wedging"
    strategy: str  # the strategy's kind
    created_at: str | None
    finished_at: str | None
    factors: dict[str, list[str]]
    known_good: dict[str, str]
    known_bad: dict[str, str]
    alpha: float = 0.01  # the strategy's significance level, what its tests were judged at


@dataclass(frozen=True)
class Headline:
    status: str  # culprit | no_culprit | inconclusive | not_reproduced
    sentence: str  # the verdict in one plain sentence
    confidence: str  # how sure, said plainly
    reason: str  # the verdict's reason


@dataclass(frozen=True)
class CulpritRow:
    failure: str  # "corruption" | "wedging"
    levels: dict[str, str]
    kind: str  # "factor" | "interaction"
    failed_with: int
    sessions_with: int
    rate_with: float
    failed_without: int
    sessions_without: int
    rate_without: float
    effect: float
    ci95: Interval
    p_value: float | None  # sessions counted at their design effects (the trials' evidence)
    trial_p_value: float | None
    own: dict[str, Any] | None  # the culprit's own effect, as the verdict JSON gives it
    # outcome classes and wedge log events it comes with: of the sessions and trials
    # ``failed_with`` pools
    outcomes: dict[str, int]
    session_p_value: float | None = None  # the pooled sessions' p: a description only
    # the variants (keys) whose sessions ``failed_with``/``sessions_with`` and ``_without``
    # pool, and their trials
    variants_with: list[str] = field(default_factory=list)
    variants_without: list[str] = field(default_factory=list)
    trials_with: int = 0
    trials_without: int = 0
    # the trials holding its levels that the counts leave out: stopped early (such a trial
    # ends with its failing sessions: no rate), and the rest (mostly errors and timeouts)
    stopped_with: int = 0
    unjudged_with: int = 0


@dataclass(frozen=True)
class Cost:
    trials: int
    restarts: int
    sessions: int
    stopped_early: int
    gpu_s_equivalent: float
    wall_s: float
    unjudged_trials: int = 0


@dataclass(frozen=True)
class VariantRow:
    key: str
    levels: dict[str, str]
    role: str  # "known-good" | "known-bad" | ""
    culprit: bool  # holds the levels of a culprit (of either failure)
    sessions: int
    corrupted: int
    outcomes: dict[str, int]  # sessions per outcome class
    rate: float
    ci95: Interval
    trials: int
    errors: int
    timeouts: int
    wedge_events: int
    throughput: float | None  # output tokens/s, median over its trials
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    itl_p50_ms: float | None
    itl_p99_ms: float | None
    judged: int = 0  # the sessions ``rate`` is of: the verdict's judgeable ones
    failed: int = 0  # of them, those failing: ``rate`` is failed / judged
    unfinished: int = 0  # of ``judged``, sessions a stop left unrun, counted clean (a bound)
    unjudged_trials: int = 0  # trials mostly errors and timeouts: not in ``rate``
    stopped_early: int = 0  # its trials stopped once their answer was certain
    # True when every trial stopped early: a stopped trial ends with its failing sessions
    # (they finish first), so its share of failures is no rate; ``rate`` then counts the
    # sessions it never ran as clean, a lower bound
    lower_bound: bool = False


class InteractionPoint(TypedDict):
    row_level: str
    line_level: str
    rate: float
    ci95: Interval  # a list in the JSON
    sessions: int  # judged
    failed: int  # of them, failing: ``rate`` is failed / sessions


@dataclass(frozen=True)
class Interaction:
    row_factor: str  # on the x axis
    line_factor: str  # one line per level
    points: list[InteractionPoint]


@dataclass(frozen=True)
class TrailRow:
    phase: str
    levels: dict[str, str]
    answer: str
    failures: int | None
    judged: int | None
    trials: int | None
    p_fail: float | None
    p_pass: float | None
    fail_at: float | None  # the thresholds the p-values were compared to; None: no test made
    pass_at: float | None
    unfinished: int = 0  # sessions a stop ended before they finished


@dataclass(frozen=True)
class Excerpt:
    outcome: str
    variant: str  # the variant's key
    trial_id: int
    session_key: str
    turn: int | None
    text: str  # raw, at most MAX_EXCERPT chars: every renderer escapes it
    well_formed: bool | None  # a leak: its markup parses (with a parser, maybe not the server's)
    family: str | None
    expected_canary: str | None
    echoed_canary: str | None
    triage: str | None = None  # a leak's triage line as stored ("parses as deepseekv32, ...")


class SeriesEvent(TypedDict):
    t_s: float | None  # None: the log line carries no time the samples can be matched to
    kind: str
    text: str


@dataclass(frozen=True)
class TrialSeries:
    trial_id: int
    variant: str
    pool: str
    service: str
    running: list[Point]
    queued: list[Point]
    events: list[SeriesEvent]


@dataclass(frozen=True)
class NodeFacts:
    node: str
    host: str | None
    gpu: str | None
    driver: str | None
    server_version: str | None
    server_build: str | None
    commit: str | None


class LoadPlacement(TypedDict):
    node: str
    address: str
    sessions: int


class TrialProvenance(TypedDict):
    id: int
    variant: str
    pool: str
    started_at: str | None
    wall_s: float | None
    load: list[LoadPlacement]  # empty: the pool's own actor ran the sessions
    # every attempt is listed: a failed one ("failed", its class) was retried or skipped, and
    # is not among the trials the verdict and the cost count
    status: str | None  # None: a report written before attempts were told apart
    failure: str | None


@dataclass(frozen=True)
class Provenance:
    campaign_file: str  # secrets redacted
    tool_version: str
    started_at: str | None
    finished_at: str | None
    nodes: list[NodeFacts]
    trials: list[TrialProvenance]


class UnresolvableRow(TypedDict):
    """A variant (a commit) that could not be judged (its deploy failed, or the user's probe
    skipped it: exit 125), skipped like ``git bisect skip``."""

    levels: dict[str, str]
    attempts: int
    error: str  # the last attempt's, raw: every renderer escapes it


@dataclass(frozen=True)
class Report:
    campaign: CampaignFacts
    headline: Headline
    culprits: list[CulpritRow]
    cost: Cost
    variants: list[VariantRow]
    interaction: Interaction | None
    trail: list[TrailRow]
    evidence: list[Excerpt]
    series: list[TrialSeries]
    provenance: Provenance
    commits: dict[str, Any] | None = None
    version: int = REPORT_VERSION
    omitted: dict[str, int] = field(default_factory=dict)  # what the caps left out, counted
    unresolvable: list[UnresolvableRow] = field(default_factory=list)  # the verdict's, in order
    optimize: Search | None = None  # a search's answer (search/model.py); None: no search

    @property
    def family(self) -> str:
        """Which renderers read it (``renderer.FORMATS``): a search's answer reads as one."""
        return "campaign" if self.optimize is None else "search"

    @property
    def aim(self) -> str:
        """What the campaign looks for, as its header says it: a search does not bisect."""
        if self.optimize is not None:
            best = " and ".join(f"{'highest' if direction(m) == 'maximize' else 'lowest'} {m}"
                                for m in self.optimize.objectives)
            return f"searches for the {best} proven free of corruption and wedging"
        if self.commits is not None:
            return f"bisects commits for the first with {self.campaign.target}"
        return f"bisects {self.campaign.target}"

    def to_json(self) -> dict[str, Any]:
        """JSON-safe (``json.dumps`` takes it; non-finite floats become None), versioned."""
        body = _plain(self)
        del body["version"]
        return {"report_version": self.version, **body}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Report:
        """A report back from ``to_json``; refused for another version than this one reads."""
        version = data.get("report_version")
        if version != REPORT_VERSION:
            raise ValueError(f"report version {version!r}: this bisect reads version "
                             f"{REPORT_VERSION}")
        return _report(data)


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _pair(value: Any) -> Interval:
    low, high = value
    return (low, high)


def _report(data: dict[str, Any]) -> Report:
    culprits = [CulpritRow(**{**c, "ci95": _pair(c["ci95"])}) for c in data["culprits"]]
    variants = [VariantRow(**{  # a report saved before ``failed`` was: its rate's count
        "failed": round(v["rate"] * v.get("judged", 0)), **v, "ci95": _pair(v["ci95"])})
        for v in data["variants"]]
    interaction = data["interaction"]
    if interaction is not None:
        interaction = Interaction(
            interaction["row_factor"], interaction["line_factor"],
            [InteractionPoint(row_level=p["row_level"], line_level=p["line_level"],
                              rate=p["rate"], ci95=_pair(p["ci95"]), sessions=p["sessions"],
                              failed=p.get("failed", round(p["rate"] * p["sessions"])))
             for p in interaction["points"]])
    series = [
        TrialSeries(trial_id=s["trial_id"], variant=s["variant"], pool=s["pool"],
                    service=s["service"], running=[_pair(p) for p in s["running"]],
                    queued=[_pair(p) for p in s["queued"]],
                    events=[SeriesEvent(t_s=e["t_s"], kind=e["kind"], text=e["text"])
                            for e in s["events"]])
        for s in data["series"]
    ]
    prov = data["provenance"]
    provenance = Provenance(
        campaign_file=prov["campaign_file"], tool_version=prov["tool_version"],
        started_at=prov["started_at"], finished_at=prov["finished_at"],
        nodes=[NodeFacts(**n) for n in prov["nodes"]],
        trials=[TrialProvenance(
            id=t["id"], variant=t["variant"], pool=t["pool"], started_at=t["started_at"],
            wall_s=t["wall_s"], load=[LoadPlacement(node=g["node"], address=g["address"],
                                                    sessions=g["sessions"]) for g in t["load"]],
            status=t.get("status"), failure=t.get("failure"))
            for t in prov["trials"]])
    return Report(
        campaign=CampaignFacts(**data["campaign"]), headline=Headline(**data["headline"]),
        culprits=culprits, cost=Cost(**data["cost"]), variants=variants,
        interaction=interaction, trail=[TrailRow(**t) for t in data["trail"]],
        evidence=[Excerpt(**e) for e in data["evidence"]], series=series,
        provenance=provenance, commits=data.get("commits"), version=data["report_version"],
        omitted=dict(data.get("omitted") or {}),
        unresolvable=[UnresolvableRow(levels=dict(u["levels"]), attempts=u["attempts"],
                                      error=u["error"]) for u in data.get("unresolvable") or []],
        optimize=search_from_json(data.get("optimize")))
