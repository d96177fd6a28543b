"""trial.stopped_early: a sequential test ended the trial's workload before its planned end

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Plain ALTER TABLE, not batch mode: on SQLite batch mode copies and drops the table, which the
# foreign keys of session, metric_sample and log_event forbid.


def upgrade() -> None:
    op.add_column(
        "trial",
        sa.Column("stopped_early", sa.Boolean(), nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    op.drop_column("trial", "stopped_early")
