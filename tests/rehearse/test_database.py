"""The rehearsal's database: made and dropped when it did not exist, refused when it holds
data (naming what), used as is with --i-know."""

from __future__ import annotations

from pathlib import Path

import pytest

from pigeon.rehearse.database import DatabaseHoldsData, Throwaway
from pigeon.storage import scratch
from pigeon.storage.server import open_server_db


def _fill(url: str) -> None:
    db = open_server_db(url)
    try:
        with db.transaction() as tx:
            tx.sql("CREATE TABLE orders (id INTEGER)")
            tx.sql("INSERT INTO orders (id) VALUES (1)")
            tx.sql("INSERT INTO orders (id) VALUES (2)")
    finally:
        db.close()


def _sibling(pg_url: str, name: str) -> str:
    return pg_url.rsplit("/", 1)[0] + "/" + name


def test_no_database_given_is_a_temporary_file_gone_at_the_end() -> None:
    with Throwaway(None) as url:
        assert url.endswith("rehearsal.db")
        _fill(url)
    assert not Path(url).exists()


def test_a_new_sqlite_path_is_made_and_removed(tmp_path: Path) -> None:
    url = str(tmp_path / "r.db")
    with Throwaway(url) as used:
        assert used == url and Path(url).exists()
        _fill(url)
    assert list(tmp_path.iterdir()) == []


def test_a_file_holding_data_is_refused_naming_its_tables(tmp_path: Path) -> None:
    url = str(tmp_path / "prod.db")
    _fill(url)
    with pytest.raises(DatabaseHoldsData, match=r"holds data: orders \(2 rows\).*--i-know"):
        Throwaway(url).__enter__()
    with Throwaway(url, i_know=True) as used:
        assert used == url
    assert scratch.holdings(url)["orders"] == 2  # used, and left as it was


def test_a_file_that_is_no_database_is_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("my notes")
    with pytest.raises(DatabaseHoldsData, match="not a SQLite database"):
        Throwaway(str(path)).__enter__()
    assert path.read_text() == "my notes"


def test_an_empty_pigeon_database_is_used_and_left(tmp_path: Path) -> None:
    url = str(tmp_path / "empty.db")
    open_server_db(url).close()  # migrated: only the schema's bookkeeping has rows
    with Throwaway(url) as used:
        assert used == url
    assert Path(url).exists()


@pytest.mark.postgres
def test_a_new_postgres_database_is_made_and_dropped(pg_url: str) -> None:
    url = _sibling(pg_url, pg_url.rsplit("/", 1)[1] + "_rh")
    with Throwaway(url) as used:
        assert scratch.exists(used)
        _fill(used)
    assert not scratch.exists(url)


@pytest.mark.postgres
def test_a_postgres_database_holding_data_is_refused(pg_url: str) -> None:
    _fill(pg_url)
    with pytest.raises(DatabaseHoldsData, match=r"orders \(2 rows\)"):
        Throwaway(pg_url).__enter__()
    assert scratch.holdings(pg_url)["orders"] == 2
