"""A rehearsal run: the throwaway database, the app's server and workers, the scenarios
one after another on them, and the report.

The scenarios share one database and one set of processes: each sends its requests as
principals of its own and drains its jobs before the next begins, so what each left is
counted apart. A scenario that breaks down (a process that will not start again, an
error of the rehearsal itself) fails with what happened, and the next one still runs on
a server and workers started afresh. Every child process ends with the run, however it
ends (`pigeon.rehearse.children`).
"""

from __future__ import annotations

import contextlib
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from pigeon.exceptions import ConfigurationError
from pigeon.jobs.app import App, load_app
from pigeon.rehearse import shim
from pigeon.rehearse.brokers import Broker
from pigeon.rehearse.children import STARTUP, ChildFailed, Children, Server, Workers
from pigeon.rehearse.client import Client
from pigeon.rehearse.cutproxy import CutProxy
from pigeon.rehearse.database import Throwaway
from pigeon.rehearse.hooks import RehearsalHooks, load_hooks
from pigeon.rehearse.makers import Makers, openapi_makers
from pigeon.rehearse.report import RunReport, ScenarioResult
from pigeon.rehearse.scenarios import SCENARIOS
from pigeon.rehearse.stage import Stage, timed
from pigeon.rehearse.tally import Ledger
from pigeon.server.openapi import OPENAPI_PATH
from pigeon.storage.crypto import Keyring
from pigeon.storage.server import open_server_db
from pigeon.urls import redact_url

REFERENCE_JOBS = "pigeon.reference.jobs:app"
THREADS = 4  # worker threads per queue (fewer where the queue allows fewer)


@dataclass(frozen=True)
class RehearseOptions:
    """``app``: what ``pigeon serve --app`` serves (None: the reference app); ``jobs``:
    what ``pigeon worker --app`` runs; ``hooks``: ``module:attr`` of `RehearsalHooks`;
    ``db``: see `pigeon.rehearse.database`; ``scenarios``: names (empty: all)."""

    app: str | None = None
    jobs: str = REFERENCE_JOBS
    hooks: str | None = None
    db: str | None = None
    scenarios: tuple[str, ...] = ()
    scale: int = 1
    rate: float = 5.0
    peak: float = 4.0
    i_know: bool = False
    seed: int = 0
    relay_to: str | None = None  # the broker the app relays its outbox to
    next_jobs: str | None = None  # the next version's jobs, for deploy-mid-job

    def __post_init__(self) -> None:
        unknown = [s for s in self.scenarios if s not in SCENARIOS]
        if unknown:
            raise ConfigurationError(
                f"no scenario {', '.join(map(repr, unknown))} (there are: {', '.join(SCENARIOS)})"
            )
        if self.scale < 1:
            raise ConfigurationError(f"scale must be at least 1, not {self.scale}")
        if not (self.rate > 0 and self.peak >= 1):
            raise ConfigurationError("rate must be above 0 and peak at least 1")


Progress = Callable[[ScenarioResult], None]


def run_rehearsal(options: RehearseOptions, progress: Progress | None = None) -> RunReport:
    """Every scenario asked for, in the list's order; ``progress`` hears each one's end."""
    hooks = load_hooks(options.hooks) if options.hooks else RehearsalHooks()
    jobs = load_app(options.jobs)
    if options.next_jobs:
        load_app(options.next_jobs)  # refused now, not after the other scenarios ran
    names = options.scenarios or tuple(SCENARIOS)
    start = time.monotonic()
    with _ended_by_sigterm(), Throwaway(options.db, i_know=options.i_know) as url:
        report = RunReport(
            app=options.app or "the reference app",
            jobs=options.jobs,
            database=redact_url(options.db) if options.db else "a temporary SQLite file",
            scale=options.scale,
        )
        with tempfile.TemporaryDirectory(prefix="pigeon-rehearse-") as folder:
            children = Children(Path(folder))
            try:
                stage = _stage(options, url, children, hooks, jobs)
                try:
                    for name in (n for n in SCENARIOS if n in names):
                        result = _play(stage, name)
                        report.scenarios.append(result)
                        if progress is not None:
                            progress(result)
                finally:
                    _close(stage)
            finally:
                children.close()
    report.seconds = time.monotonic() - start
    return report


def _close(stage: Stage) -> None:
    stage.client.close()
    stage.ledger.db.close()
    if stage.proxy is not None:
        stage.proxy.close()
    if stage.broker is not None:
        stage.broker.cleanup()  # the run's names on the app's broker


def _stage(
    options: RehearseOptions, url: str, children: Children, hooks: RehearsalHooks, jobs: App
) -> Stage:
    broker = Broker(options.relay_to) if options.relay_to else None
    proxy = CutProxy.before(broker.url, broker.default_port) if broker else None
    relay = broker.relay_url(proxy.url_for(broker.url)) if broker and proxy else None
    server = Server(children, url, app=options.app, relay_to=relay).start()
    threads = {q: min(THREADS, config.max_workers) for q, config in sorted(jobs.queues.items())}
    workers = _workers(children, url, options.jobs, hooks, threads).start()
    document = _document(server.url)
    makers = Makers(dict(hooks.requests) or openapi_makers(document), seed=options.seed)
    database = open_server_db(url, keyring=Keyring.from_env())
    stage = Stage(
        server=server,
        workers=workers,
        client=Client(server.url),
        makers=makers,
        hooks=hooks,
        ledger=Ledger(database, hooks.tables, hooks.counters),
        jobs=jobs,
        document=document,
        scale=options.scale,
        rate=options.rate,
        peak=options.peak,
        threads=threads,
        next_jobs=options.next_jobs,
        broker=broker,
        proxy=proxy,
    )
    _warm_up(stage)
    return stage


def _document(url: str) -> dict[str, Any]:
    """The app's OpenAPI document: pigeon's, else the one a framework serves (FastAPI's
    ``/openapi.json``); ``{}`` when it has none (the makers must come from the hooks)."""
    for path in (OPENAPI_PATH, "/openapi.json"):
        response = httpx.get(url + path, timeout=30)
        if response.status_code == 200:
            found: dict[str, Any] = response.json()
            return found
    return {}


def _workers(
    children: Children, url: str, jobs: str, hooks: RehearsalHooks, threads: dict[str, int]
) -> Workers:
    """The app's workers; through the shim where it names provider adapters."""
    if not hooks.providers:
        return Workers(children, url, jobs, threads)
    env = {
        shim.JOBS: jobs,
        shim.PROVIDERS: ",".join(hooks.providers),
        shim.FAULT: "0",
        shim.FAULT_LOG: str(children.folder / "provider-faults.log"),
    }
    return Workers(children, url, shim.SHIM, threads, env=env)


def _warm_up(stage: Stage) -> None:
    """One request per route, its jobs drained: the server and the workers are up and
    have run once (imports, connections) before any scenario measures them."""
    for route in stage.makers.routes:
        answer = stage.client.settle(stage.makers.plan("warm-up", stage.makers.next_for(route)))
        if answer.status is None:
            raise ChildFailed(f"the server did not answer {route} while warming up")
    if stage.ledger.drain(STARTUP) is None:
        raise ChildFailed(f"the workers did not run the warm-up's jobs within {STARTUP:.0f} s")


def _play(stage: Stage, name: str) -> ScenarioResult:
    scenario = SCENARIOS[name]
    result = ScenarioResult(scenario.name, scenario.summary)
    try:
        timed(result, lambda: scenario.play(stage, result))
    except Exception as exc:  # the rehearsal's own breakdown: this scenario fails, not the run
        result.problem(f"the scenario broke down: {type(exc).__name__}: {exc}")
    _ready(stage, result)
    return result


def _ready(stage: Stage, result: ScenarioResult) -> None:
    """The server and the workers running again for the next scenario."""
    try:
        if stage.server.proc is None or stage.server.proc.poll() is not None:
            stage.server.kill()
            stage.restart_server()
        if not stage.workers.running:
            stage.workers.kill()
            stage.workers.start()
    except Exception as exc:
        result.problem(f"the server or the workers would not start again: {exc}")
        raise


@contextlib.contextmanager
def _ended_by_sigterm() -> Iterator[None]:
    """SIGTERM ends the run as Ctrl-C does: children stopped, the database dropped."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
