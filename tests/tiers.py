"""The test tiers, marked at collection so that a new test lands in its tier unmarked.

- ``postgres``: the test runs on the PostgreSQL server (it uses ``pg_url``, or a fixture
  parametrized ``"postgres"`` whose value comes from it).
- ``integration``: it needs something real beyond the process: PostgreSQL, a process it
  starts (everything a test starts goes through ``tests.processes``), a broker, Chromium.
  Found by following what the test and its fixtures call, through helpers in ``tests``.
- ``chaos``: it kills or crashes processes at random or chosen moments; marked by hand, and
  by module name for the ``test_chaos`` and ``test_crash`` modules.

``pytest -m "not integration and not chaos"`` is the unit tier (``make test-fast``).
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# What makes a test an integration test wherever it is reached from: the process
# recorder, the services' probes, and the fixtures that open a service of their own.
_SERVICE_CALLS = {
    "tests.processes": None,  # the whole module: spawn, run, ServerProcess
    "tests.conftest": {"require_postgres", "require_broker", "pg_url"},
}
_SERVICE_FIXTURES = {"pg_url", "pg_url_module", "browser"}
_CHAOS_MODULES = {"test_chaos", "test_crash"}

_verdicts: dict[int, bool] = {}


def _is_service(obj: Any) -> bool:
    module = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", "")
    if module not in _SERVICE_CALLS:
        return False
    names = _SERVICE_CALLS[module]
    return names is None or getattr(obj, "__name__", "") in names


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _functions(obj: Any) -> Iterator[types.FunctionType]:
    """The plain functions behind ``obj``: itself, a fixture's body, a class's methods."""
    obj = getattr(obj, "__wrapped__", obj)
    obj = getattr(obj, "_get_wrapped_function", lambda: obj)()
    if isinstance(obj, types.FunctionType):
        yield obj
    elif isinstance(obj, type):
        for value in vars(obj).values():
            value = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
            value = value.fget if isinstance(value, property) else value
            if isinstance(value, types.FunctionType):
                yield value


def _ours(obj: Any) -> bool:
    module = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", "")
    return isinstance(module, str) and (
        module == "tests" or module.startswith(("tests.", "examples."))
    )


def reaches_a_service(obj: Any) -> bool:
    """Whether calling ``obj`` (a test, fixture, helper or class of ours) may reach a
    service: it names one of ``_SERVICE_CALLS``, or a helper of ours that does."""
    key = id(obj)
    if key in _verdicts:
        return _verdicts[key]
    _verdicts[key] = False  # a cycle of helpers decides nothing by itself
    verdict = any(_function_reaches(function) for function in _functions(obj))
    _verdicts[key] = verdict
    return verdict


def _function_reaches(function: types.FunctionType) -> bool:
    scope = function.__globals__
    names = {name for code in _codes(function.__code__) for name in code.co_names}
    return any(_value_reaches(scope[name], names) for name in names if name in scope)


def _value_reaches(value: Any, names: set[str]) -> bool:
    if _is_service(value):
        return True
    if isinstance(value, types.ModuleType):
        # ``processes.spawn`` names the module; ``commands.run`` a helper within it.
        if value.__name__ == "tests.processes":
            return True
        members = (getattr(value, attr, None) for attr in names) if _ours(value) else ()
        return any(m is not None and _ours(m) and reaches_a_service(m) for m in members)
    callable_ = inspect.isfunction(value) or inspect.isclass(value)
    return callable_ and _ours(value) and reaches_a_service(value)


def _fixture_defs(item: pytest.Item) -> Iterator[Any]:
    info = getattr(item, "_fixtureinfo", None)
    for defs in info.name2fixturedefs.values() if info else ():
        yield from defs


def _on_postgres(item: pytest.Item) -> bool:
    names = getattr(item, "fixturenames", ())
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    if "pg_url" in names or "pg_url_module" in names:
        # The conformance fixture asks for pg_url only in its postgres variant.
        return params.get("server_db_url", "postgres") == "postgres"
    # A backend-parametrized fixture (``db``, ``deployed``) opens pg_url when it is given
    # "postgres".
    fixtures = {fd.argname for fd in _fixture_defs(item) if fd.params is not None}
    return any(value == "postgres" and name in fixtures for name, value in params.items())


def _is_integration(item: pytest.Item) -> bool:
    if _on_postgres(item) or _SERVICE_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    if isinstance(item, pytest.Function) and reaches_a_service(item.function):
        return True
    for fixturedef in _fixture_defs(item):
        func = fixturedef.func
        if _ours(func) and reaches_a_service(func):
            return True
    return False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _on_postgres(item):
            item.add_marker(pytest.mark.postgres)
        if item.get_closest_marker("postgres") or _is_integration(item):
            item.add_marker(pytest.mark.integration)
        if Path(str(item.path)).stem in _CHAOS_MODULES:
            item.add_marker(pytest.mark.chaos)
