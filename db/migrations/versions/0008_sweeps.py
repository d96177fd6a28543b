"""sweep, sweep_run, sweep_hunt, sweep_lock: scheduled regression sweeps, each run of one linked to
an ordinary campaign, the baseline it was compared with, the hunts it started, and the lock that
keeps two runs of one sweep from running at once

The lock is a row, not a file: inserting it fails on its primary key while another run holds the
sweep, so several orchestrators on one store (PostgreSQL, or SQLite on one machine) take it
atomically. Results and node facts are JSON columns, as 0007's figures: read whole with their run,
and a figure added later needs no migration. New tables only: a store from before 0008 keeps
every campaign as it was.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _fk(column: str, table: str, target: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint([column], [target],
                                   name=f"fk_{table}_{column}_{target.split('.')[0]}")


def upgrade() -> None:
    op.create_table(
        "sweep",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_sweep"),
        sa.UniqueConstraint("name", name="uq_sweep_name"),
    )
    op.create_table(
        "sweep_run",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("sweep_id", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("campaign_id", sa.String(), nullable=True),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("trigger", sa.String(), nullable=False),
        sa.Column("schedule", sa.String(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("accepted", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("accepted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("baseline_run_id", sa.Integer(), nullable=True),
        sa.Column("result_json", sa.Text(), nullable=True),
        sa.Column("facts_json", sa.Text(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("slot", sa.DateTime(timezone=True), nullable=True),
        _fk("sweep_id", "sweep_run", "sweep.id"),
        _fk("campaign_id", "sweep_run", "campaign.id"),
        _fk("baseline_run_id", "sweep_run", "sweep_run.id"),
        sa.PrimaryKeyConstraint("id", name="pk_sweep_run"),
        sa.UniqueConstraint("sweep_id", "seq", name="uq_sweep_run_sweep_id_seq"),
    )
    op.create_index("ix_sweep_run_campaign_id", "sweep_run", ["campaign_id"])
    op.create_table(
        "sweep_hunt",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("campaign_id", sa.String(), nullable=False),
        sa.Column("good", sa.Text(), nullable=False),
        sa.Column("bad", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        _fk("run_id", "sweep_hunt", "sweep_run.id"),
        _fk("campaign_id", "sweep_hunt", "campaign.id"),
        sa.PrimaryKeyConstraint("id", name="pk_sweep_hunt"),
    )
    op.create_index("ix_sweep_hunt_run_id", "sweep_hunt", ["run_id"])
    op.create_table(
        "sweep_lock",
        sa.Column("sweep_id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(), nullable=False),
        sa.Column("boot_id", sa.String(), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=False),
        # clock ticks since boot: past 2**31 after 248 days up at 100 Hz (SQLite's is 64-bit)
        sa.Column("pid_start", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  nullable=True),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        _fk("sweep_id", "sweep_lock", "sweep.id"),
        _fk("run_id", "sweep_lock", "sweep_run.id"),
        sa.PrimaryKeyConstraint("sweep_id", name="pk_sweep_lock"),
    )


def downgrade() -> None:
    # The sweeps' rows go with their tables; the campaigns their runs made stay.
    op.drop_table("sweep_lock")
    op.drop_index("ix_sweep_hunt_run_id", table_name="sweep_hunt")
    op.drop_table("sweep_hunt")
    op.drop_index("ix_sweep_run_campaign_id", table_name="sweep_run")
    op.drop_table("sweep_run")
    op.drop_table("sweep")
