"""The sweep report model: everything the report of one run of a regression sweep shows, as
frozen values (built from the store by ``sweep.build.build_sweep_report``; rendered by its
format's module, ``renderer.render``). ``SweepReport.to_json`` is what ``--format json``
prints, versioned; ``SweepReport.from_json`` reads it back. Pure data: no store, no templates.

A run's answer comes first (its status and what `bisect sweep` exited with), then each variant
against the baseline run metric by metric, what changed since the baseline, the hunt for the
commit, the decision trail, and the sweep's history run by run.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict

SWEEP_REPORT_VERSION = 1

Interval = tuple[float | None, float | None]  # None: unbounded (too few trials on a side)
Counts = tuple[int, int]  # (failing, judged) sessions


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RunFacts(_Frozen):
    """One run of the sweep as the store holds it (times as ISO text, UTC)."""

    id: int
    seq: int  # "run N" everywhere: its number within its sweep
    status: str  # running | clean | regression | inconclusive | failed | skipped | missed | ...
    trigger: str
    schedule: str | None
    started_at: str | None
    finished_at: str | None
    accepted: bool
    accepted_at: str | None
    campaign_id: str | None
    baseline_run_id: int | None
    reason: str | None
    slot: str | None  # a missed run: the time it was scheduled for


class Answer(_Frozen):
    """The run's answer, said first."""

    status: str  # the run's status
    title: str  # "Clean", "REGRESSION confirmed", "Inconclusive", "Skipped", ...
    sentence: str
    exit_code: int | None  # what `bisect sweep` exits with for this status; None: none
    exit_meaning: str
    reason: str


class Comparison(_Frozen):
    """One metric of one variant against the baseline (or, confirming, against the baseline's
    build run again): ``baseline`` and ``current`` are rates (fractions) for a binary metric
    and geometric means over trials (tokens/s, ms) for a continuous one; ``change`` is in rate
    points for a binary metric, relative for a continuous one (0.2: 20% worse), ``interval``
    its two-sided 1 - 2 alpha interval (each side errs at most alpha, as the decision)."""

    answer: str  # different | same | unknown
    baseline: float | None
    current: float | None
    change: float | None
    interval: Interval | None
    p_worse: float | None
    p_same: float | None
    min_effect: float | None
    alpha: float | None
    # the levels DIFFERENT and SAME were held to where not alpha (a share of it at each look)
    alpha_worse: float | None = None
    alpha_same: float | None = None
    counts_now: Counts | None = None  # binary metrics
    counts_baseline: Counts | None = None
    values_now: list[float] = []  # continuous metrics: one value a trial
    values_baseline: list[float] = []


class MetricRow(_Frozen):
    metric: str  # corruption | wedging | throughput | p99_latency
    binary: bool
    watched: bool  # the sweep has a threshold for it
    now: float | None  # measured on this run's trials of the variant (shown without a baseline)
    detection: Comparison | None  # None: not compared (no baseline, not measured, not watched)
    confirmation: Comparison | None  # the fresh trials' comparison of a suspect
    suspected: bool  # found different: confirmed on fresh trials before an alert
    regressed: bool  # the fresh trials showed it again: a regression


class VariantResult(_Frozen):
    name: str
    levels: dict[str, str]
    state: str  # clean | regression | unconfirmed | inconclusive | new | undeployable | ...
    state_text: str  # the state in words
    trials: int  # the trials the detection used
    confirm_trials: int  # fresh trials of a suspect
    metrics: list[MetricRow]


class Commit(_Frozen):
    sha: str
    subject: str | None = None  # as git gave it (raw: every renderer escapes it)
    author: str | None = None


class FactChange(_Frozen):
    node: str
    fact: str
    baseline: str | None
    now: str | None


class LevelsChange(_Frozen):
    variant: str
    baseline: dict[str, str] | None  # None: the variant is new since the baseline
    now: dict[str, str]


class SettingChange(_Frozen):
    """A service's command line and environment, or a factor level's settings, that the sweep
    file sets differently since the baseline (shown as compact JSON; None: absent then/now)."""

    what: str  # "service NAME" or "level FACTOR=LEVEL"
    baseline: str | None
    now: str | None


class Hunt(_Frozen):
    """The hunt for the commit a regression came with (an ordinary commits campaign), or why
    none ran."""

    status: str  # the hunt campaign's verdict (culprit, inconclusive, ...) or "none"
    reason: str
    campaign_id: str | None
    variant: str | None
    metric: str | None
    good: Commit | None
    bad: Commit | None
    first_bad: list[Commit]
    posterior: float | None
    recomputed: bool  # first_bad and posterior from the hunt's stored trials, not as stored


class TrailRow(_Frozen):
    phase: str  # compare | confirm
    variant: str
    metric: str
    trials: int | None
    comparison: Comparison


class Measured(_Frozen):
    """One variant in one run, measured on the run's own trials of it (its current build)."""

    trials: int
    corrupted: int
    judged: int  # sessions that reached a verdict of their own (corruption's denominator)
    wedged: int  # errors and timeouts
    sessions: int  # every session (wedging's denominator)
    throughput: float | None  # output tokens/s, geometric mean over its trials (as compared)
    p99_ms: float | None  # p99 end-to-end latency (ms), geometric mean over its trials

    @property
    def corruption(self) -> float | None:
        return self.corrupted / self.judged if self.judged else None

    @property
    def wedging(self) -> float | None:
        return self.wedged / self.sessions if self.sessions else None

    def of(self, metric: str) -> float | None:
        """The figure a metric compares: a rate, tokens/s or ms."""
        return {"corruption": self.corruption, "wedging": self.wedging,
                "throughput": self.throughput, "p99_latency": self.p99_ms}[metric]


class HistoryRun(_Frozen):
    run: RunFacts
    variants: dict[str, Measured]  # by variant name; empty: nothing measured (skipped, missed)
    baseline: bool  # the run the reported run was compared with
    current: bool  # the reported run itself
    note: str = ""  # why nothing was measured


class SweepReport(_Frozen):
    sweep: str
    run: RunFacts
    baseline: RunFacts | None  # the run it was compared with
    answer: Answer
    watched: dict[str, float | None]  # each metric's threshold (None: not watched)
    variants: list[VariantResult]
    commit_baseline: Commit | None  # the source tree's commit at the baseline run ...
    commit_now: Commit | None  # ... and at this run
    changed_facts: list[FactChange]
    changed_variants: list[LevelsChange]
    changed_settings: list[SettingChange] = []
    hunt: Hunt | None
    trail: list[TrailRow]
    history: list[HistoryRun]  # oldest first, every run: skipped and missed ones included
    recomputed: bool  # the comparisons from the run's stored trials (else as stored at its end)
    tool_version: str
    notes: list[str] = []
    omitted_runs: int = 0  # older runs the history leaves out
    version: int = SWEEP_REPORT_VERSION

    @property
    def family(self) -> str:
        return "sweep"  # which renderers read it (renderer.FORMATS)

    def to_json(self) -> dict[str, Any]:
        """JSON-safe (non-finite floats become null), versioned."""
        body: dict[str, Any] = json.loads(self.model_dump_json())
        del body["version"]
        return {"sweep_report_version": self.version, **body}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SweepReport:
        """A report back from ``to_json``; refused for another version than this one reads."""
        version = data.get("sweep_report_version")
        if version != SWEEP_REPORT_VERSION:
            raise ValueError(f"sweep report version {version!r}: this bisect reads version "
                             f"{SWEEP_REPORT_VERSION}")
        body = {k: v for k, v in data.items() if k != "sweep_report_version"}
        return cls.model_validate({**body, "version": version})
