"""node_lock: which campaign holds which node, beside the lock file on the node itself

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "node_lock",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("campaign_id", sa.String(), nullable=False),
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("released_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["campaign_id"], ["campaign.id"],
                                name="fk_node_lock_campaign_id_campaign"),
        sa.PrimaryKeyConstraint("id", name="pk_node_lock"),
    )
    op.create_index("ix_node_lock_campaign_id", "node_lock", ["campaign_id"])


def downgrade() -> None:
    op.drop_index("ix_node_lock_campaign_id", table_name="node_lock")
    op.drop_table("node_lock")
