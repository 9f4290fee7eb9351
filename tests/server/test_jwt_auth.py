"""``JwtAuth``: real tokens made with PyJWT (keys with cryptography), checked by the
reference server on both backends; every refusal a 401 problem+json."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from starlette.applications import Starlette

from pigeon.core.wire import PROBLEM_JSON
from pigeon.exceptions import ConfigurationError
from pigeon.reference.notes import create_notes_app
from pigeon.reference.notes_reads import read_ledger
from pigeon.server import jwt_auth
from pigeon.server.jwt_auth import JwtAuth
from pigeon.storage.base import Database

from .conftest import OPERATOR, TestClient, operator_token

SECRET = "a-32-byte-or-longer-hs256-secret-for-tests"
AUDIENCE, ISSUER = "pigeon-tests", "https://issuer.test"


def claims(**changes: Any) -> dict[str, Any]:
    now = int(time.time())
    base = {"sub": "alice", "aud": AUDIENCE, "iss": ISSUER, "iat": now, "exp": now + 300}
    return {k: v for k, v in (base | changes).items() if v is not None}


def hs256(**changes: Any) -> str:
    return jwt.encode(claims(**changes), SECRET, algorithm="HS256")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def app_with(notes_db: Database, auth: JwtAuth) -> Starlette:
    return create_notes_app(
        notes_db, purge_interval=None, authenticate=auth, operator=operator_token()
    )


def hs_auth(**options: Any) -> JwtAuth:
    return JwtAuth(secret=SECRET, audience=AUDIENCE, issuer=ISSUER, **options)


def write(client: TestClient, token: str | None, note: str = "n") -> Any:
    headers = {"Idempotency-Key": str(uuid.uuid4())} | (bearer(token) if token else {})
    return client.post("/notes", json={"id": note}, headers=headers)


def _none_token() -> str:
    header = {"alg": "none", "typ": "JWT"}
    parts = [json.dumps(header).encode(), json.dumps(claims()).encode()]
    return ".".join(jwt.utils.base64url_encode(p).decode() for p in parts) + "."


def test_a_good_token_writes_as_its_subject_and_every_bad_one_is_a_401(notes_db: Database) -> None:
    now = int(time.time())
    refused = {
        "expired": hs256(exp=now - 120),
        "not yet valid": hs256(nbf=now + 120),
        "wrong audience": hs256(aud="another-service"),
        "no audience": hs256(aud=None),
        "wrong issuer": hs256(iss="https://evil.test"),
        "no expiry": hs256(exp=None),
        "no subject": hs256(sub=None),
        "a numeric subject": hs256(sub=7),
        "wrong signature": jwt.encode(claims(), SECRET + "x", algorithm="HS256"),
        "alg none": _none_token(),
        "HS512 when HS256 is configured": jwt.encode(claims(), SECRET * 2, algorithm="HS512"),
        "not a JWT": "alice.v1",
        "tampered payload": _tampered(hs256()),
    }
    with TestClient(app_with(notes_db, hs_auth())) as client:
        assert write(client, hs256()).status_code == 201
        for why, token in refused.items():
            reply = write(client, token, note=why)
            assert reply.status_code == 401, (why, reply.text)
            assert reply.headers["content-type"] == PROBLEM_JSON, why
            assert reply.headers["www-authenticate"] == "Bearer", why
            assert token not in reply.text, why
        assert write(client, None).status_code == 401  # no credentials: anonymous is off
    assert [row["principal"] for row in read_ledger(notes_db)] == ["alice"]


def _tampered(token: str) -> str:
    header, payload, signature = token.split(".")
    forged = jwt.utils.base64url_encode(json.dumps(claims(sub="mallory")).encode()).decode()
    assert forged != payload
    return f"{header}.{forged}.{signature}"


def test_the_leeway_forgives_bounded_clock_skew_and_no_more(notes_db: Database) -> None:
    now = int(time.time())
    with TestClient(app_with(notes_db, hs_auth(leeway=30))) as client:
        assert write(client, hs256(exp=now - 10), "a").status_code == 201
        assert write(client, hs256(nbf=now + 10), "b").status_code == 201
        assert write(client, hs256(exp=now - 60), "c").status_code == 401
    with pytest.raises(ConfigurationError, match="leeway"):
        hs_auth(leeway=3600)
    with pytest.raises(ConfigurationError, match="leeway"):
        hs_auth(leeway=float("nan"))


def test_principals_are_compared_exactly_as_the_token_says(notes_db: Database) -> None:
    with TestClient(app_with(notes_db, hs_auth())) as client:
        assert write(client, hs256(sub="alice"), "mine").status_code == 201
        upper = client.get("/notes/mine", headers=bearer(hs256(sub="Alice")))
        assert upper.status_code == 404  # "Alice" is someone else
        assert client.get("/notes/mine", headers=bearer(hs256(sub="alice"))).status_code == 200


def test_a_configured_claim_names_the_principal(notes_db: Database) -> None:
    auth = hs_auth(principal_claim="email")
    with TestClient(app_with(notes_db, auth)) as client:
        assert write(client, hs256(email="ada@example.org")).status_code == 201
        assert write(client, hs256(), "no-email").status_code == 401
    assert [row["principal"] for row in read_ledger(notes_db)] == ["ada@example.org"]


def test_a_user_token_is_no_operator_and_the_operator_token_is_no_user(notes_db: Database) -> None:
    with TestClient(app_with(notes_db, hs_auth())) as client:
        assert client.get("/pigeon/v1/ledger", headers=bearer(hs256())).status_code == 404
        assert client.get("/pigeon/v1/ledger", headers=OPERATOR).status_code == 200
        assert client.get("/notes", headers=OPERATOR).status_code == 403
        assert client.get("/pigeon/v1/ledger", headers=bearer(hs256(exp=1))).status_code == 401


def _rsa() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def test_rs256_and_es256_public_key_files(tmp_path: Path) -> None:
    rsa_key, ec_key = _rsa(), ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "rsa.pem").write_bytes(_pem(rsa_key))
    (tmp_path / "ec.pem").write_bytes(_pem(ec_key))
    files = [tmp_path / "rsa.pem", tmp_path / "ec.pem"]
    auth = JwtAuth.from_files(key_files=files, audience=AUDIENCE, issuer=ISSUER)
    assert auth.verify(jwt.encode(claims(), rsa_key, algorithm="RS256"))["sub"] == "alice"
    assert auth.verify(jwt.encode(claims(), ec_key, algorithm="ES256"))["sub"] == "alice"
    stranger = ec.generate_private_key(ec.SECP256R1())
    with pytest.raises(Exception, match="signature does not verify"):
        auth.verify(jwt.encode(claims(), stranger, algorithm="ES256"))


def test_a_public_key_cannot_be_used_as_an_hmac_secret(tmp_path: Path) -> None:
    """The algorithm-confusion attack: HS256 "signed" with the server's public key."""
    key = _rsa()
    auth = JwtAuth(public_keys=[_pem(key)], audience=AUDIENCE, issuer=ISSUER)
    header = jwt.utils.base64url_encode(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = jwt.utils.base64url_encode(json.dumps(claims()).encode())
    import hashlib
    import hmac

    signing_input = header + b"." + payload
    mac = hmac.new(_pem(key), signing_input, hashlib.sha256).digest()
    forged = (signing_input + b"." + jwt.utils.base64url_encode(mac)).decode()
    with pytest.raises(Exception, match="algorithm is not one"):
        auth.verify(forged)


def _jwks(*keys: tuple[str, rsa.RSAPrivateKey]) -> dict[str, Any]:
    entries = []
    for kid, key in keys:
        entry = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
        entries.append(entry | {"kid": kid, "alg": "RS256", "use": "sig"})
    return {"keys": entries}


def test_a_jwks_file_picks_the_key_by_kid_and_rotates_without_restart(
    tmp_path: Path, notes_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jwt_auth, "_RELOAD_EVERY", 0.0)
    old, new = _rsa(), _rsa()
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(_jwks(("old", old))))
    auth = JwtAuth.from_files(jwks_file=path, audience=AUDIENCE, issuer=ISSUER)

    def token(key: rsa.RSAPrivateKey, kid: str, sub: str = "alice") -> str:
        return jwt.encode(claims(sub=sub), key, algorithm="RS256", headers={"kid": kid})

    with TestClient(app_with(notes_db, auth)) as client:
        assert write(client, token(old, "old"), "1").status_code == 201
        assert write(client, token(new, "new"), "2").status_code == 401  # not published yet
        assert write(client, token(new, "old"), "3").status_code == 401  # kid of another key
        path.write_text(json.dumps(_jwks(("old", old), ("new", new))))
        _touch_later(path)
        assert write(client, token(new, "new"), "4").status_code == 201
        path.write_text("{ half a file")  # a broken rewrite keeps the keys in force
        _touch_later(path)
        assert write(client, token(old, "old"), "5").status_code == 201
    assert [row["principal"] for row in read_ledger(notes_db)] == ["alice", "alice", "alice"]


def _touch_later(path: Path) -> None:
    import os

    stat = path.stat()
    os.utime(path, (stat.st_atime, stat.st_mtime + 5))


def test_configurations_that_cannot_verify_safely_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="at least 32"):
        JwtAuth(secret="short")
    with pytest.raises(ConfigurationError, match="exactly one"):
        JwtAuth(secret=SECRET, public_keys=[_pem(_rsa())])
    with pytest.raises(ConfigurationError, match="exactly one"):
        JwtAuth()
    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    with pytest.raises(ConfigurationError, match="at least 2048"):
        JwtAuth(public_keys=[_pem(weak)])
    (tmp_path / "junk.pem").write_text("not a key")
    with pytest.raises(ConfigurationError, match="not a PEM public key"):
        JwtAuth.from_files(key_files=[tmp_path / "junk.pem"])
    with pytest.raises(ConfigurationError, match="cannot read"):
        JwtAuth.from_files(jwks_file=tmp_path / "missing.json")
    (tmp_path / "empty.json").write_text('{"keys": []}')
    with pytest.raises(ConfigurationError, match="no usable signing key"):
        JwtAuth.from_files(jwks_file=tmp_path / "empty.json")
    assert SECRET not in repr(JwtAuth(secret=SECRET))


def test_an_operator_can_be_told_by_a_claim_of_the_same_tokens(notes_db: Database) -> None:
    """The operator hook instead of a shared token: a role claim in a verified JWT. A
    token the hook cannot verify is a 401, as from the authenticator."""
    from pigeon.server.auth import bearer_token

    auth = hs_auth()

    def is_operator(conn: Any) -> bool:
        token = bearer_token(conn)
        return token is not None and auth.verify(token).get("role") == "operator"

    app = create_notes_app(notes_db, purge_interval=None, authenticate=auth, operator=is_operator)
    with TestClient(app) as client:
        ops = bearer(hs256(sub="ops-1", role="operator"))
        assert client.get("/pigeon/v1/ledger", headers=ops).status_code == 200
        assert client.get("/notes", headers=ops).status_code == 403
        assert client.get("/pigeon/v1/ledger", headers=bearer(hs256())).status_code == 404
        expired = bearer(hs256(role="operator", exp=1))
        assert client.get("/pigeon/v1/ledger", headers=expired).status_code == 401


def test_numeric_dates_must_be_numbers_within_the_calendar(notes_db: Database) -> None:
    now = int(time.time())
    refused = {
        "exp as a numeric string": hs256(exp=str(now + 300)),
        "exp = 1e308": hs256(exp=1e308),
        "exp past the year 9999": hs256(exp=jwt_auth.MAX_NUMERIC_DATE + 1),
        "exp true": hs256(exp=True),
        "iat as a numeric string": hs256(iat=str(now)),
        "nbf as a numeric string": hs256(nbf=str(now - 10)),
        "a negative iat": hs256(iat=-1),
    }
    with TestClient(app_with(notes_db, hs_auth())) as client:
        assert write(client, hs256(exp=now + 300.5, iat=now - 0.5)).status_code == 201
        for why, token in refused.items():
            reply = write(client, token, note=why)
            assert reply.status_code == 401, (why, reply.text)


def test_a_configured_lifetime_bounds_a_token_from_its_issue_and_from_now(
    notes_db: Database,
) -> None:
    now = int(time.time())
    with TestClient(app_with(notes_db, hs_auth(max_lifetime=3600, leeway=0))) as client:
        assert write(client, hs256(iat=now, exp=now + 3600), "a").status_code == 201
        assert write(client, hs256(iat=None, exp=now + 3000), "b").status_code == 201
        too_long = {
            "exp far from now": hs256(iat=None, exp=now + 7200),
            "exp far from iat": hs256(iat=now - 7200, exp=now + 60),
        }
        for why, token in too_long.items():
            reply = write(client, token, note=why)
            assert reply.status_code == 401, (why, reply.text)
            assert "lives longer" in reply.json()["detail"], why
    for bad in (0, -1, float("nan")):
        with pytest.raises(ConfigurationError, match="max_lifetime"):
            hs_auth(max_lifetime=bad)


# A principal the store cannot keep as text: a lone surrogate, controls, format characters.
UNPRINTABLE_SUBJECTS = ("\ud800x", "a\x00b", "a\nb", "\u202eevil", "a\u200bb")


def test_a_principal_that_is_not_printable_text_is_a_401_on_every_user_route(
    notes_db: Database,
) -> None:
    with TestClient(app_with(notes_db, hs_auth())) as client:
        for subject in UNPRINTABLE_SUBJECTS:
            headers = bearer(hs256(sub=subject)) | {"Idempotency-Key": str(uuid.uuid4())}
            for method, path in (
                ("GET", "/notes"),
                ("GET", "/notes/x"),
                ("POST", "/notes"),
                ("PUT", "/notes/x"),
                ("POST", "/pigeon/v1/batch"),
                ("GET", "/pigeon/v1/outcomes"),
            ):
                reply = client.request(method, path, headers=headers, json={"id": "x"})
                assert reply.status_code == 401, (subject, method, path, reply.text)
    assert read_ledger(notes_db) == []


def test_the_demo_authenticator_s_principals_meet_the_same_rule(notes_db: Database) -> None:
    app = create_notes_app(notes_db, purge_interval=None)  # BearerAuth, the stand-in
    with TestClient(app) as client:
        for raw in (b"Bearer a\tb.1", b"Bearer \xc2\x85.1", b"Bearer \xa0x.1"):
            reply = client.get("/notes", headers={"Authorization": raw})
            assert reply.status_code == 401, (raw, reply.text)
        assert client.get("/notes", headers={"Authorization": "Bearer ada.1"}).status_code == 200
