"""The store: SQLAlchemy models, migrations shipped in the package, and frozen records."""

from db.errors import NotFound, StoreError
from db.records import (
    CampaignRecord,
    GeneratorRecord,
    GeneratorRow,
    LogRecord,
    LogRow,
    MetricRecord,
    MetricRow,
    SessionRecord,
    SessionRow,
    StepRecord,
    StepRow,
    TrialRecord,
    TrialTiming,
    VariantRecord,
    variant_key,
)
from db.store import Store

__all__ = [
    "CampaignRecord",
    "GeneratorRecord",
    "GeneratorRow",
    "LogRecord",
    "LogRow",
    "MetricRecord",
    "MetricRow",
    "NotFound",
    "SessionRecord",
    "SessionRow",
    "StepRecord",
    "StepRow",
    "Store",
    "StoreError",
    "TrialRecord",
    "TrialTiming",
    "VariantRecord",
    "variant_key",
]
