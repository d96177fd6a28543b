"""trial.seed: 64-bit on PostgreSQL (workload.seed * 1_000_003 overflows a 32-bit INTEGER)

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# SQLite's INTEGER is already 64-bit, and altering a column there needs batch mode (a table copy
# the foreign keys forbid, see 0002): nothing to do on SQLite.


def upgrade() -> None:
    if op.get_context().dialect.name != "sqlite":
        op.alter_column("trial", "seed", type_=sa.BigInteger(), existing_type=sa.Integer(),
                        existing_nullable=False)


def downgrade() -> None:
    # Fails on PostgreSQL if a stored seed no longer fits 32 bits: the data is kept, not cut.
    if op.get_context().dialect.name != "sqlite":
        op.alter_column("trial", "seed", type_=sa.Integer(), existing_type=sa.BigInteger(),
                        existing_nullable=False)
