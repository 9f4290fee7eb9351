"""``@idempotent`` in a Django project (examples/django_notes) on a real uvicorn process
over loopback with real httpx, on SQLite and PostgreSQL: one effect per key in the
project's own tables, whatever the duplicates, failures and crashes."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integrations.django_notes import DjangoNotes, counts
from tests.splitting import delivered_in_batches

ADA = {"Authorization": "Bearer ada.1"}
BOB = {"Authorization": "Bearer bob.1"}


@pytest.fixture
def notes(server_db_url: str) -> Iterator[DjangoNotes]:
    server = DjangoNotes(server_db_url, extra_args=["--test-hooks"]).start()
    try:
        yield server
    finally:
        server.stop()


def post(url: str, key: str, body: Any, who: dict[str, str] = ADA, **headers: str) -> Any:
    sent = who | {"Idempotency-Key": key} | headers
    return httpx.post(url + "/notes", json=body, headers=sent, timeout=60)


def test_fifty_duplicates_make_one_row_one_job_and_identical_answers(
    notes: DjangoNotes, server_db_url: str
) -> None:
    def send(_: int) -> httpx.Response:
        return post(notes.url, "same", {"id": "n1", "title": "once"})  # type: ignore[no-any-return]

    with ThreadPoolExecutor(max_workers=50) as pool:
        responses = list(pool.map(send, range(50)))
    statuses = {r.status_code for r in responses}
    assert statuses <= {201, 409}, statuses
    created = [r for r in responses if r.status_code == 201]
    assert len({r.content for r in created}) == 1
    assert sum(r.headers.get("idempotent-replayed") != "true" for r in created) == 1
    assert all(r.headers["retry-after"] for r in responses if r.status_code == 409)
    assert counts(server_db_url) == {"notes": 1, "effects": 1, "jobs": 1, "claims": 1}


def test_a_view_that_fails_after_writing_rolls_back_its_rows_its_job_and_its_claim(
    notes: DjangoNotes, server_db_url: str
) -> None:
    failed = post(notes.url, "k", {"id": "n1"}, **{"X-Pigeon-Test-Fail": "1"})
    assert failed.status_code == 500
    assert failed.headers["content-type"] == "application/problem+json"
    assert "X-Pigeon-Test-Fail" not in failed.text and failed.json()["error_id"]
    assert counts(server_db_url) == {"notes": 0, "effects": 0, "jobs": 0, "claims": 0}
    again = post(notes.url, "k", {"id": "n1"})  # the key is free: the retry runs
    assert again.status_code == 201 and "idempotent-replayed" not in again.headers
    assert counts(server_db_url) == {"notes": 1, "effects": 1, "jobs": 1, "claims": 1}


def test_a_stored_4xx_is_replayed_and_its_writes_are_not_kept(
    notes: DjangoNotes, server_db_url: str
) -> None:
    assert post(notes.url, "c", {"id": "n1", "v": 1}).status_code == 201
    patch = {"Idempotency-Key": "p", "If-Match": '"7"'} | ADA
    stale = httpx.patch(notes.url + "/notes/n1", json={"v": 2}, headers=patch)
    assert stale.status_code == 412 and stale.headers["etag"] == '"1"'
    again = httpx.patch(notes.url + "/notes/n1", json={"v": 2}, headers=patch)
    assert again.status_code == 412 and again.headers["idempotent-replayed"] == "true"
    assert again.content == stale.content
    assert counts(server_db_url) == {"notes": 1, "effects": 1, "jobs": 1, "claims": 2}


def test_two_principals_never_share_a_key(notes: DjangoNotes, server_db_url: str) -> None:
    ada = post(notes.url, "k", {"id": "n1", "t": "same"}, ADA)
    bob = post(notes.url, "k", {"id": "n1", "t": "same"}, BOB)
    assert ada.status_code == bob.status_code == 201
    assert "idempotent-replayed" not in ada.headers and "idempotent-replayed" not in bob.headers
    assert httpx.get(notes.url + "/notes", headers=BOB).json()["notes"][0]["data"] == {"t": "same"}
    assert counts(server_db_url) == {"notes": 2, "effects": 2, "jobs": 2, "claims": 2}


def test_the_refusals_store_nothing(notes: DjangoNotes, server_db_url: str) -> None:
    bad_key = post(notes.url, "", {"id": "n1"})
    assert bad_key.status_code == 400 and bad_key.json()["type"].endswith("bad-idempotency-key")
    bad_json = httpx.post(
        notes.url + "/notes",
        content=b'{"id": "n1", "id": "n2"}',
        headers=ADA | {"Idempotency-Key": "j", "Content-Type": "application/json"},
    )
    assert bad_json.status_code == 400 and bad_json.json()["type"].endswith("bad-json")
    not_a_note = post(notes.url, "v", [1, 2])
    assert not_a_note.status_code in (400, 422)
    assert counts(server_db_url) == {"notes": 0, "effects": 0, "jobs": 0, "claims": 0}
    assert post(notes.url, "v", {"id": "n1"}).status_code == 201  # nothing kept: the key is free


def test_a_batch_over_djangos_upload_cap_is_413_and_the_edge_splits_it(
    notes: DjangoNotes, server_db_url: str, tmp_path: Path
) -> None:
    """Django refuses a body over DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB by default) when it
    is read; the batch view answered that with Django's 400 page, on which the edge
    paused its queue for good. It is a 413 now, which the edge splits until the halves
    fit: every operation is applied once, in order."""
    bodies = [{"id": f"n{n}", "text": "x" * 400_000} for n in range(8)]
    _, statuses = delivered_in_batches(notes.url, tmp_path / "edge.db", bodies, ADA)
    assert statuses[0] == 413 and set(statuses) == {413, 200}, statuses
    assert counts(server_db_url) == {"notes": 8, "effects": 8, "jobs": 8, "claims": 8}


@pytest.mark.chaos
def test_killed_after_commit_before_the_answer_the_resend_replays(server_db_url: str) -> None:
    env = {"NOTES_DIE_ON": "k"}
    dying = DjangoNotes(server_db_url, settings="tests.integrations.django_crash_settings", env=env)
    dying.start()
    with pytest.raises(httpx.TransportError):
        post(dying.url, "k", {"id": "n1", "title": "survives"})
    assert counts(server_db_url) == {"notes": 1, "effects": 1, "jobs": 1, "claims": 1}
    dying.stop()
    server = DjangoNotes(server_db_url).start()
    try:
        again = post(server.url, "k", {"id": "n1", "title": "survives"})
    finally:
        server.stop()
    assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true"
    assert again.json()["data"] == {"title": "survives"}
    assert counts(server_db_url) == {"notes": 1, "effects": 1, "jobs": 1, "claims": 1}
