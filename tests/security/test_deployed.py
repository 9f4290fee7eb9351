"""The deployment the security tests attack answers as the README says it should."""

from __future__ import annotations

import uuid

import httpx

from .conftest import Deployed


def test_the_deployment_refuses_strangers_and_serves_its_users(deployed: Deployed) -> None:
    note = {"id": uuid.uuid4().hex, "body": "hello"}
    key = {"Idempotency-Key": str(uuid.uuid4())}
    assert httpx.post(deployed.url + "/notes", json=note, headers=key).status_code == 401
    made = httpx.post(deployed.url + "/notes", json=note, headers=key | deployed.user("ada"))
    assert made.status_code == 201, made.text
    mine = httpx.get(f"{deployed.url}/notes/{note['id']}", headers=deployed.user("ada"))
    assert mine.status_code == 200
    theirs = httpx.get(f"{deployed.url}/notes/{note['id']}", headers=deployed.user("bob"))
    assert theirs.status_code == 404
    ledger = httpx.get(deployed.url + "/pigeon/v1/ledger", headers=deployed.operator)
    assert ledger.status_code == 200
    as_user = httpx.get(deployed.url + "/pigeon/v1/ledger", headers=deployed.user("ada"))
    assert as_user.status_code == 404  # for a user, the operator's routes do not exist
