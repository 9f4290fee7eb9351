"""The tiers of tests/tiers.py: each test lands in its tier by what it uses, unmarked."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import processes
from tests.conftest import require_postgres
from tests.tiers import reaches_a_service

ROOT = Path(__file__).resolve().parent.parent


class _Collected:
    def __init__(self) -> None:
        self.marks: dict[str, set[str]] = {}

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for item in session.items:
            self.marks[item.nodeid] = {mark.name for mark in item.iter_markers()}


def _collect(*paths: str) -> dict[str, set[str]]:
    recorder = _Collected()
    args = ["--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]
    code = pytest.main([*args, *(str(ROOT / p) for p in paths)], plugins=[recorder])
    assert code == pytest.ExitCode.OK
    return recorder.marks


def _starts_a_process() -> None:
    processes.run(["true"])


def _calls_a_helper_that_starts_one() -> None:
    _starts_a_process()


def _probes_postgres() -> None:
    require_postgres()


def _pure() -> int:
    return len("pure")


def test_a_helper_reaching_a_service_through_others_is_found() -> None:
    assert reaches_a_service(_starts_a_process)
    assert reaches_a_service(_calls_a_helper_that_starts_one)
    assert reaches_a_service(_probes_postgres)
    assert not reaches_a_service(_pure)


def test_collected_tests_carry_the_tier_of_what_they_use() -> None:
    marks = _collect("tests/edge/test_owners.py", "tests/jobs/test_effects.py")
    spawns = (
        "tests/edge/test_owners.py::test_a_running_queue_takes_over_what_a_killed_neighbour_left"
    )
    pure = "tests/edge/test_owners.py::test_close_removes_the_owner_file"
    assert "integration" in marks[spawns]
    assert {"integration", "postgres", "chaos"}.isdisjoint(marks[pure])
    on_backends = [node for node in marks if node.startswith("tests/jobs/test_effects.py")]
    pg = [node for node in on_backends if "[postgres" in node]
    sqlite = [node for node in on_backends if "[sqlite" in node]
    assert pg and sqlite
    assert all({"integration", "postgres"} <= marks[node] for node in pg)
    assert all(not {"integration", "postgres"} & marks[node] for node in sqlite)


def test_the_chaos_modules_are_chaos_by_name() -> None:
    marks = _collect("tests/edge/test_crash.py")
    assert marks and all("chaos" in names for names in marks.values())
