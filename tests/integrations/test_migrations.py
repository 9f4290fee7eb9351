"""pigeon's tables come from the application's own migrations: Alembic with pigeon's
branch in its version locations, or ``pigeon migrate --db URL``; either, run again,
changes nothing, and the rest of pigeon (``open_server_db``) opens the database."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, inspect
from typer.testing import CliRunner

from pigeon.cli import app
from pigeon.integrations.fastapi.migrations import VERSIONS
from pigeon.storage.server import open_server_db
from tests.integrations.orders_app import sqlalchemy_url

APP_REVISION = """
from alembic import op
import sqlalchemy as sa

revision = "app_0001"
down_revision = None
branch_labels = ("app",)
depends_on = None


def upgrade():
    op.create_table("orders", sa.Column("id", sa.Integer, primary_key=True))


def downgrade():
    op.drop_table("orders")
"""


def run_cli(args: list[str]) -> Any:
    return CliRunner().invoke(app, args)


def tables(url: str) -> set[str]:
    engine = create_engine(sqlalchemy_url(url))
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def alembic_config(tmp_path: Path, url: str) -> Config:
    versions = tmp_path / "versions"
    versions.mkdir(exist_ok=True)
    (versions / "app_0001.py").write_text(APP_REVISION)
    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent / "alembic_env"))
    config.set_main_option("path_separator", "space")
    config.set_main_option("version_locations", f"{versions} {VERSIONS}")
    config.set_main_option("sqlalchemy.url", sqlalchemy_url(url))
    return config


def test_alembic_upgrade_heads_makes_the_app_and_pigeon_tables(
    tmp_path: Path, server_db_url: str
) -> None:
    config = alembic_config(tmp_path, server_db_url)
    command.upgrade(config, "heads")
    made = tables(server_db_url)
    assert {"orders", "pigeon_idempotency_claims", "pigeon_jobs", "pigeon_schema"} <= made
    command.upgrade(config, "heads")  # again: nothing to do
    assert tables(server_db_url) == made
    open_server_db(server_db_url).close()  # the rest of pigeon takes the database as it is


def test_pigeon_migrate_makes_the_tables_beside_the_apps(
    tmp_path: Path, server_db_url: str
) -> None:
    engine = create_engine(sqlalchemy_url(server_db_url))
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE orders (id integer PRIMARY KEY)")
    engine.dispose()
    for _ in range(2):
        done = run_cli(["migrate", "--db", server_db_url])
        assert done.exit_code == 0, done.output
        assert "schema version" in done.output
    assert {"orders", "pigeon_idempotency_claims", "pigeon_outbox"} <= tables(server_db_url)
    open_server_db(server_db_url).close()


@pytest.mark.parametrize("url", ["postgresql://nobody@127.0.0.1:1/none"])
def test_pigeon_migrate_says_in_one_line_what_failed(url: str) -> None:
    done = run_cli(["migrate", "--db", url])
    assert done.exit_code == 1 and "Traceback" not in done.output


def test_the_fastapi_examples_migration_run_by_two_at_once_makes_each_table_once(
    server_db_url: str,
) -> None:
    # What `pigeon serve --workers 2` does on a fresh database: each process migrates as
    # it starts. With the app's tables made before pigeon's lock was taken, both could
    # find a table missing, and PostgreSQL refused the second CREATE in all of 10 tries.
    from examples.fastapi_orders.app import migrate
    from examples.fastapi_orders.models import Base

    engines = [create_engine(sqlalchemy_url(server_db_url)) for _ in range(2)]
    together = threading.Barrier(2)
    failed: list[BaseException] = []

    def run(engine: Engine) -> None:
        together.wait()
        try:
            migrate(engine)
        except Exception as exc:  # what the test looks for
            failed.append(exc)

    threads = [threading.Thread(target=run, args=(e,)) for e in engines]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        for engine in engines:
            engine.dispose()
    assert failed == []
    assert set(Base.metadata.tables) <= tables(server_db_url)
    open_server_db(server_db_url).close()  # pigeon's tables, at the version it knows
