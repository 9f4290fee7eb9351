"""`pigeon queue ...` on real queue files."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pigeon.cli import app
from pigeon.core.operation import OpStatus
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue

runner = CliRunner()


@pytest.fixture
def queue_file(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    path = tmp_path / "queue.db"
    with OfflineQueue(path) as queue:
        ids = {
            "live": queue.enqueue("create", "note:1", {"title": "groceries"}).id,
            "dead": queue.enqueue("update", "note:2", {"title": "x"}).id,
        }
        queue.next_batch()
        queue.mark_failed(ids["dead"], "422 unprocessable: title too short", kind="permanent")
        queue.release(ids["live"])
    return path, ids


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["queue", *args], env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_list_show_stats(queue_file: tuple[Path, dict[str, str]]) -> None:
    path, ids = queue_file
    code, output = run("list", "-f", str(path))
    assert code == 0 and ids["live"] in output and "note:1" in output
    assert ids["dead"] not in output
    code, output = run("list", "-f", str(path), "--status", "dead")
    assert code == 0 and ids["dead"] in output
    code, output = run("show", "-f", str(path), ids["dead"])
    assert code == 0 and "title too short" in output and "permanent" in output
    code, output = run("stats", "-f", str(path))
    assert code == 0 and "dead letters" in output and "depth" in output


def test_dead_retry_discard(queue_file: tuple[Path, dict[str, str]]) -> None:
    path, ids = queue_file
    code, output = run("dead", "-f", str(path))
    assert code == 0 and ids["dead"] in output
    code, output = run("retry", "-f", str(path), ids["dead"])
    assert code == 0 and "pending again" in output
    with OfflineQueue(path) as queue:
        assert queue.get(ids["dead"]).status is OpStatus.PENDING
        [op] = [o for o in queue.next_batch() if o.id == ids["dead"]]
        queue.mark_failed(op.id, "still 422", kind="permanent")
    code, output = run("discard", "-f", str(path), ids["dead"])
    assert code == 0 and "discarded" in output
    code, output = run("discard", "-f", str(path), ids["dead"])
    assert code == 1 and "no operation" in output
    code, output = run("retry", "-f", str(path), ids["live"])
    assert code == 1 and "not dead" in output


def test_the_queue_file_can_come_from_the_environment(
    queue_file: tuple[Path, dict[str, str]],
) -> None:
    path, _ = queue_file
    env = {"PIGEON_QUEUE": str(path), "COLUMNS": "200"}
    result = runner.invoke(app, ["queue", "list"], env=env)
    assert result.exit_code == 0 and "note:1" in result.output


def test_missing_and_foreign_files_fail_clearly(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    code, output = run("stats", "-f", str(missing))
    assert code == 1 and "no such file" in output
    assert not missing.exists()
    foreign = tmp_path / "foreign.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE t (x)")
    conn.close()
    code, output = run("list", "-f", str(foreign))
    assert code == 1 and "not a pigeon edge database" in output
    text = tmp_path / "notes.txt"
    text.write_text("hello " * 200)
    code, output = run("list", "-f", str(text))
    assert code == 1 and "not a SQLite database" in output


def test_unknown_status_is_refused(queue_file: tuple[Path, dict[str, str]]) -> None:
    path, _ = queue_file
    code, output = run("list", "-f", str(path), "--status", "lost")
    assert code == 2 and "Invalid value for '--status'" in output and "'lost'" in output


def test_a_status_never_stored_is_refused(queue_file: tuple[Path, dict[str, str]]) -> None:
    path, _ = queue_file
    code, output = run("list", "-f", str(path), "--status", "coalesced")
    assert code == 2 and "Invalid value for '--status'" in output


def test_every_stored_status_is_offered() -> None:
    from typing import get_args

    from pigeon.cli.queue_cmd import StoredStatus

    assert set(get_args(StoredStatus)) == {s.value for s in OpStatus} - {"coalesced"}


@pytest.mark.parametrize("status", [[], ["--status", "pending"]])
def test_a_negative_limit_is_refused(
    queue_file: tuple[Path, dict[str, str]], status: list[str]
) -> None:
    path, _ = queue_file
    code, output = run("list", "-f", str(path), "--limit", "-2", *status)
    assert code == 2 and "Invalid value for '--limit'" in output


def test_limit_zero_lists_nothing(queue_file: tuple[Path, dict[str, str]]) -> None:
    path, ids = queue_file
    code, output = run("list", "-f", str(path), "--limit", "0")
    assert code == 0 and ": 0 operation(s)" in " ".join(output.split())  # title may wrap
    assert ids["live"] not in output


def test_stats_shows_an_authorisation_pause(queue_file: tuple[Path, dict[str, str]]) -> None:
    path, _ = queue_file
    with OfflineQueue(path) as queue:
        queue.pause("authorisation needed: 401 from the server")
    code, output = run("stats", "-f", str(path))
    assert code == 0 and "authorisation needed: 401" in output
    with OfflineQueue(path) as queue:
        queue.resume()
    code, output = run("stats", "-f", str(path))
    assert code == 0 and "authorisation needed" not in output


def test_purge_forgets_only_old_deliveries(queue_file: tuple[Path, dict[str, str]]) -> None:
    path, ids = queue_file
    two_days_ago = time.time() - 2 * 86400
    with OfflineQueue(path, QueueOptions(keep_delivered=None), now=lambda: two_days_ago) as queue:
        old = queue.enqueue("create", "note:3", {"title": "old"}).id
        [op] = [o for o in queue.next_batch() if o.id == old]
        queue.mark_delivered(op.id)
    code, output = run("purge", "-f", str(path), "--older-than", "90000")
    assert code == 0 and "purged 1 delivered operations older than 1.0d" in output
    with OfflineQueue(path) as queue:
        assert queue.stats().delivered == 0
        assert queue.get(ids["live"]).status is OpStatus.PENDING  # never purged
        assert queue.get(ids["dead"]).status is OpStatus.DEAD
    code, output = run("purge", "-f", str(path), "--older-than", "-1")
    assert code == 2 and "'--older-than': -1.0 is not in the range x>=0" in output, output


def test_an_older_schema_is_refused_and_not_upgraded(
    queue_file: tuple[Path, dict[str, str]],
) -> None:
    # Looking at a queue must not move its file past the pigeon of the app that owns it
    # (that app would then refuse it as "newer than this pigeon knows").
    path, _ = queue_file
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE operations DROP COLUMN owner")  # what schema 5 added
    conn.execute("ALTER TABLE edge_state DROP COLUMN owners_issued")  # and schema 6
    conn.execute("PRAGMA user_version = 3")  # as a file of an older schema
    conn.close()
    before = path.read_bytes()
    code, output = run("stats", "-f", str(path))
    assert code == 1 and "schema version 3, older than this pigeon's" in output
    assert path.read_bytes() == before
    with OfflineQueue(path) as queue:  # the app itself upgrades it
        assert queue.stats().depth == 1


def test_a_file_sqlite_cannot_write_is_a_message_not_a_traceback(
    queue_file: tuple[Path, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A read-only file (root, who runs these tests, could write it anyway): opening a
    # queue writes its state row, and SQLite refuses that with OperationalError.
    import pigeon.cli.queue_cmd as queue_cmd

    def read_only(*args: object, **kwargs: object) -> OfflineQueue:
        raise sqlite3.OperationalError("attempt to write a readonly database")

    monkeypatch.setattr(queue_cmd, "OfflineQueue", read_only)
    path, _ = queue_file
    code, output = run("list", "-f", str(path))
    assert code == 1 and "cannot use" in output and "readonly database" in output


def test_the_seq_the_list_shows_is_a_handle_for_show_and_retry(
    queue_file: tuple[Path, dict[str, str]],
) -> None:
    # `queue show 2` answered "no operation '2'" while 2 was the first column of the list.
    path, ids = queue_file
    with OfflineQueue(path) as queue:
        seq = queue.get(ids["dead"]).seq
    code, output = run("show", "-f", str(path), str(seq))
    assert code == 0 and ids["dead"] in output and "title too short" in output
    code, output = run("retry", "-f", str(path), str(seq))
    assert code == 0 and "pending again" in output
    code, output = run("show", "-f", str(path), "999")
    assert code == 1 and "no operation '999'" in output


def test_show_says_when_an_operation_is_next_sent(
    queue_file: tuple[Path, dict[str, str]],
) -> None:
    # A dead letter said "next_attempt_at 0.0s from now": it is never sent on its own.
    path, ids = queue_file
    _, dead = run("show", "-f", str(path), ids["dead"])
    _, live = run("show", "-f", str(path), ids["live"])
    assert "from now" not in dead + live
    row = next(line for line in dead.splitlines() if "next attempt" in line)
    assert row.rstrip(" │").endswith("-")
    assert "due now" in live


def test_the_list_stays_readable_at_80_columns(queue_file: tuple[Path, dict[str, str]]) -> None:
    path, _ = queue_file
    result = runner.invoke(app, ["queue", "list", "-f", str(path)], env={"COLUMNS": "80"})
    assert result.exit_code == 0
    header = next(line for line in result.output.splitlines() if "seq" in line)
    assert "status" in header and "entity" in header, result.output


def test_stats_watch_shows_the_delivery_rate(tmp_path: Path) -> None:
    import re
    import threading

    path = tmp_path / "queue.db"
    with OfflineQueue(path) as queue:
        for n in range(20):
            queue.enqueue("create", f"note:{n}", {"n": n})

    watching_done = threading.Event()

    def deliver() -> None:  # another process of the app, delivering while it is watched
        # Delivers until the watch has ended, not a fixed burst: on a loaded machine the
        # watch's first view may come late, and a burst over by then shows a rate of 0.
        with OfflineQueue(path) as app_queue:
            n = 20
            while not watching_done.is_set():
                for op in app_queue.next_batch(5):
                    app_queue.mark_delivered(op.id)
                app_queue.enqueue("create", f"note:{n}", {"n": n})
                n += 1
                time.sleep(0.02)

    worker = threading.Thread(target=deliver)
    worker.start()
    try:
        code, output = run("stats", "-f", str(path), "--watch", "--interval", "0.6", "--times", "2")
    finally:
        watching_done.set()
        worker.join()
    assert code == 0, output
    rate = re.search(r"delivery rate\s+│?\s*([0-9.]+)/s", output)
    assert rate is not None, output
    assert float(rate.group(1)) > 0  # deliveries within the 0.6 s between two views
    assert "delivered (kept)" in output


def test_stats_without_watch_has_no_rate(queue_file: tuple[Path, dict[str, str]]) -> None:
    code, output = run("stats", "-f", str(queue_file[0]))
    assert code == 0 and "delivery rate" not in output


def _held_behind_a_dead_create(path: Path) -> dict[str, str]:
    """note:7's create dead (422), two updates of note:7 made after it, and note:8 live."""
    with OfflineQueue(path) as queue:
        create = queue.enqueue("create", "note:7", {"title": "t"})
        queue.next_batch()
        queue.mark_failed(create.id, "422 unprocessable", kind="permanent")
        first = queue.enqueue("update", "note:7", {"title": "a"}, method="PATCH")
        second = queue.enqueue("update", "note:7", {"title": "b"}, method="PATCH")
        other = queue.enqueue("update", "note:8", {"title": "c"})
    return {"create": create.id, "first": first.id, "second": second.id, "other": other.id}


def _statuses(output: str, ids: dict[str, str]) -> dict[str, str]:
    """The status column of each named operation's row in a `queue list` table."""
    found = {}
    for line in output.splitlines():
        cells = [c.strip() for c in line.split("│")]
        for name, op_id in ids.items():
            if op_id in cells:
                found[name] = cells[cells.index(op_id) + 1]
    return found


def test_list_and_stats_show_what_a_dead_letter_holds(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    ids = _held_behind_a_dead_create(path)
    code, output = run("list", "-f", str(path))
    assert code == 0 and "2 held behind a dead letter" in output
    assert _statuses(output, ids) == {"first": "held", "second": "held", "other": "pending"}
    code, output = run("show", "-f", str(path), ids["second"])
    assert code == 0 and "behind its entity's dead letter" in output
    code, output = run("stats", "-f", str(path))
    assert code == 0
    rows = {" ".join(line.strip("│ ").split()) for line in output.splitlines()}
    assert "held (behind a dead letter) │ 2" in rows and "entities blocked │ 1" in rows


def test_retry_puts_the_dead_letter_back_ahead_of_what_it_held(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    ids = _held_behind_a_dead_create(path)
    code, _ = run("retry", "-f", str(path), ids["create"])
    assert code == 0
    code, output = run("list", "-f", str(path))
    assert code == 0 and "held" not in output
    with OfflineQueue(path) as queue:
        assert [o.id for o in queue.pending] == [
            ids[k] for k in ("create", "first", "second", "other")
        ]
        assert {o.id for o in queue.next_batch()} == {ids["create"], ids["other"]}


def test_discard_releases_the_tail_or_drops_it_with_tail(tmp_path: Path) -> None:
    for with_tail in (False, True):
        path = tmp_path / f"queue-{with_tail}.db"
        ids = _held_behind_a_dead_create(path)
        code, output = run(
            "discard", "-f", str(path), ids["create"], *(["--with-tail"] * with_tail)
        )
        assert code == 0 and ("with 2 held operation(s)" in output) is with_tail
        with OfflineQueue(path) as queue:
            sent = {o.id for o in queue.next_batch()}
        assert sent == ({ids["other"]} if with_tail else {ids["first"], ids["other"]})
