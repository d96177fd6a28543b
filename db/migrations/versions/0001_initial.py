"""initial schema: campaign, variant, trial, session, metric_sample, log_event

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _id() -> sa.Column[int]:
    return sa.Column("id", sa.Integer(), nullable=False)


def _trial_fk(table: str) -> sa.Column[int]:
    return sa.Column(
        "trial_id",
        sa.Integer(),
        sa.ForeignKey("trial.id", name=f"fk_{table}_trial_id_trial"),
        nullable=False,
    )


def upgrade() -> None:
    op.create_table(
        "campaign",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("spec_json", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_campaign"),
    )
    op.create_table(
        "variant",
        _id(),
        sa.Column(
            "campaign_id",
            sa.String(),
            sa.ForeignKey("campaign.id", name="fk_variant_campaign_id_campaign"),
            nullable=False,
        ),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("levels_json", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_variant"),
        sa.UniqueConstraint("campaign_id", "key", name="uq_variant_campaign_id_key"),
    )
    op.create_table(
        "trial",
        _id(),
        sa.Column(
            "campaign_id",
            sa.String(),
            sa.ForeignKey("campaign.id", name="fk_trial_campaign_id_campaign"),
            nullable=False,
        ),
        sa.Column(
            "variant_id",
            sa.Integer(),
            sa.ForeignKey("variant.id", name="fk_trial_variant_id_variant"),
            nullable=False,
        ),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("pool", sa.String(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("wall_s", sa.Double(), nullable=True),
        sa.Column("restart_s", sa.Double(), nullable=True),
        sa.Column("workload_s", sa.Double(), nullable=True),
        sa.Column("restarts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_trial"),
    )
    op.create_index("ix_trial_campaign_id_seq", "trial", ["campaign_id", "seq"])
    op.create_index("ix_trial_variant_id", "trial", ["variant_id"])
    op.create_table(
        "session",
        _id(),
        _trial_fk("session"),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("outcome", sa.String(), nullable=False),
        sa.Column("turns", sa.Integer(), nullable=False),
        sa.Column("first_bad_turn", sa.Integer(), nullable=True),
        sa.Column("evidence", sa.Text(), nullable=True),
        sa.Column("latency_s", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_session"),
        sa.UniqueConstraint("trial_id", "idx", name="uq_session_trial_id_idx"),
    )
    op.create_index("ix_session_trial_id", "session", ["trial_id"])
    op.create_table(
        "metric_sample",
        _id(),
        _trial_fk("metric_sample"),
        sa.Column("service", sa.String(), nullable=False),
        sa.Column("t", sa.Double(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("labels_json", sa.Text(), nullable=False),
        sa.Column("value", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_metric_sample"),
    )
    op.create_index("ix_metric_sample_trial_id", "metric_sample", ["trial_id"])
    op.create_table(
        "log_event",
        _id(),
        _trial_fk("log_event"),
        sa.Column("service", sa.String(), nullable=False),
        sa.Column("line_no", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_log_event"),
    )
    op.create_index("ix_log_event_trial_id", "log_event", ["trial_id"])


def downgrade() -> None:
    for table in ("log_event", "metric_sample", "session"):
        op.drop_index(f"ix_{table}_trial_id", table_name=table)
        op.drop_table(table)
    op.drop_index("ix_trial_variant_id", table_name="trial")
    op.drop_index("ix_trial_campaign_id_seq", table_name="trial")
    op.drop_table("trial")
    op.drop_table("variant")
    op.drop_table("campaign")
