"""The store: SQLAlchemy models, migrations shipped in the package, and frozen records.

``Store`` is imported when first asked for: the records are what a pool's Ray actor needs, and
SQLAlchemy with Alembic would add half a second to every actor's start (BENCHMARKS, "Sweeps on
twins")."""

from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from db.store import Store


def __getattr__(name: str) -> Any:
    if name == "Store":
        from db.store import Store

        return Store
    raise AttributeError(f"module 'db' has no attribute {name!r}")


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
