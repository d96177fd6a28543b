"""trial.failure (a failed trial's class, by type) and trial_step (each step of each trial)

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Before 0006 the class was the error's prefix; the prefix stays in the text (people read it).
_INFRA_PREFIX = "infrastructure error: "


def upgrade() -> None:
    op.add_column("trial", sa.Column("failure", sa.String(), nullable=True))
    trial = sa.table("trial", sa.column("status", sa.String()), sa.column("error", sa.Text()),
                     sa.column("failure", sa.String()))
    infra = sa.func.substr(trial.c.error, 1, len(_INFRA_PREFIX)) == _INFRA_PREFIX
    op.execute(trial.update().where(trial.c.status == "failed").values(
        failure=sa.case((infra, "infrastructure"), else_="variant")))
    op.create_table(
        "trial_step",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("service", sa.String(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("duration_s", sa.Double(), nullable=False),
        sa.Column("outcome", sa.String(), nullable=False),
        sa.Column("details_json", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["trial_id"], ["trial.id"], name="fk_trial_step_trial_id_trial"),
        sa.PrimaryKeyConstraint("id", name="pk_trial_step"),
        sa.UniqueConstraint("trial_id", "position", name="uq_trial_step_trial_id_position"),
    )
    op.create_index("ix_trial_step_trial_id", "trial_step", ["trial_id"])


def downgrade() -> None:
    op.drop_index("ix_trial_step_trial_id", table_name="trial_step")
    op.drop_table("trial_step")
    # An older driver reads the class from the prefix: infrastructure errors must carry it.
    trial = sa.table("trial", sa.column("error", sa.Text()), sa.column("failure", sa.String()))
    op.execute(trial.update()
               .where(trial.c.failure == "infrastructure",
                      sa.func.coalesce(sa.func.substr(trial.c.error, 1, len(_INFRA_PREFIX)), "")
                      != _INFRA_PREFIX)
               .values(error=_INFRA_PREFIX + sa.func.coalesce(trial.c.error, "")))
    op.drop_column("trial", "failure")
