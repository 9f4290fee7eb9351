"""pigeon's tables (pigeon_*): claims, records, jobs, outbox, effects.

Revision ID: pigeon_0001
Revises:
"""

from __future__ import annotations

from alembic import op

from pigeon.integrations.fastapi.migrations import migrate_tables

revision = "pigeon_0001"
down_revision = None
branch_labels = ("pigeon",)
depends_on = None


def upgrade() -> None:
    migrate_tables(op.get_bind())


def downgrade() -> None:
    raise NotImplementedError("pigeon's tables hold claims and jobs: drop them by hand")
