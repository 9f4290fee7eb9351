"""Task payload versions: the upcaster chain declared on a task (checked at registration,
resolved and applied at run time), the claim that leaves a newer payload alone, and the
worker that runs an old payload through the chain, on each jobs store."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pigeon.exceptions import ConfigurationError, InvalidOperation, UpcastFailed
from pigeon.jobs.app import App
from pigeon.jobs.failed import list_jobs, show_job
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import JobManager
from pigeon.jobs.options import WorkerOptions
from pigeon.jobs.registry import FORGET_AFTER, LIVE_FOR, Advert, live_workers, newest_known
from pigeon.jobs.rows import WorkerRow
from pigeon.jobs.stores import BuiltinStore
from pigeon.jobs.stores.memory import MemoryJobStore
from pigeon.jobs.versions import PayloadVersions, Upcaster
from pigeon.jobs.worker import Worker
from tests.clocks import FakeClock
from tests.waiting import wait_for

from .test_worker_policy import run, statuses


def _recorder(step: int) -> Upcaster:
    """An upcaster that appends the version it starts from to the payload's "path"."""
    return lambda payload: {**payload, "path": [*payload.get("path", []), step]}


def _valid(version: int, oldest: int) -> PayloadVersions:
    steps = {n: _recorder(n) for n in range(oldest, version)}
    return PayloadVersions.declare("t", version, steps)


@given(st.integers(1, 12), st.sets(st.integers(-2, 14), max_size=8))
def test_a_declaration_is_accepted_exactly_when_its_chain_has_no_gap(
    version: int, keys: set[int]
) -> None:
    steps = {k: _recorder(k) for k in keys}
    chain = not keys or (keys == set(range(min(keys), version)) and min(keys) >= 1)
    if chain:
        declared = PayloadVersions.declare("t", version, steps)
        assert declared.oldest == (min(keys) if keys else version)
    else:
        with pytest.raises(ConfigurationError, match="'t'"):
            PayloadVersions.declare("t", version, steps)


@given(st.integers(1, 12).flatmap(lambda v: st.tuples(st.just(v), st.integers(1, v))))
def test_every_known_version_is_upcast_through_each_step_in_order(pair: tuple[int, int]) -> None:
    version, oldest = pair
    declared = _valid(version, oldest)
    for start in range(oldest, version + 1):
        assert declared.chain(start) == list(range(start, version))
        path = list(range(start, version))
        assert declared.upcast({"n": 1, "path": []}, start) == {"n": 1, "path": path}
        assert declared.knows(start)


@given(st.integers(2, 12).flatmap(lambda v: st.tuples(st.just(v), st.integers(2, v))))
def test_a_version_before_the_chain_is_refused_naming_task_and_versions(
    pair: tuple[int, int],
) -> None:
    version, oldest = pair
    declared = _valid(version, oldest)
    for start in range(1, oldest):
        assert not declared.knows(start)
        with pytest.raises(UpcastFailed) as caught:
            declared.chain(start)
        message = str(caught.value)
        assert "'t'" in message and f"version {start}" in message
        assert f"version {version}" in message and f"version {oldest}" in message
    assert not declared.knows(version + 1)


def test_a_gap_in_the_chain_is_refused_at_registration_naming_the_missing_step() -> None:
    app = App()
    with pytest.raises(ConfigurationError, match=r"'charge' is version 3 .* from version 2"):
        app.task(lambda n: None, name="charge", version=3, upcast={1: lambda p: p})
    for bad in (0, -1, True, 1.5, "2"):
        with pytest.raises(ConfigurationError, match="version must be an int"):
            app.task(lambda n: None, name=f"v{bad!r}", version=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="from version 2 is not an older"):
        app.task(lambda n: None, name="same", version=2, upcast={2: lambda p: p})
    with pytest.raises(ConfigurationError, match="not callable"):
        app.task(lambda n: None, name="odd", version=2, upcast={1: "upcast"})  # type: ignore[dict-item]
    assert app.tasks == {}


def test_an_upcaster_that_raises_or_returns_no_object_fails_naming_the_step() -> None:
    def boom(payload: dict[str, Any]) -> dict[str, Any]:
        raise KeyError("count")

    declared = PayloadVersions.declare("t", 3, {1: boom, 2: lambda p: p})
    with pytest.raises(
        UpcastFailed, match=r"'t': upcasting .* from version 1 to 2 raised KeyError"
    ):
        declared.upcast({}, 1)
    odd = PayloadVersions.declare("t", 2, {1: lambda p: [1]})  # type: ignore[dict-item,return-value]
    with pytest.raises(UpcastFailed, match="returned list"):
        odd.upcast({}, 1)


def _apps(ran: list[tuple[int, Any]] | None = None) -> tuple[App, App]:
    """The same task before (version 1: ``count``) and after (version 2: ``quantity``)
    its payload changed; each run is appended to ``ran``."""
    seen = [] if ran is None else ran
    old, new = App(), App()

    @old.task(queue="q", fields=("n", "count"))
    def tally(n: int, count: int) -> None:
        seen.append((n, count))

    @new.task(
        queue="q", name="tally", fields=("n", "quantity"), version=2,
        upcast={1: lambda p: {"n": p["n"], "quantity": {"units": p["count"]}}},
    )  # fmt: skip
    def tally_v2(n: int, quantity: dict[str, int]) -> None:
        seen.append((n, quantity))

    return old, new


def test_the_upcast_payload_is_checked_against_the_task_fields() -> None:
    app = App()
    app.task(
        lambda n: None, queue="q", name="t", fields=("n",), version=2,
        upcast={1: lambda p: {"n": 1, "secret": "x"}},
    )  # fmt: skip
    with pytest.raises(UpcastFailed, match=r"from version 1 to 2 does not fit.*'secret'"):
        app.tasks["t"].current({"n": 1}, 1)


def test_jobs_carry_their_task_version_and_a_claim_leaves_newer_ones(
    any_store: BuiltinStore, clock: FakeClock
) -> None:
    old, new = _apps()
    before, after = JobManager(any_store, old, clock=clock), JobManager(any_store, new, clock=clock)
    v1 = before.enqueue(JobSpec("q", "tally", {"n": 1, "count": 3}))
    v2 = after.enqueue(JobSpec("q", "tally", {"n": 2, "quantity": {"units": 4}}))
    assert [show_job(any_store, i)["version"] for i in (v1, v2)] == [1, 2]
    assert before.known_versions() == {"tally": 1} and after.known_versions() == {"tally": 2}
    (job,) = before.lease_jobs("q", "old-worker", 10, lease=5)
    assert (job.id, job.version) == (v1, 1)
    assert before.lease_jobs("q", "old-worker", 10, lease=5) == []  # v2 is left alone
    (newer,) = after.lease_jobs("q", "new-worker", 10, lease=5)
    assert (newer.id, newer.version, newer.payload["quantity"]) == (v2, 2, {"units": 4})
    clock.advance(6)  # both leases expire: the old worker rescues only what it knows
    assert [j.id for j in before.lease_jobs("q", "old-worker", 10, lease=5)] == [v1]
    assert [j.id for j in after.lease_jobs("q", "new-worker", 10, lease=5)] == [v2]


def test_a_claim_takes_only_the_tasks_its_app_declares(
    any_store: BuiltinStore, clock: FakeClock
) -> None:
    """A deploy that adds a task: the new intake enqueues it before every worker of its
    queue runs the new code. An old worker's claim leaves it (never fails it as a task
    it has no function for); a new worker's takes it. A job of a task the new code
    removed is left by the new worker the same way."""
    old, new = _apps()
    new.task(lambda n: None, queue="q", name="added")
    gone = App()
    gone.task(lambda n: None, queue="q", name="removed")
    added = JobManager(any_store, new, clock=clock).enqueue(JobSpec("q", "added", {"n": 1}))
    removed = JobManager(any_store, gone, clock=clock).enqueue(JobSpec("q", "removed", {"n": 2}))
    before, after = JobManager(any_store, old, clock=clock), JobManager(any_store, new, clock=clock)
    assert after.known_versions() == {"tally": 2, "added": 1}
    assert before.lease_jobs("q", "old-worker", 10, lease=5) == []
    assert [j.id for j in after.lease_jobs("q", "new-worker", 10, lease=5)] == [added]
    clock.advance(6)  # its lease expires: the old worker does not rescue it either
    assert before.lease_jobs("q", "old-worker", 10, lease=5) == []
    assert [j.id for j in after.lease_jobs("q", "new-worker", 10, lease=5)] == [added]
    assert show_job(any_store, removed)["status"] == "queued"
    # Without an app, or with one that declares no task (a manager driven by hand, by a
    # tool or a test): every task, at version 1.
    assert JobManager(any_store, clock=clock).known_versions() == {"": 1}
    assert JobManager(any_store, App(default_owner="ops")).known_versions() == {"": 1}
    (job,) = JobManager(any_store, clock=clock).lease_jobs("q", "bare", 10, lease=5)
    assert job.id == removed


def test_a_worker_whose_app_lacks_the_task_leaves_its_jobs_queued() -> None:
    """A worker runs what it claims: its claim takes only its app's tasks, none when the
    app declares none (a manager driven by hand would take every task)."""
    store = MemoryJobStore()
    unknown = JobManager(store).enqueue(JobSpec("q", "elsewhere", {"n": 1}))  # due first
    old, _ = _apps()
    JobManager(store, old).enqueue(JobSpec("q", "tally", {"n": 2, "count": 1}))
    run(old, store, lambda: statuses(store) == ["queued", "succeeded"])
    empty = App()
    empty.queue("q")
    worker = Worker(empty, store, {"q": 1})
    assert worker.manager.known_versions() == {}
    assert worker.manager.lease_jobs("q", worker.name, 10, lease=5) == []
    assert (show_job(store, unknown)["status"], show_job(store, unknown)["attempts"]) == (
        "queued",
        0,
    )


def test_an_explicit_version_is_checked_by_the_app_and_stored_as_given(
    any_store: BuiltinStore, clock: FakeClock
) -> None:
    old, new = _apps()
    m = JobManager(any_store, new, clock=clock, rng=random.Random(1))
    job_id = m.enqueue(JobSpec("q", "tally", {"n": 1, "count": 2}, version=1))
    row = show_job(any_store, job_id)
    assert (row["version"], row["payload"]) == (1, {"count": 2, "n": 1})
    with pytest.raises(UpcastFailed):  # an old payload that does not upcast: refused now
        m.enqueue(JobSpec("q", "tally", {"n": 1}, version=1))
    with pytest.raises(InvalidOperation, match="version 2 in this app"):
        m.enqueue(JobSpec("q", "tally", {"n": 1, "quantity": 1}, version=3))
    with pytest.raises(InvalidOperation, match="version must be an integer"):
        JobSpec("q", "tally", {}, version=0)
    # Without an app a producer writes what it says, version 1 unless it says otherwise.
    bare = JobManager(any_store, clock=clock)
    assert show_job(any_store, bare.enqueue(JobSpec("q", "tally", {"n": 3})))["version"] == 1
    some = bare.enqueue(JobSpec("q", "tally", {"n": 4, "quantity": 1}, version=2))
    assert show_job(any_store, some)["version"] == 2
    with pytest.raises(InvalidOperation, match="version 1 in this app"):
        JobManager(any_store, old, clock=clock).enqueue(
            JobSpec("q", "tally", {"n": 1, "quantity": 1}, version=2)
        )


def test_a_worker_upcasts_old_payloads_and_never_takes_newer_ones() -> None:
    store = MemoryJobStore()
    ran: list[tuple[int, Any]] = []
    old, new = _apps(ran)
    for n in range(3):
        JobManager(store, old).enqueue(JobSpec("q", "tally", {"n": n, "count": n}))
    JobManager(store, new).enqueue(JobSpec("q", "tally", {"n": 9, "quantity": {"units": 9}}))
    # The old worker runs what it knows and leaves the newer payload queued, untouched.
    run(old, store, lambda: statuses(store) == ["queued", "succeeded", "succeeded", "succeeded"])
    assert sorted(ran) == [(0, 0), (1, 1), (2, 2)]
    assert [j["attempts"] for j in store.jobs("queued")] == [0]
    # An old payload left over is run by the new worker through the upcaster.
    JobManager(store, old).enqueue(JobSpec("q", "tally", {"n": 5, "count": 7}))
    ran.clear()
    run(new, store, lambda: statuses(store) == ["succeeded"] * 5)
    assert sorted(ran, key=lambda r: r[0]) == [(5, {"units": 7}), (9, {"units": 9})]


def test_an_old_payload_the_task_no_longer_upcasts_fails_for_good_naming_it() -> None:
    store = MemoryJobStore()
    app = App(default_owner="billing")
    app.task(lambda n: None, queue="q", name="t", version=3, upcast={2: lambda p: p})
    job_id = JobManager(store).enqueue(JobSpec("q", "t", {"n": 1}))  # a producer's v1
    run(app, store, lambda: statuses(store) == ["failed"])
    (failed,) = list_jobs(store, status="failed")
    assert failed["id"] == job_id and failed["attempts"] == 1
    assert "UpcastFailed" in failed["last_error"]
    assert "'t' has no upcaster from payload version 1" in failed["last_error"]


def test_a_newer_payload_that_reaches_an_old_worker_goes_back_unrun() -> None:
    """The claim keeps newer payloads from an old worker; should one reach it anyway (here
    a claim made for a newer app), the worker neither runs nor fails it."""
    store = MemoryJobStore()
    ran: list[tuple[int, Any]] = []
    old, new = _apps(ran)
    JobManager(store, new).enqueue(JobSpec("q", "tally", {"n": 1, "quantity": {"units": 1}}))
    worker = Worker(old, store, {"q": 1}, WorkerOptions(poll=0.01, poll_max=0.02))
    worker.manager = JobManager(store, new)  # claims as if it knew version 2
    worker.start()
    try:
        wait_for(lambda: worker.stats.released >= 3)
    finally:
        worker.stop()
        assert worker.join(5)
    assert ran == [] and worker.stats.started == 0
    (job,) = store.jobs()
    assert (job["status"], job["attempts"], job["version"]) == ("queued", 0, 2)


def test_a_worker_advertises_the_versions_it_runs_while_it_runs(any_store: BuiltinStore) -> None:
    _, new = _apps()
    worker = Worker(new, any_store, {"q": 1}, WorkerOptions(poll=0.01, poll_max=0.02))
    worker.start()
    try:
        (live,) = live_workers(any_store)
        assert (live.name, live.queues, dict(live.versions)) == (worker.name, ("q",), {"tally": 2})
    finally:
        worker.stop()
        assert worker.join(5)
    assert live_workers(any_store) == []  # withdrawn as it stopped


def test_rows_of_workers_gone_without_a_word_age_out(any_store: BuiltinStore) -> None:
    old, new = _apps()
    long_ago = time.time() - FORGET_AFTER - 1
    with any_store.transaction() as session:
        for name, seen in (("killed", long_ago), ("quiet", time.time() - LIVE_FOR - 1)):
            session.advertise_worker(
                WorkerRow(name=name, origin="h", queues='["q"]', versions='{"tally": 3}',
                          started_at=long_ago, seen_at=seen)
            )  # fmt: skip
    assert live_workers(any_store) == []  # neither renewed lately
    assert Advert(any_store, "fresh", old, ["q"]).advertise()
    with any_store.reading() as session:  # the first advert forgets the long gone
        assert [r["name"] for r in session.workers_seen(0.0)] == ["fresh", "quiet"]
    workers = live_workers(any_store)
    assert newest_known(workers, "q", "tally") == 1 and newest_known(workers, "x", "t") is None
    assert Advert(any_store, "newer", new, ["q", "x"]).advertise()
    workers = live_workers(any_store)
    assert newest_known(workers, "q", "tally") == 2
    assert newest_known(workers, "x", "other") == 0  # a task its app lacks: none of it
