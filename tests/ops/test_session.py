"""The operations page's browser sessions and sign-in limiter, on both backends, with a
clock moved by hand: a session is a random id kept hashed in the database, never the
credential; it ends at sign-out (every copy of the cookie with it), after its idle limit or
its lifetime, and when the operator credential changes. Failed sign-ins block a client for
a delay that doubles; other clients still sign in; all clients together have a guard too.
The sign-in form answers every input with a page, never a 5xx."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.requests import Request
from typer.testing import CliRunner

from pigeon.cli import app as cli_app
from pigeon.exceptions import ConfigurationError
from pigeon.ops import web
from pigeon.ops.session import SESSIONS, Sessions, csrf_token, operator_fingerprint
from pigeon.ops.signin_limit import SignInBackoff, SignInLimit, SignInLimiter, client_key
from pigeon.server.access import OperatorToken
from pigeon.server.options import SessionPolicy
from pigeon.storage.base import Database
from tests.clocks import FakeClock
from tests.ops.scenario import ops_app, seed
from tests.server.conftest import OPERATOR_TOKEN, SERVER_START, TestClient

TOKEN = OperatorToken("operator-token-of-the-session-tests")
OTHER = OperatorToken("another-operator-token-entirely-9876")


def stored_rows(notes_db: Database) -> list[dict[str, object]]:
    with notes_db.transaction() as tx:
        return list(tx.sql("SELECT * FROM pigeon_ops_sessions").fetchall())


def test_a_session_is_a_random_id_kept_hashed_and_ended_by_sign_out(notes_db: Database) -> None:
    sessions = Sessions(notes_db, SessionPolicy(), FakeClock(SERVER_START))
    session_id = sessions.open("ünï⌘ 🐦", TOKEN)
    assert TOKEN.token not in session_id and len(session_id) == 43
    (row,) = stored_rows(notes_db)
    assert row["id_hash"] == hashlib.sha256(session_id.encode()).hexdigest()
    assert session_id not in str(row) and TOKEN.token not in str(row)
    found = sessions.lookup(session_id, TOKEN)
    assert found is not None and found.name == "ünï⌘ 🐦" and session_id not in repr(found)
    sessions.close(session_id)
    assert sessions.lookup(session_id, TOKEN) is None  # every copy of the cookie, too
    assert stored_rows(notes_db) == []


@pytest.mark.parametrize("value", ["", "x", "a" * 42, "a" * 44, "é" * 43, "a" * 42 + "\x00"])
def test_a_value_of_another_shape_opens_nothing(notes_db: Database, value: str) -> None:
    sessions = Sessions(notes_db)
    sessions.open("ada", TOKEN)
    assert sessions.lookup(value, TOKEN) is None
    sessions.close(value)  # a no-op, not an error
    assert len(stored_rows(notes_db)) == 1


def test_idle_and_absolute_expiry(notes_db: Database) -> None:
    clock = FakeClock(SERVER_START)
    sessions = Sessions(notes_db, SessionPolicy(idle=100, lifetime=1000), clock)
    idle = sessions.open("ada", TOKEN)
    busy = sessions.open("bob", TOKEN)
    for _ in range(9):  # bob uses his every 90 s; ada leaves hers
        clock.advance(90)
        assert sessions.lookup(busy, TOKEN) is not None
    assert sessions.lookup(idle, TOKEN) is None  # idle 810 s > 100 s
    clock.advance(95)  # 905 s old: used within the idle limit, still within its lifetime
    assert sessions.lookup(busy, TOKEN) is not None
    clock.advance(96)  # 1001 s old: past its lifetime however busy
    assert sessions.lookup(busy, TOKEN) is None
    assert stored_rows(notes_db) == []  # ended sessions are deleted when seen


def test_a_changed_operator_credential_ends_every_session(notes_db: Database) -> None:
    sessions = Sessions(notes_db)
    session_id = sessions.open("ada", TOKEN)
    assert sessions.lookup(session_id, OperatorToken(TOKEN.token)) is not None  # same token
    assert sessions.lookup(session_id, OTHER) is None
    assert sessions.lookup(session_id, TOKEN) is None  # deleted when seen under the other
    assert operator_fingerprint(TOKEN) != operator_fingerprint(OTHER)
    assert TOKEN.token not in operator_fingerprint(TOKEN)


def test_session_policy_from_the_environment() -> None:
    assert SessionPolicy.from_env({}) == SessionPolicy()
    found = SessionPolicy.from_env(
        {"PIGEON_OPS_SESSION_IDLE": "60", "PIGEON_OPS_SESSION_LIFETIME": " 120 "}
    )
    assert (found.idle, found.lifetime) == (60, 120)
    for bad in ("0", "-1", "nan", "inf", "1e99", "soon"):
        with pytest.raises(ConfigurationError, match="PIGEON_OPS_SESSION_IDLE"):
            SessionPolicy.from_env({"PIGEON_OPS_SESSION_IDLE": bad})


def test_serve_refuses_a_bad_session_lifetime_before_it_listens(tmp_path: object) -> None:
    result = CliRunner().invoke(
        cli_app,
        ["serve", "--db", f"{tmp_path}/s.db", "--port", "0"],
        env={"PIGEON_OPS_SESSION_LIFETIME": "forever"},
    )
    assert result.exit_code == 2 and "PIGEON_OPS_SESSION_LIFETIME" in result.output


# --- the sign-in limiter -----------------------------------------------------------------

LIMIT = SignInLimit(
    client=SignInBackoff(free=3, base=1.0, cap=8.0, forget=600.0),
    everyone=SignInBackoff(free=10, base=1.0, cap=4.0, forget=60.0),
)


def test_failures_block_a_client_for_a_doubling_delay(notes_db: Database) -> None:
    clock = FakeClock(SERVER_START)
    limiter = SignInLimiter(notes_db, LIMIT, clock)
    waits = []
    for _ in range(7):
        assert limiter.retry_after("10.0.0.1") == 0 or waits
        limiter.failed("10.0.0.1")
        waits.append(limiter.retry_after("10.0.0.1"))
        clock.advance(waits[-1])  # wait it out, then fail again
    assert waits == [0, 0, 1, 2, 4, 8, 8]  # free, free, then doubling up to the cap
    assert limiter.retry_after("10.0.0.2") == 0  # another client is not held back
    limiter.failed("10.0.0.1")
    limiter.succeeded("10.0.0.1")  # signing in clears the client's count
    assert limiter.retry_after("10.0.0.1") == 0
    limiter.failed("10.0.0.1")
    assert limiter.retry_after("10.0.0.1") == 0


def test_a_quiet_client_starts_again(notes_db: Database) -> None:
    clock = FakeClock(SERVER_START)
    limiter = SignInLimiter(notes_db, LIMIT, clock)
    for _ in range(3):
        limiter.failed("10.0.0.1")
    assert limiter.retry_after("10.0.0.1") == 1
    clock.advance(601)
    limiter.failed("10.0.0.1")  # the first of a new count
    assert limiter.retry_after("10.0.0.1") == 0


def test_the_global_guard_slows_many_clients_together(notes_db: Database) -> None:
    clock = FakeClock(SERVER_START)
    limiter = SignInLimiter(notes_db, LIMIT, clock)
    for n in range(10):  # ten clients, one failure each: none blocked on its own
        limiter.failed(f"10.0.1.{n}")
    assert limiter.retry_after("10.0.2.1") == 1  # a fresh client waits too, briefly
    clock.advance(1)
    limiter.failed("10.0.2.2")
    assert limiter.retry_after("10.0.2.3") == 2
    clock.advance(61)  # the global count is forgotten after a minute without failures
    limiter.failed("10.0.2.4")
    assert limiter.retry_after("10.0.2.5") == 0


def test_client_keys() -> None:
    assert client_key("192.0.2.7") == "192.0.2.7"
    assert client_key("::ffff:192.0.2.7") == "192.0.2.7"
    assert (
        client_key("2001:db8:1:2:3:4:5:6") == client_key("2001:db8:1:2::9") == ("2001:db8:1:2::/64")
    )
    assert client_key(None) == "unknown" and client_key("*") != "*"


# --- the sign-in form over HTTP ----------------------------------------------------------


@pytest.fixture
def page(notes_db: Database) -> Iterator[TestClient]:
    app = ops_app(notes_db)
    with TestClient(app, base_url="http://testserver") as client:
        yield client


def sign_in(client: httpx.Client | TestClient, token: str, name: str) -> httpx.Response:
    return client.post(
        "/pigeon/login",
        headers={"Origin": "http://testserver"},
        data={"token": token, "name": name},
        follow_redirects=False,
    )


@pytest.mark.parametrize("name", ["ünï⌘", "Zoë 🐦", "名前", "x" * 500])
def test_any_printable_name_signs_in(notes_db: Database, page: TestClient, name: str) -> None:
    seed(notes_db, 20)
    signed = sign_in(page, OPERATOR_TOKEN, name)
    assert signed.status_code == 303, signed.text
    session_id = page.cookies["pigeon_ops"]
    group = {"owner": "comms-team", "queue": "notify", "error_class": "PermanentError"}
    confirm = page.post(
        "/pigeon/actions/preview",
        headers={"Origin": "http://testserver"},
        data=group | {"do": "retry:group", "csrf": csrf_token(session_id)},
    )
    assert confirm.status_code == 200 and f'value="{name[:64]}"' in confirm.text


@pytest.mark.parametrize("name", ["", "  ", "a\x00b", "tab\there", "\u202eevil"])
def test_an_unprintable_name_is_refused_with_a_page(page: TestClient, name: str) -> None:
    refused = sign_in(page, OPERATOR_TOKEN, name)
    assert refused.status_code == 401 and "give your name" in refused.text
    assert "pigeon_ops" not in page.cookies


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(token=st.text(max_size=80), name=st.text(max_size=80), extra=st.text(max_size=20))
def test_the_sign_in_form_never_answers_5xx(
    page: TestClient, token: str, name: str, extra: str
) -> None:
    answer = page.post(
        "/pigeon/login",
        headers={"Origin": "http://testserver"},
        data={"token": token, "name": name, extra: extra},
        follow_redirects=False,
    )
    assert answer.status_code in (303, 400, 401, 429), answer.status_code


def test_the_form_as_raw_bytes_never_answers_5xx(page: TestClient) -> None:
    for body in (b"token=%FF%FE&name=%C3", b"name=\xff\xfe", b"token=a&token=b&name=%00"):
        answer = page.post(
            "/pigeon/login",
            headers={
                "Origin": "http://testserver",
                "Content-Type": "application/x-www-form-urlencoded",
            },
            content=body,
        )
        assert 400 <= answer.status_code < 500, (body, answer.status_code)


def _stream_form(chunks: int) -> float:
    """Seconds ``web._form`` takes for a form of ``chunks`` bytes that arrives one byte a
    message, as a client trickling it would send it."""
    sent = 0

    async def receive() -> dict[str, object]:
        nonlocal sent
        sent += 1
        return {"type": "http.request", "body": b"a", "more_body": sent < chunks}

    scope = {"type": "http", "method": "POST", "path": "/pigeon/login", "headers": []}

    async def read() -> float:
        started = time.perf_counter()
        form = await web._form(Request(scope, receive))
        assert form == {"a" * chunks: [""]}
        return time.perf_counter() - started

    return asyncio.run(read())


def test_a_form_sent_a_byte_at_a_time_costs_time_linear_in_its_size() -> None:
    """The sign-in form (anyone may post it) was joined with bytes +=: quadratic, 0.8 s
    of the event loop for its 256 KiB sent a byte at a time. Eight times the bytes now cost
    about eight times the time (before: 29 times)."""
    times: dict[int, list[float]] = {1 << 15: [], 1 << 18: []}
    for _ in range(3):  # interleaved, the fastest of each kept: a busy moment falls on both
        for size, taken in times.items():
            taken.append(_stream_form(size))
    small, large = (min(taken) for taken in times.values())
    assert large < 16 * small, (small, large)


def test_the_form_is_parsed_off_the_event_loop(
    page: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Percent-escapes of 256 KiB take the parser tens of milliseconds."""
    looped: list[bool] = []
    parsed = web._parsed

    def recorded(body: bytes) -> object:
        try:
            asyncio.get_running_loop()
            looped.append(True)
        except RuntimeError:
            looped.append(False)
        return parsed(body)

    monkeypatch.setattr(web, "_parsed", recorded)
    assert sign_in(page, "not-the-token", "ada").status_code == 401
    assert looped == [False]


def test_the_limiter_rows_are_in_the_database(notes_db: Database) -> None:
    limiter = SignInLimiter(notes_db, LIMIT, FakeClock(SERVER_START))
    limiter.failed("10.0.0.1")
    with notes_db.transaction() as tx:
        rows = SESSIONS.run(tx, "signin_blocks", {"client": "10.0.0.1"}).fetchall()
    assert {r["client"]: r["failures"] for r in rows} == {"10.0.0.1": 1, "*": 1}
