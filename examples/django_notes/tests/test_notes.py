"""The notes example in-process (Django's test client): one effect per key in its own
tables, every failure rolled back with its claim, DRF under ``@idempotent_action``, the
admin's reviews, and pigeon's migrations as Django runs them."""

from __future__ import annotations

import pkgutil
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection

from conftest import ADA, write
from notes.models import Effect, Note
from pigeon.core.wire import MAX_JSON_DEPTH
from pigeon.integrations.django.migrations import __name__ as migrations_package
from pigeon.integrations.django.models import BackgroundJob
from pigeon.jobs.failed import FailedStore
from pigeon.storage.schema import Component

pytestmark = pytest.mark.django_db(transaction=True)


def claims() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pigeon_idempotency_claims")
        return int(cursor.fetchone()[0])


def test_a_create_is_one_row_one_effect_one_job_and_a_replay(client: Any) -> None:
    first = write(client, "POST", "/notes", {"id": "n1", "t": 1}, "k1")
    again = write(client, "POST", "/notes", {"id": "n1", "t": 1}, "k1")
    assert first.status_code == again.status_code == 201
    assert again.content == first.content and again["Idempotent-Replayed"] == "true"
    assert (Note.objects.count(), Effect.objects.count(), BackgroundJob.objects.count()) == (
        1,
        1,
        1,
    )
    assert claims() == 1


def test_a_5xx_answer_rolls_back_the_rows_the_job_and_the_claim(client: Any) -> None:
    answered = write(client, "POST", "/unavailable", {}, "k")
    assert answered.status_code == 503
    assert (Note.objects.count(), BackgroundJob.objects.count(), claims()) == (0, 0, 0)


def test_an_exception_is_a_500_problem_quoting_nothing_and_everything_rolls_back(
    client: Any,
) -> None:
    failed = write(client, "POST", "/raises", {}, "k")
    assert failed.status_code == 500 and failed["Content-Type"] == "application/problem+json"
    assert "secret" not in failed.content.decode() and failed.json()["error_id"]
    assert (Note.objects.count(), claims()) == (0, 0)


def test_a_view_that_swallows_a_database_error_commits_nothing(client: Any) -> None:
    answered = write(client, "POST", "/swallows", {}, "k")
    assert answered.status_code == 500
    assert (Note.objects.count(), claims()) == (0, 0)


DEEP = b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'{"id": "n1", "t": NaN}', id="NaN"),
        pytest.param(b'{"id": "n1", "t": Infinity}', id="Infinity"),
        pytest.param(b'{"id": "n1", "t": -Infinity}', id="-Infinity"),
        pytest.param(b'{"id": "n1", "t": 1e400}', id="beyond-a-double"),
        pytest.param(b'{"id": "n1", "t": 1, "t": 2}', id="a-key-twice"),
        pytest.param(b'{"id": true, "t": 1}', id="a-bool-for-the-integer-id"),
        pytest.param(b'{"id": "n1", "t": ' + DEEP + b"}", id="too-deep"),
    ],
)
def test_a_body_the_strict_decoder_or_the_view_refuses_is_a_4xx_and_leaves_the_key_free(
    client: Any, body: bytes
) -> None:
    headers = ADA | {"HTTP_IDEMPOTENCY_KEY": "k"}
    refused = client.generic("POST", "/notes", body, "application/json", **headers)
    assert 400 <= refused.status_code < 500, refused.content
    assert refused["Content-Type"] == "application/problem+json"
    assert (Note.objects.count(), Effect.objects.count(), BackgroundJob.objects.count()) == (
        0,
        0,
        0,
    )
    assert claims() == 0
    assert write(client, "POST", "/notes", {"id": "n1", "t": 1}, "k").status_code == 201


def test_drf_claims_after_authentication_and_stores_its_own_answers(client: Any) -> None:
    made = write(client, "POST", "/drf/notes", {"note_id": "d1"}, "k1")
    again = write(client, "POST", "/drf/notes", {"note_id": "d1"}, "k1")
    assert made.status_code == 201 and made.json() == {"id": "d1"}
    assert again.content == made.content and again["Idempotent-Replayed"] == "true"
    invalid = write(client, "POST", "/drf/notes", {"note_id": ""}, "k2")
    assert invalid.status_code == 400 and "note_id" in invalid.json()
    replayed = write(client, "POST", "/drf/notes", {"note_id": ""}, "k2")
    assert replayed.status_code == 400 and replayed["Idempotent-Replayed"] == "true"
    assert Note.objects.count() == 1 and claims() == 2


def test_a_batch_entry_of_a_drf_view_runs_through_it(client: Any) -> None:
    ops = [{"id": "o1", "idempotency_key": "b1", "method": "POST", "path": "/drf/notes",
            "body": {"note_id": "d2"}}]  # fmt: skip
    sent = client.post("/pigeon/v1/batch", {"operations": ops}, "application/json", **ADA)
    assert [(r["status"], r["replayed"]) for r in sent.json()["results"]] == [(201, False)]
    assert Note.objects.get().note_id == "d2"


def test_a_batch_entry_that_reads_is_refused_and_the_batch_goes_on(client: Any) -> None:
    ops = [
        {"id": "o1", "idempotency_key": "b1", "method": "GET", "path": "/notes"},
        {"id": "o2", "idempotency_key": "b2", "method": "POST", "path": "/notes", "body": {}},
    ]
    sent = client.post("/pigeon/v1/batch", {"operations": ops}, "application/json", **ADA)
    assert [r["status"] for r in sent.json()["results"]] == [405, 201]
    assert claims() == 1


def test_the_admin_retries_a_failed_job_with_a_reason_and_not_without(client: Any) -> None:
    write(client, "POST", "/notes", {"id": "n1"}, "k1")
    job = BackgroundJob.objects.get()
    with connection.cursor() as cursor:  # as the failed store leaves a job that ran out
        cursor.execute("UPDATE pigeon_jobs SET status = 'failed', attempts = 3")
    admin = User.objects.create_superuser("root", "root@example.org", "pw")
    client.force_login(admin)
    url = "/admin/pigeon/backgroundjob/"
    chosen = {"action": "retry_jobs", "_selected_action": [str(job.pk)]}
    asked = client.post(url, chosen)
    assert asked.status_code == 200 and b"reason" in asked.content  # the form, no retry yet
    assert BackgroundJob.objects.get().status == "failed"
    assert client.post(url, chosen | {"reason": ""}).status_code == 200  # still asked
    done = client.post(url, chosen | {"reason": "the index is back"})
    assert done.status_code == 302
    assert BackgroundJob.objects.get().status == "queued"
    reviews = FailedStore(alias_db()).show(job.pk)["reviews"]
    assert [(r["action"], r["reviewer"], r["reason"]) for r in reviews] == [
        ("retry", "root", "the index is back")
    ]


def alias_db() -> Any:
    from pigeon.integrations.django.transactions import AliasDatabase

    return AliasDatabase()


def test_the_admin_lists_records_obligations_and_jobs(client: Any) -> None:
    client.force_login(User.objects.create_superuser("root", "root@example.org", "pw"))
    for model in ("record", "obligation", "backgroundjob"):
        assert client.get(f"/admin/pigeon/{model}/").status_code == 200


def test_pigeons_migration_makes_the_server_schema_this_pigeon_knows() -> None:
    latest = len(Component("server").migrations("sqlite"))
    from importlib import import_module

    package = import_module(migrations_package)
    names = sorted(m.name for m in pkgutil.iter_modules(package.__path__))
    last = import_module(f"{migrations_package}.{names[-1]}")
    assert latest == last.SERVER_VERSION, "a new server migration needs a Django one"
    out = StringIO()
    call_command("makemigrations", "--check", "--dry-run", stdout=out)  # nothing pending
    with connection.cursor() as cursor:
        cursor.execute("SELECT version FROM pigeon_schema WHERE component = 'server'")
        assert cursor.fetchone()[0] == latest
