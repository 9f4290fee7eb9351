"""Last-write-wins on the server: clocks decide, skewed devices do not win, losers are kept."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pigeon.core.clock import HLCTimestamp
from pigeon.reference.conflicts import BoundedClock, Stamped, corrected, read_outcomes
from pigeon.reference.notes_reads import read_ledger
from pigeon.storage.base import Database
from tests.clocks import FakeClock

from .conftest import NotesClient, TestClient

T0 = 1_700_000_000_000  # server wall clock, ms
HOUR = 3_600_000
_keys = itertools.count()


def stamp(wall_ms: int, node: str, counter: int = 0) -> str:
    return HLCTimestamp(wall_ms, counter, node).encode()


def put(
    client: TestClient,
    note: str,
    data: dict[str, Any],
    server_clock: str,
    device: str | None = None,
) -> Any:
    headers = {"Idempotency-Key": f"lww-{next(_keys)}", "X-Pigeon-Clock": server_clock}
    if device is not None:
        headers["X-Pigeon-Device-Clock"] = device
    return client.put(f"/lww-notes/{note}", json=data, headers=headers)


@pytest.fixture
def server_time() -> FakeClock:
    return FakeClock(T0 / 1000)


@pytest.fixture
def client(notes_client: NotesClient, server_time: FakeClock) -> TestClient:
    return notes_client(now=server_time, lww_collections=["lww-notes"])


def test_the_greater_clock_wins_and_the_older_write_is_acknowledged_and_recorded(
    client: TestClient, notes_db: Database
) -> None:
    first = put(client, "n", {"text": "newer"}, stamp(T0 - 1000, "a"))
    assert first.status_code == 201 and first.json()["outcome"] == "created"
    older = put(client, "n", {"text": "older"}, stamp(T0 - 5000, "b"))
    assert older.status_code == 200 and older.json()["outcome"] == "lost"
    assert older.json()["current"]["data"] == {"text": "newer"}
    assert older.headers["etag"] == '"1"'  # nothing was written
    newest = put(client, "n", {"text": "newest"}, stamp(T0 - 500, "b"))
    assert newest.json()["outcome"] == "won" and newest.headers["etag"] == '"2"'
    assert client.get("/lww-notes/n").json()["data"] == {"text": "newest"}
    outcomes = read_outcomes(notes_db, "anonymous")
    assert [(o["outcome"], o["payload"]) for o in outcomes] == [
        ("lost", {"text": "older"}),
        ("won", {"text": "newest"}),
    ]
    assert len(read_ledger(notes_db)) == 3  # every acknowledged write is accounted for


@pytest.mark.parametrize("order", ["fast-first", "fast-last"])
def test_a_device_hours_fast_does_not_win_over_a_later_edit(
    client: TestClient, server_time: FakeClock, order: str
) -> None:
    # Real time T0: the fast phone (clock +3 h) edits; T0+60 s: an accurate laptop edits.
    fast = (stamp(T0 + 3 * HOUR, "fast"), {"text": "fast phone, earlier"})
    right = (stamp(T0 + 60_000, "laptop"), {"text": "laptop, later"})
    arrivals = [(fast, 3 * HOUR), (right, 0)]
    if order == "fast-last":
        arrivals.reverse()
    for (server_clock, data), offset in arrivals:
        server_time.advance(120)
        device_now = stamp(int(server_time() * 1000) + offset, "x")
        put(client, "n", data, server_clock, device=device_now)
    assert client.get("/lww-notes/n").json()["data"] == {"text": "laptop, later"}


@pytest.mark.parametrize("order", ["slow-first", "slow-last"])
def test_a_device_hours_slow_still_wins_with_its_later_edit(
    client: TestClient, server_time: FakeClock, order: str
) -> None:
    # T0+60 s: an accurate laptop edits; T0+90 s: the slow phone (clock -3 h) edits.
    right = (stamp(T0 + 60_000, "laptop"), {"text": "laptop, earlier"})
    slow = (stamp(T0 + 90_000 - 3 * HOUR, "slow"), {"text": "slow phone, later"})
    arrivals = [(slow, -3 * HOUR), (right, 0)]
    if order == "slow-last":
        arrivals.reverse()
    for (server_clock, data), offset in arrivals:
        server_time.advance(120)
        put(client, "n", data, server_clock, device=stamp(int(server_time() * 1000) + offset, "x"))
    assert client.get("/lww-notes/n").json()["data"] == {"text": "slow phone, later"}


def test_an_uncorrected_future_stamp_is_bounded_and_does_not_drag_the_server_clock(
    client: TestClient, notes_db: Database
) -> None:
    future = put(client, "n", {"text": "from the future"}, stamp(T0 + 5 * HOUR, "fast"))
    assert future.json()["current"]["clock"] <= stamp(T0 + 60_000, "fast")
    # A write with no clock of its own gets the server's stamp: near the server's time.
    client.post("/notes", json={"id": "x"}, headers={"Idempotency-Key": "plain-1"})
    [plain] = [e for e in read_ledger(notes_db) if e["idempotency_key"] == "plain-1"]
    assert HLCTimestamp.decode(plain["clock"]).wall_ms < T0 + HOUR


def test_a_delete_leaves_a_tombstone_that_beats_older_writes(client: TestClient) -> None:
    put(client, "n", {"text": "v1"}, stamp(T0 - 3000, "a"))
    gone = client.delete(
        "/lww-notes/n",
        headers={"Idempotency-Key": "del-1", "X-Pigeon-Clock": stamp(T0 - 2000, "b")},
    )
    assert gone.json()["outcome"] == "won" and gone.json()["current"]["deleted"] is True
    late = put(client, "n", {"text": "late but older"}, stamp(T0 - 2500, "a"))
    assert late.json()["outcome"] == "lost"
    assert client.get("/lww-notes/n").status_code == 404
    back = put(client, "n", {"text": "after the delete"}, stamp(T0 - 1000, "a"))
    assert back.json()["outcome"] == "won"
    assert client.get("/lww-notes/n").json()["data"] == {"text": "after the delete"}


def test_bad_input_is_refused_with_a_reason(client: TestClient) -> None:
    headers = {"Idempotency-Key": "bad-1"}
    refused = client.put("/lww-notes/n", json=[1, 2], headers=headers)
    assert refused.status_code == 400 and "JSON object" in refused.json()["detail"]
    no_id = client.post("/lww-notes", json={"text": "x"}, headers={"Idempotency-Key": "bad-2"})
    assert no_id.status_code == 400 and "'id'" in no_id.json()["detail"]
    missing = client.delete("/lww-notes/nope", headers={"Idempotency-Key": "bad-3"})
    assert missing.status_code == 404


def test_the_server_clock_refuses_stamps_beyond_the_skew_bound() -> None:
    server_clock = BoundedClock("server", wall=lambda: T0, max_skew_ms=1000)
    assert server_clock.receive(HLCTimestamp(T0 + HOUR, 0, "fast")).wall_ms == T0
    assert server_clock.receive(HLCTimestamp(T0 + 500, 3, "ok")) == HLCTimestamp(
        T0 + 500, 4, "server"
    )


# -- properties -----------------------------------------------------------------------

# A write: (device, real time it was made in ms after T0). Devices have fixed clock offsets.
writes = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 600_000)), min_size=1, max_size=8, unique=True
)
offsets = st.lists(st.integers(-5 * HOUR, 5 * HOUR), min_size=4, max_size=4)


@given(writes, offsets, st.randoms(use_true_random=False))
def test_lww_ends_with_the_greatest_clock_whatever_the_arrival_order(
    made: list[tuple[int, int]], skew: list[int], rng: Any
) -> None:
    def arrive(device: int, real: int, at: int) -> Stamped:
        raw = HLCTimestamp(T0 + real + skew[device], 0, f"d{device}")
        device_now = HLCTimestamp(T0 + at + skew[device], 0, f"d{device}")
        effective = corrected(raw, device_now=device_now, server_wall_ms=T0 + at, max_skew_ms=0)
        return Stamped(effective, raw)

    order = list(made)
    rng.shuffle(order)
    held: Stamped | None = None
    for n, (device, real) in enumerate(order):
        incoming = arrive(device, real, at=700_000 + n * 1000)
        if held is None or incoming.supersedes(held):
            held = incoming
    assert held is not None
    latest = max(made, key=lambda w: (w[1], f"d{w[0]}"))
    assert held.raw.node == f"d{latest[0]}"
    assert held.raw.wall_ms == T0 + latest[1] + skew[latest[0]]
