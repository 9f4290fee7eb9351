"""``pigeon serve --app notes_project.served:serve``: the Django example served by a real
``pigeon serve`` process through `pigeon.integrations.django.served`, the command's body
limit and test hooks heeded by its ``@idempotent`` views, over real HTTP; and what the
factory refuses, one line each, before anything listens."""

from __future__ import annotations

import os
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from pigeon.exceptions import ConfigurationError
from pigeon.integrations.django.conf import read
from pigeon.integrations.django.served import pigeon_settings
from pigeon.integrations.django.worker import same_database
from pigeon.server.idempotency import IdempotencyPolicy
from pigeon.server.options import BodyLimits, DatabaseOptions, IntakeOptions, ServerOptions
from tests import processes
from tests.integrations.django_notes import EXAMPLE_PATH
from tests.integrations.served_apps import batch_of

APP = "notes_project.served:serve"
PIGEON = [sys.executable, "-c", "from pigeon.cli import main; main()"]
ADA = {"Authorization": "Bearer ada.1"}  # the example's demo stand-in: principal "ada"


def _env(**extra: str) -> dict[str, str]:
    path = EXAMPLE_PATH
    env = {k: v for k, v in os.environ.items() if k not in ("NOTES_DB", "DJANGO_SETTINGS_MODULE")}
    return env | {"PYTHONPATH": path, "PIGEON_TEST_HOOKS": "1"} | extra


@contextmanager
def served(db: Path, *extra: str) -> Iterator[str]:
    """``pigeon serve --app`` with the test hooks, once the project answers; its URL."""
    health = "/pigeon/v1/health"
    with processes.served_app(APP, str(db), *extra, probe=health, env=_env()) as (_, url):
        yield url


def note(url: str, key: str, body: dict[str, object], **headers: str) -> httpx.Response:
    return httpx.post(
        url + "/notes", json=body, headers={"Idempotency-Key": key, **ADA, **headers}, timeout=30
    )


def effects(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [key for (key,) in conn.execute("SELECT idempotency_key FROM notes_effect")]


def test_the_commands_options_reach_the_projects_idempotent_views(tmp_path: Path) -> None:
    db = tmp_path / "notes.db"
    with served(db, "--max-body", "200", "--max-batch-body", "2000") as url:
        assert note(url, "k1", {"id": "n1"}, Authorization="").status_code == 401
        failed = note(url, "k1", {"id": "n1"}, **{"X-Pigeon-Test-Fail": "1"})
        assert failed.status_code == 500 and effects(db) == []  # rolled back, key free
        first = note(url, "k1", {"id": "n1", "title": "tea"})
        assert first.status_code == 201
        again = note(url, "k1", {"id": "n1", "title": "tea"})
        assert again.headers["idempotent-replayed"] == "true" and again.content == first.content
        assert note(url, "k2", {"title": "x" * 300}).status_code == 413  # --max-body
        assert batch_of(url, 2500, "b1") == 413  # --max-batch-body, whole
        assert batch_of(url, 1500, "b2") == 200  # its one note is under --max-body
    assert effects(db) == ["k1", "b2"]


def test_two_serving_processes_serve_a_project_migrated_first(tmp_path: Path) -> None:
    db = tmp_path / "notes.db"
    args = [*PIGEON, "serve", "--app", APP, "--db", str(db), "--port", "0", "--workers", "2"]
    refused = processes.run(args, capture_output=True, text=True, timeout=60, env=_env())
    assert refused.returncode != 0  # each worker refuses tables not migrated, in a line
    assert "run manage.py migrate first" in refused.stderr, refused.stderr
    with served(db):  # one serving process migrates
        pass
    with served(db, "--workers", "2") as url:
        made = [note(url, f"k{i}", {"id": f"n{i}"}).status_code for i in range(8)]
    assert made == [201] * 8 and sorted(effects(db)) == [f"k{i}" for i in range(8)]


@pytest.mark.parametrize(
    ("extra", "env", "said"),
    [
        (["--allow-anonymous"], {}, "does not heed --allow-anonymous"),
        (["--auth", "jwt"], {"PIGEON_JWT_SECRET": "s" * 32}, "does not heed --auth jwt"),
        (["--in-progress-wait", "1"], {}, "does not heed --in-progress-wait"),
        (["--claim-mode", "separate"], {}, "does not heed --claim-mode separate"),
        (["--durability", "normal"], {}, "does not heed --durability normal"),
        ([], {"NOTES_DB": "elsewhere.db"}, "is not the project's default database"),
        ([], {"NOTES_DB": "postgresql://u:hush@127.0.0.1/x"}, "is not the project's default"),
        ([], {"DJANGO_SETTINGS_MODULE": ""}, "DJANGO_SETTINGS_MODULE names no settings"),
    ],
)
def test_what_the_project_would_not_heed_is_refused_before_it_listens(
    tmp_path: Path, extra: list[str], env: dict[str, str], said: str
) -> None:
    app = "pigeon.integrations.django.served:serve"
    settings = {"DJANGO_SETTINGS_MODULE": "notes_project.settings"}
    args = [*PIGEON, "serve", "--app", app, "--db", str(tmp_path / "n.db"), "--port", "0"]
    done = processes.run(
        [*args, *extra],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=_env(**({"NOTES_DB": str(tmp_path / "n.db")} | settings | env)),
    )
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and "serving on" not in done.stdout
    assert "hush" not in done.stderr  # a password in the project's URL is not told
    assert "Traceback" not in done.stderr


def test_the_commands_options_replace_the_projects_pigeon_settings() -> None:
    options = ServerOptions(
        database=DatabaseOptions("n.db", keys_file="/keys.json"),
        intake=IntakeOptions(policy=IdempotencyPolicy(lock_timeout=5.0), test_hooks=True),
        limits=BodyLimits(max_body=1000),
    )
    current = {"PRINCIPAL": "notes.auth.principal", "MAX_BODY": 5, "TEST_HOOKS": False}
    merged = pigeon_settings(options, current)
    assert merged["PRINCIPAL"] == "notes.auth.principal"  # the project's own, kept
    assert (merged["MAX_BODY"], merged["TEST_HOOKS"], merged["LOCK_TIMEOUT"]) == (1000, True, 5.0)
    assert merged["KEYS_FILE"] == "/keys.json" and current["MAX_BODY"] == 5


def test_what_the_command_took_by_default_leaves_the_projects_settings() -> None:
    current = {"MAX_BODY": 5 << 20, "LOCK_TIMEOUT": 9.0, "TEST_HOOKS": True}
    merged = pigeon_settings(ServerOptions(), current)
    assert (merged["MAX_BODY"], merged["LOCK_TIMEOUT"]) == (5 << 20, 9.0)  # the project's
    usual = ServerOptions()
    assert merged["RESPONSE_RETENTION"] == usual.intake.policy.response_retention  # unset
    assert merged["TEST_HOOKS"] is False  # only the command turns them on


def test_one_database_is_told_from_another(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert same_database("n.db", str(tmp_path / "n.db"))
    assert not same_database("n.db", "m.db")
    assert same_database("postgresql://u@h/db", "postgresql://u@h:5432/db")
    assert not same_database("postgresql://u@h/db", "postgresql://u@h/other")
    assert not same_database("postgresql://u@h/db", "db")


def test_a_projects_batch_limit_is_read_and_holds_an_operation() -> None:
    assert read({"MAX_BATCH_BODY": 4 << 20}).max_batch_body == 4 << 20
    with pytest.raises(ConfigurationError, match="MAX_BATCH_BODY"):
        read({"MAX_BODY": 5000, "MAX_BATCH_BODY": 1000})  # one operation must fit a batch
    merged = pigeon_settings(ServerOptions(limits=BodyLimits(max_batch_body=3 << 20)), {})
    assert merged["MAX_BATCH_BODY"] == 3 << 20
