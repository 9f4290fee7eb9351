"""The access matrix from outside: every route of ``pigeon serve`` as deployed (the
matrix of ``tests/server/test_access.py``, which fails when a route is added and not
listed), on both backends, with forged, expired, ``alg: none``, undated and otherwise bad
JWTs: 401 on every route that is not public, never a 5xx; a valid user on an operator
route gets 404, the operator on a user's route 403."""

from __future__ import annotations

import base64
import json
import time
import uuid

import httpx
import jwt

from pigeon.server.access import Rule
from tests.server.test_access import MATRIX

from .conftest import JWT_SECRET, OPERATOR_TOKEN, Deployed


def _segment(data: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def bad_tokens() -> dict[str, str]:
    now = int(time.time())
    good = {"sub": "ada", "exp": now + 600}
    none = f"{_segment({'alg': 'none', 'typ': 'JWT'})}.{_segment(good)}."
    return {
        "wrong signature": jwt.encode(good, JWT_SECRET + "x", algorithm="HS256"),
        "signed with the operator token": jwt.encode(good, OPERATOR_TOKEN, algorithm="HS256"),
        "expired": jwt.encode(good | {"exp": now - 3600}, JWT_SECRET, algorithm="HS256"),
        "no exp": jwt.encode({"sub": "ada"}, JWT_SECRET, algorithm="HS256"),
        "exp as a string": jwt.encode(good | {"exp": str(now + 600)}, JWT_SECRET),
        "not yet valid": jwt.encode(good | {"nbf": now + 3600}, JWT_SECRET, algorithm="HS256"),
        "alg none": none,
        "HS512": jwt.encode(good, JWT_SECRET * 2, algorithm="HS512"),
        "no sub": jwt.encode({"exp": now + 600}, JWT_SECRET, algorithm="HS256"),
        "the demo's kind": "ada.1",
        "not a token": "x" * 5000,
    }


def call(deployed: Deployed, method: str, template: str, auth: dict[str, str]) -> httpx.Response:
    path = template.replace("{record_id}", "r1").replace("{id}", "n1")
    headers = {"Idempotency-Key": str(uuid.uuid4()), "Origin": deployed.url} | auth
    body = {"id": "n1", "body": "b"} if method in ("POST", "PUT", "PATCH") else None
    return httpx.request(method, deployed.url + path, json=body, headers=headers, timeout=30)


def test_every_bad_token_is_401_on_every_guarded_route(deployed: Deployed) -> None:
    guarded = [route for route, (rule, _) in MATRIX.items() if rule is not Rule.PUBLIC]
    assert len(guarded) > 20  # the matrix, which test_access keeps equal to the app
    wrong = []
    for name, token in bad_tokens().items():
        for method, template in guarded:
            reply = call(deployed, method, template, {"Authorization": f"Bearer {token}"})
            if reply.status_code != 401:
                wrong.append(f"{name}: {method} {template}: {reply.status_code}")
    assert not wrong, "\n".join(wrong)


def test_users_and_the_operator_stay_on_their_own_routes(deployed: Deployed) -> None:
    wrong = []
    for (method, template), (rule, _) in MATRIX.items():
        if rule is Rule.OPERATOR:
            status = call(deployed, method, template, deployed.user("ada")).status_code
            if status != 404:
                wrong.append(f"ada on {method} {template}: {status}")
        if rule is Rule.USER:
            status = call(deployed, method, template, deployed.operator).status_code
            if status != 403:
                wrong.append(f"the operator on {method} {template}: {status}")
    assert not wrong, "\n".join(wrong)
