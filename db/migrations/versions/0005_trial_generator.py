"""trial_generator: where each trial's load generators ran and their share of its sessions

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "trial_generator",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.String(), nullable=False),
        sa.Column("address", sa.String(), nullable=False),
        sa.Column("sessions", sa.Integer(), nullable=False),
        sa.Column("finished", sa.Integer(), nullable=False),
        sa.Column("stopped", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["trial_id"], ["trial.id"],
                                name="fk_trial_generator_trial_id_trial"),
        sa.PrimaryKeyConstraint("id", name="pk_trial_generator"),
        sa.UniqueConstraint("trial_id", "position",
                            name="uq_trial_generator_trial_id_position"),
    )
    op.create_index("ix_trial_generator_trial_id", "trial_generator", ["trial_id"])


def downgrade() -> None:
    op.drop_index("ix_trial_generator_trial_id", table_name="trial_generator")
    op.drop_table("trial_generator")
