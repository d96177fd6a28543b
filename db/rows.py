"""Rows of the database turned into the frozen records of ``db.records``: ORM objects, or the
mappings of plain rows (a Core select of a table's columns). Nothing here opens a session."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import fields
from typing import Any, TypeVar

from db.models import Campaign, Trial, Variant
from db.records import CampaignRecord, MetricRecord, StepRecord, TrialRecord, VariantRecord

R = TypeVar("R")


def campaign_record(row: Campaign) -> CampaignRecord:
    return record(CampaignRecord, row, spec=json.loads(row.spec_json))


def variant_record(row: Variant) -> VariantRecord:
    return record(VariantRecord, row, levels=json.loads(row.levels_json))


def trial_record(row: Trial, levels_json: str, counts: dict[str, int],
                 events: dict[str, int], failed_step: str | None) -> TrialRecord:
    performance = None if row.performance_json is None else json.loads(row.performance_json)
    return record(TrialRecord, row, levels=json.loads(levels_json), counts=counts,
                  events=events, performance=performance, failed_step=failed_step)


def failed_steps(rows: Any) -> dict[int, str]:
    """The first failed step of each trial, from (trial id, step name) rows by position."""
    first: dict[int, str] = {}
    for trial_id, name in rows:
        first.setdefault(trial_id, name)
    return first


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinite number made None: JSON has no such numbers (and a
    figure that is not one is none)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value


_FIELDS: dict[type[Any], tuple[str, ...]] = {}  # a record's field names, looked up once


def _field_names(cls: type[Any]) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in fields(cls))
    return names


def record(cls: type[R], row: Any, **computed: Any) -> R:
    """The frozen record of a row whose columns bear the record's field names: an ORM object,
    or a plain row's mapping (a Row's attributes are not all its columns: ``Row.t``)."""
    names = [name for name in _field_names(cls) if name not in computed]
    if isinstance(row, Mapping):
        return cls(**{name: row[name] for name in names}, **computed)
    return cls(**{name: getattr(row, name) for name in names}, **computed)


def metric_record(row: Mapping[str, Any]) -> MetricRecord:
    return record(MetricRecord, row, labels=json.loads(row["labels_json"]))


def step_record(row: Mapping[str, Any]) -> StepRecord:
    return record(StepRecord, row, details=json.loads(row["details_json"]))
