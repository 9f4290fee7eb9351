"""The Alembic environment of the migration tests: the plainest online one."""

from __future__ import annotations

from alembic import context
from sqlalchemy import engine_from_config, pool

config = context.config
engine = engine_from_config(
    config.get_section(config.config_ini_section) or {},
    prefix="sqlalchemy.",
    poolclass=pool.NullPool,
)
with engine.connect() as connection:
    context.configure(connection=connection, target_metadata=None)
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
