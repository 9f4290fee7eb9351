"""``pigeon plan``: bad input is refused by name (exit 2, no traceback), a --db is opened
only if it is a pigeon server database (never created), a measured S keeps its digits."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from pigeon.cli import app
from pigeon.edge.queue import OfflineQueue
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import AttemptOutcome, JobManager
from pigeon.storage.server import open_server_db
from tests.clocks import FakeClock

runner = CliRunner()
BASE = ["plan", "--backlog", "1000", "--arrival-rate", "50", "--target", "10"]


def run(*args: str) -> Result:
    return runner.invoke(app, list(args), env={"COLUMNS": "200"})


def flat(output: str) -> str:
    return " ".join(output.replace("│", " ").split())


def assert_refused(result: Result, *words: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    for word in words:
        assert word in flat(result.output), result.output


def history_db(path: Path, seconds: float | list[float], jobs: int = 5) -> Path:
    """A server database whose ``grading`` jobs each took ``seconds`` (or these durations)."""
    durations = seconds if isinstance(seconds, list) else [seconds] * jobs
    db = open_server_db(path)
    now = FakeClock(1000.0)
    manager = JobManager(db, clock=now)
    for _ in durations:
        manager.enqueue(JobSpec("grading", "grade"))
    for took in durations:
        (job,) = manager.lease_jobs("grading", "w", 1, lease=10)
        now.advance(took)
        manager.finish([AttemptOutcome(job)])
    db.close()
    return path


def test_plan_refuses_a_missing_db_and_creates_nothing(tmp_path: Path) -> None:
    result = run(*BASE, "--db", str(tmp_path / "missing.db"), "--queue", "grading")
    assert_refused(result, "missing.db: no such database file", "--db")
    assert list(tmp_path.iterdir()) == []


def test_plan_refuses_a_text_file(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")
    assert_refused(run(*BASE, "--db", str(notes)), "notes.txt is not a SQLite database")
    assert notes.read_text() == "hello\n"


def test_plan_refuses_an_edge_queue_file(tmp_path: Path) -> None:
    path = tmp_path / "edge.db"
    OfflineQueue(path).close()
    assert_refused(run(*BASE, "--db", str(path)), "edge.db is not a pigeon server database")


def test_plan_refuses_a_missing_postgres_database(pg_url: str) -> None:
    url = pg_url.rsplit("/", 1)[0] + "/no_such_db_pigeon"
    assert_refused(run(*BASE, "--db", url), 'database "no_such_db_pigeon" does not exist')


@pytest.mark.parametrize("option", ["--service-time", "--arrival-rate", "--target"])
@pytest.mark.parametrize("value", ["inf", "-inf", "nan"])
def test_plan_refuses_non_finite_numbers_by_name(option: str, value: str) -> None:
    values = {"--service-time": "0.12", "--arrival-rate": "50", "--target": "10", option: value}
    args = ["plan", "--backlog", "1000"] + [x for pair in values.items() for x in pair]
    assert_refused(run(*args), option, "finite")


def test_plan_refuses_non_finite_memory() -> None:
    result = run(*BASE, "--service-time", "0.1", "--memory-per-worker", "inf")
    assert_refused(result, "--memory-per-worker", "finite")


def test_plan_refuses_numbers_too_large_to_plan_with() -> None:
    # each finite, their product is not
    args = ["--backlog", "1", "--target", "1", "--service-time", "1e300", "--arrival-rate", "1e300"]
    assert_refused(run("plan", *args), "too large")


def test_plan_names_a_bad_worker_count() -> None:
    result = run(*BASE, "--service-time", "0.12", "--workers", "6,x")
    assert_refused(result, "--workers", "'x' is not a whole number of workers (in '6,x')")
    assert "invalid literal" not in result.output


def test_plan_refuses_service_time_together_with_db(tmp_path: Path) -> None:
    path = history_db(tmp_path / "s.db", 0.25)
    result = run(*BASE, "--db", str(path), "--queue", "grading", "--service-time", "0.12")
    assert_refused(result, "--service-time", "not both")


def test_plan_prints_a_small_measured_service_time(tmp_path: Path) -> None:
    path = history_db(tmp_path / "s.db", 0.0012)
    result = run(*BASE, "--db", str(path), "--queue", "grading")
    assert result.exit_code == 0, result.output
    out = flat(result.output)
    assert "S = 0.0012 s (mean of 5 jobs of 'grading'; median 0.0012 s, p95 0.0012 s)" in out
    assert "S=0.0012s" in out and "S=0s" not in out
    assert "= 0.0012 x (50 + 1000/10)" in out


def test_plan_keeps_its_figures_for_usual_numbers() -> None:
    result = run(*BASE, "--service-time", "0.12", "--workers", "6,12,18")
    assert result.exit_code == 0, result.output
    out = flat(result.output)
    assert "B=1000 S=0.12s L=50/s T=10s" in out
    assert "minimum workers for T=10 s: 18 (w >= S x (L + B/T) = 0.12 x (50 + 1000/10))" in out


def test_plan_takes_the_mean_service_time_and_shows_median_and_p95(tmp_path: Path) -> None:
    """A slow tail: 18 jobs of 0.1 s and 2 of 2.1 s. The workers are busy for the sum of
    the durations, 6 s over 20 jobs: S is the mean, 0.3 s (the median, 0.1 s, would
    plan a third of the workers needed); the median and p95 are shown beside it."""
    path = history_db(tmp_path / "s.db", [0.1] * 18 + [2.1] * 2)
    result = run(
        "plan", "--db", str(path), "--queue", "grading",
        "--backlog", "100", "--arrival-rate", "0", "--target", "10",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    out = flat(result.output)
    assert "S = 0.3 s (mean of 20 jobs of 'grading'; median 0.1 s, p95 2.1 s)" in out
    # w >= S x (L + B/T) = 0.3 x (0 + 100/10) = 3 (the median would say 1)
    assert "minimum workers for T=10 s: 3 (w >= S x (L + B/T) = 0.3 x (0 + 100/10))" in out
