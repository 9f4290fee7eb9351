"""What a rehearsal found, per scenario: what was done, how many requests and jobs, and the
reconciliation, as data (``RunReport.to_json``) for ``--report`` and for the CLI's tables.

A scenario ends ``passed``, ``failed`` (each problem named in ``problems``) or ``skipped``
(``reason`` says why it could not run for this app): a skipped scenario is never counted
as passed, and a run with a failed one fails.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Outcome = Literal["passed", "failed", "skipped"]


@dataclass
class Reconciliation:
    """Rows the faulted requests left against what their twins (the same requests sent
    without a fault) left, table by table, and the jobs' ends.

    ``expected`` / ``found``: rows per table (pigeon's records, obligations, jobs, effects
    and outbox, and the app's own tables); a table found above its twin's count holds
    duplicates, below it lost rows."""

    expected: dict[str, int] = field(default_factory=dict)
    found: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)  # the scenario's own figures
    failed_with_owner: int = 0
    failed_without_owner: int = 0
    drain_seconds: float | None = None
    predicted_seconds: float | None = None
    tolerance: str | None = None

    @property
    def obligations(self) -> int:
        """Obligations the faulted requests created."""
        return self.found.get("obligations", 0)

    @property
    def effects(self) -> int:
        """Effects recorded: pigeon's effect claims and the rows of the app's own tables."""
        pigeon_only = {"records", "obligations", "jobs", "outbox"}
        return sum(n for table, n in self.found.items() if table not in pigeon_only)

    @property
    def duplicates(self) -> int:
        return sum(max(0, self.found.get(t, 0) - n) for t, n in self.expected.items())

    @property
    def lost(self) -> int:
        return sum(max(0, n - self.found.get(t, 0)) for t, n in self.expected.items())

    def problems(self) -> list[str]:
        """Each table whose count is not its twin's, named with both counts."""
        found = []
        for table in sorted(self.expected):
            want, got = self.expected[table], self.found.get(table, 0)
            if got > want:
                found.append(
                    f"{table}: {got} rows where {want} were expected ({got - want} duplicates)"
                )
            elif got < want:
                found.append(f"{table}: {got} rows where {want} were expected ({want - got} lost)")
        if self.failed_without_owner:
            found.append(f"{self.failed_without_owner} failed jobs have no owner")
        return found

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["obligations"] = self.obligations
        data["effects"] = self.effects
        data["duplicates"] = self.duplicates
        data["lost"] = self.lost
        return data


@dataclass
class ScenarioResult:
    """One scenario's run: ``done`` says what it did, step by step, in words."""

    name: str
    summary: str
    outcome: Outcome = "passed"
    reason: str | None = None  # why it was skipped
    problems: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    requests: int = 0
    answers: dict[str, int] = field(default_factory=dict)  # final status class -> count
    jobs: int = 0
    seconds: float = 0.0
    reconciliation: Reconciliation = field(default_factory=Reconciliation)

    def did(self, step: str) -> None:
        self.done.append(step)

    def problem(self, text: str) -> None:
        self.problems.append(text)
        self.outcome = "failed"

    def skip(self, reason: str) -> ScenarioResult:
        self.outcome, self.reason = "skipped", reason
        return self

    def answered(self, status: int | None) -> None:
        key = "no answer" if status is None else f"{status // 100}xx"
        self.answers[key] = self.answers.get(key, 0) + 1

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["reconciliation"] = self.reconciliation.to_json()
        return data


@dataclass
class RunReport:
    """Every scenario of one run, with what the run was given."""

    app: str
    jobs: str
    database: str
    scale: int
    scenarios: list[ScenarioResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """No scenario failed (skipped ones are listed, not passed)."""
        return all(s.outcome != "failed" for s in self.scenarios)

    def counts(self) -> dict[str, int]:
        found = {"passed": 0, "failed": 0, "skipped": 0}
        for s in self.scenarios:
            found[s.outcome] += 1
        return found

    def to_json(self) -> dict[str, Any]:
        return {
            "app": self.app,
            "jobs": self.jobs,
            "database": self.database,
            "scale": self.scale,
            "ok": self.ok,
            "counts": self.counts(),
            "seconds": round(self.seconds, 3),
            "scenarios": [s.to_json() for s in self.scenarios],
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=False)
