"""The Django notes example (examples/django_notes) as a server process of the tests, on
uvicorn (``manage.py serve``), killable and restartable on its port like ``pigeon
serve``, and what its database holds."""

from __future__ import annotations

import os
import sqlite3
import sys
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from tests.processes import ServerProcess

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "django_notes"
# The path a pigeon command serving or rehearsing the example imports it on: its project's
# packages at the top, as manage.py has them, and the checkout.
EXAMPLE_PATH = os.pathsep.join([str(EXAMPLE), str(ROOT)])
TABLES = {
    "notes": "notes_note",
    "effects": "notes_effect",
    "jobs": "pigeon_jobs",
    "claims": "pigeon_idempotency_claims",
}


@dataclass
class DjangoNotes(ServerProcess):
    """``db``: NOTES_DB (a SQLite path or a postgresql:// URL). ``settings``: the Django
    settings module (the crash tests' adds a death after a chosen key's commit)."""

    settings: str = "notes_project.settings"
    env: dict[str, str] = field(default_factory=dict)

    def command(self) -> list[str]:
        args = [sys.executable, str(EXAMPLE / "manage.py"), "serve"]
        return [*args, "--host", "127.0.0.1", "--port", str(self.port)]

    def environment(self) -> dict[str, str]:
        env = super().environment() | {
            "NOTES_DB": str(self.db),
            "DJANGO_SETTINGS_MODULE": self.settings,
            "PYTHONPATH": str(ROOT),
            **self.env,
        }
        if self.allow_anonymous:
            env["NOTES_ALLOW_ANONYMOUS"] = "1"
        if "--test-hooks" in self.extra_args:
            env["NOTES_TEST_HOOKS"] = "1"
        return env


def counts(db: str) -> dict[str, int]:
    """Rows of the example's tables and pigeon's, in the database ``db``."""
    query = {name: f"SELECT count(*) FROM {table}" for name, table in TABLES.items()}
    if db.startswith("postgresql://"):
        with psycopg.connect(db) as conn:
            return {name: conn.execute(q).fetchone()[0] for name, q in query.items()}  # type: ignore[index]
    conn = sqlite3.connect(db)
    try:
        return {name: conn.execute(q).fetchone()[0] for name, q in query.items()}
    finally:
        conn.close()
