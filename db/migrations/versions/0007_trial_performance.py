"""trial.performance_json: what each trial's workload measured (throughput, goodput, latency
percentiles), a stored observation for the search and the sweeps

One JSON column, not a table: the figures are a dozen numbers always read with their trial, and
a figure added later needs no migration. A trial stored before 0007 keeps NULL (none measured).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("trial", sa.Column("performance_json", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("trial", "performance_json")
