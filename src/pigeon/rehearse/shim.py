"""The jobs app a rehearsal's workers run when the app names provider adapters
(`RehearsalHooks.providers`): the app's own, unchanged, with each named adapter's
``call`` wrapped so that, while the fault is on, the first call for each reference
reaches the provider and applies, and then its answer is lost (``TimeoutError``): the
outcome is unknown, and ``call_provider`` must find it by ``lookup``.

The worker is started as ``pigeon worker --app pigeon.rehearse.shim:app`` with the
environment naming the rest (``JOBS``, ``PROVIDERS``, ``FAULT``, ``FAULT_LOG`` below);
each fault made is one line of the log file, so the scenario knows it happened.
"""

from __future__ import annotations

import functools
import importlib
import os
import threading
from collections.abc import Callable
from typing import Any

from pigeon.exceptions import ConfigurationError
from pigeon.jobs.app import App, load_app

JOBS = "PIGEON_REHEARSE_JOBS"
PROVIDERS = "PIGEON_REHEARSE_PROVIDERS"  # module:attr, comma-separated
FAULT = "PIGEON_REHEARSE_PROVIDER_FAULT"  # "1": the fault is on
FAULT_LOG = "PIGEON_REHEARSE_FAULT_LOG"
SHIM = "pigeon.rehearse.shim:app"


def named(ref: str) -> Any:
    """The object ``module:attr`` names."""
    module, _, attr = ref.partition(":")
    try:
        found = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"provider adapter {ref!r} not found: {exc}") from exc
    if not callable(getattr(found, "call", None)) or not callable(getattr(found, "lookup", None)):
        raise ConfigurationError(f"{ref!r} is no provider adapter (call and lookup)")
    return found


def lose_first_answers(call: Callable[..., Any], log: str | None) -> Callable[..., Any]:
    """``call``, with the answer of each reference's first call lost after it applied."""
    seen: set[str] = set()
    lock = threading.Lock()

    @functools.wraps(call)
    def faulty(reference: str, idempotency_key: str, request: Any) -> Any:
        result = call(reference, idempotency_key, request)
        with lock:
            first = reference not in seen
            seen.add(reference)
        if first:
            if log:
                with open(log, "a") as out:
                    out.write(reference + "\n")
            raise TimeoutError(f"pigeon rehearse: the answer for {reference} was lost")
        return result

    return faulty


@functools.cache
def _app() -> App:
    """Once per process: the supervisor and each worker process ask for it."""
    app = load_app(os.environ[JOBS])
    if os.environ.get(FAULT) == "1":
        for ref in filter(None, os.environ.get(PROVIDERS, "").split(",")):
            adapter = named(ref)
            adapter.call = lose_first_answers(adapter.call, os.environ.get(FAULT_LOG))
    return app


def __getattr__(name: str) -> Any:
    if name == "app":
        return _app()
    raise AttributeError(name)
