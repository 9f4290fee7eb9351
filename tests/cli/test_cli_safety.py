"""Every error a user can cause in the CLI ends in a one-line message and a non-zero exit,
never a traceback; every untrusted string it prints reaches the terminal as visible text
(no escape sequence, no rich markup, no emoji code)."""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pigeon.cli import app
from pigeon.cli._format import one_line, shown
from pigeon.edge.conflicts import ConflictStore
from pigeon.edge.queue import OfflineQueue
from pigeon.exceptions import StorageFull
from pigeon.jobs.failed import FailedStore
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import AttemptOutcome, JobManager
from pigeon.storage.server import open_server_db
from tests import processes

runner = CliRunner()
# An entity as hostile as a user can make one: clear the screen, retitle the window (OSC),
# a one-byte CSI (C1), a bidi override, rich markup and an emoji code.
HOSTILE = "note:\x1b[2J\x1b]0;owned\x07\x9b31m\u202e[red]alarm[/red]:smile:"


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "1000"})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def assert_inert(output: str) -> None:
    """Nothing in ``output`` a terminal would act on, and the markup printed as text."""
    for char in ("\x1b", "\x07", "\x9b", "\u202e"):
        assert char not in output, repr(char)
    assert "[red]alarm[/red]" in output  # rich's markup, printed literally
    assert ":smile:" in output and "😄" not in output
    assert "\\x1b[2J" in output  # shown, visibly


def test_shown_escapes_controls_and_markup() -> None:
    assert shown("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert shown("\x9b\x00\x7f") == "\\x9b\\x00\\x7f"
    assert shown("\u202eevil\u2066") == "\\u202eevil\\u2066"
    assert shown("line\nnext\ttab\r") == "line\\nnext\\ttab\\r"
    assert shown("line\nnext\ttab\r", multiline=True) == "line\nnext\ttab\\r"
    assert shown("[bold]x[/bold]") == "\\[bold]x\\[/bold]"
    assert shown(None) == "" and shown(42) == "42"
    assert shown("plain note:42 é 日本") == "plain note:42 é 日本"
    assert one_line("first\n  second\n\n") == "first; second"


@pytest.fixture
def hostile_queue(tmp_path: Path) -> Path:
    path = tmp_path / "q.db"
    with OfflineQueue(path) as q:
        live = q.enqueue("create", HOSTILE, {"title": HOSTILE})
        dead = q.enqueue("update", HOSTILE + "2", {"t": 1})
        q.next_batch()
        q.mark_failed(dead.id, f"422: bad {HOSTILE}", kind="permanent")
        q.release(live.id)
    return path


@pytest.mark.parametrize(
    "args",
    [("queue", "list"), ("queue", "dead"), ("queue", "list", "--status", "dead")],
)
def test_queue_tables_escape_untrusted_strings(hostile_queue: Path, args: tuple[str, ...]) -> None:
    code, output = run(*args, "-f", str(hostile_queue))
    assert code == 0
    assert_inert(output)


def test_queue_show_escapes_the_payload_and_history(hostile_queue: Path) -> None:
    for seq in ("1", "2"):
        code, output = run("queue", "show", "-f", str(hostile_queue), seq)
        assert code == 0
        assert_inert(output)


def test_conflicts_list_and_show_escape(hostile_queue: Path) -> None:
    with OfflineQueue(hostile_queue) as q:
        store = ConflictStore(q)
        op = q.enqueue("update", HOSTILE + "3", {"body": HOSTILE}, base_version="1")
        (sent,) = [o for o in q.next_batch(10) if o.id == op.id]
        q.mark_failed(sent.id, f"HTTP 412 {HOSTILE}", kind="conflict")
        store.record(
            q.get(op.id),
            "held",
            strategy=HOSTILE,
            base={"body": HOSTILE},
            local={"body": HOSTILE},
            remote={"body": HOSTILE},
            remote_version=HOSTILE,
        )
    code, output = run("conflicts", "list", "-f", str(hostile_queue))
    assert code == 0
    assert_inert(output)
    code, output = run("conflicts", "show", "-f", str(hostile_queue), "1")
    assert code == 0
    assert_inert(output)


@pytest.fixture
def hostile_failed_db(tmp_path: Path) -> Path:
    path = tmp_path / "s.db"
    db = open_server_db(path)
    try:
        m = JobManager(db, rng=random.Random(1))
        m.enqueue(JobSpec(HOSTILE, HOSTILE, {}, max_attempts=1, owner=HOSTILE))
        (job,) = m.lease_jobs(HOSTILE, "w", 1, lease=10)
        m.finish([AttemptOutcome(job, RuntimeError(f"boom {HOSTILE}"))])
    finally:
        db.close()
    return path


@pytest.mark.parametrize("command", ["failed", "list"])
def test_jobs_tables_escape_untrusted_strings(hostile_failed_db: Path, command: str) -> None:
    code, output = run("jobs", command, "--db", str(hostile_failed_db))
    assert code == 0
    assert_inert(output)


def test_jobs_review_echo_escapes(hostile_failed_db: Path) -> None:
    code, output = run(
        "jobs", "cancel", "1", "--reason", HOSTILE, "--reviewer", HOSTILE,
        "--db", str(hostile_failed_db),
    )  # fmt: skip
    assert code == 0
    assert_inert(output)


# -- errors: one line, non-zero, no traceback ------------------------------------------


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The installed entry point's behaviour: ``python -m pigeon ARGS``, stderr apart."""
    return processes.run(
        [sys.executable, "-m", "pigeon", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "1000"},
    )


def assert_refused(done: subprocess.CompletedProcess[str], *, says: str) -> None:
    assert done.returncode != 0, done
    assert "Traceback" not in done.stderr + done.stdout
    assert says in done.stderr, done.stderr


@pytest.mark.parametrize(
    "app_ref",
    ["../../etc/passwd:app", "/etc/passwd:app", "a..b:app", ":app", "os:", "x-y:app", "os:path"],
)
def test_a_bad_app_reference_is_refused_in_one_message(tmp_path: Path, app_ref: str) -> None:
    db = tmp_path / "s.db"
    open_server_db(db).close()
    worker = cli("worker", "--db", str(db), "--queue", "grading=1", "--app", app_ref)
    assert_refused(worker, says="--app")
    stats = cli("jobs", "stats", "--db", str(db), "--app", app_ref)
    assert_refused(stats, says="--app")


def test_an_app_module_that_raises_on_import_is_one_message(tmp_path: Path) -> None:
    (tmp_path / "brokenapp.py").write_text("raise RuntimeError('settings missing\\nline 2')\n")
    db = tmp_path / "s.db"
    open_server_db(db).close()
    for args in (
        ("worker", "--db", str(db), "--queue", "grading=1", "--app", "brokenapp:app"),
        ("jobs", "stats", "--db", str(db), "--app", "brokenapp:app"),
    ):
        assert_refused(cli(*args, cwd=tmp_path), says="RuntimeError: settings missing")


def test_too_large_ids_are_refused_not_an_overflow(hostile_failed_db: Path) -> None:
    huge = str(2**70)
    assert_refused(
        cli("jobs", "cancel", huge, "--reason", "x", "--db", str(hostile_failed_db)), says="ID"
    )
    assert_refused(
        cli("jobs", "failed", "--limit", "-1", "--db", str(hostile_failed_db)), says="--limit"
    )


def test_run_time_errors_of_any_command_are_one_line(
    hostile_failed_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a command meets while it runs (the driver's error, a full disk, a file it
    cannot read) is caught once for every command: one line, exit 1."""

    for error in (
        sqlite3.OperationalError("disk I/O error\nsecond line"),
        StorageFull(f"full {HOSTILE}"),
        PermissionError(13, "Permission denied", "s.db"),
    ):

        def boom(*_: object, error: Exception = error, **__: object) -> list[object]:
            raise error

        monkeypatch.setattr(FailedStore, "list", boom)
        result = runner.invoke(app, ["jobs", "failed", "--db", str(hostile_failed_db)])
        assert result.exit_code == 1, result.output
        assert isinstance(result.exception, SystemExit)
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), result.output
        assert "\x1b" not in result.output


def test_a_bug_keeps_its_traceback(
    hostile_failed_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only errors a user can cause are turned into a message: pigeon's own bug is not
    hidden."""

    def bug(*_: object, **__: object) -> list[object]:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(FailedStore, "list", bug)
    result = runner.invoke(app, ["jobs", "failed", "--db", str(hostile_failed_db)])
    assert isinstance(result.exception, ZeroDivisionError)


def test_conflicts_resolve_with_a_too_deep_merged_file(hostile_queue: Path, tmp_path: Path) -> None:
    merged = tmp_path / "merged.json"
    merged.write_text("[" * 100_000 + "]" * 100_000)
    done = cli("conflicts", "resolve", "-f", str(hostile_queue), "1", "--merged", str(merged))
    assert_refused(done, says="error:")
