"""The jobs store split by role: each role (``pigeon.jobs.store.ROLES``) is small, every
session class of ``pigeon.jobs.stores`` implements every role it is used as (all of them:
one store serves the manager, the failed store, the relay, ...), and no protocol asks for
everything again."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path
from typing import Protocol

import pytest

import pigeon.jobs
from pigeon.jobs import store
from pigeon.jobs.stores.memory import MemoryJobSession
from pigeon.jobs.stores.postgres import PostgresJobSession
from pigeon.jobs.stores.sqlite import SqlJobSession

MAX_METHODS = 15
SESSIONS = (SqlJobSession, PostgresJobSession, MemoryJobSession)


def members(role: type) -> set[str]:
    """What a role asks for: its methods and properties, its bases' included."""
    found: set[str] = set()
    for cls in role.__mro__:
        if cls in (object, Protocol) or not getattr(cls, "_is_protocol", False):
            continue
        found.update(name for name in vars(cls) if not name.startswith("_"))
    return found


@pytest.mark.parametrize("role", store.ROLES, ids=lambda r: r.__name__)
def test_each_role_is_small(role: type) -> None:
    assert 1 <= len(members(role)) <= MAX_METHODS, sorted(members(role))


@pytest.mark.parametrize("role", store.ROLES, ids=lambda r: r.__name__)
@pytest.mark.parametrize("session", SESSIONS, ids=lambda s: s.__name__)
def test_every_session_class_implements_every_role(session: type, role: type) -> None:
    missing = {name for name in members(role) if not hasattr(session, name)}
    assert missing == set()
    for name in members(role) - {"tx"}:  # same parameters, by name and kind
        wanted = inspect.signature(getattr(role, name))
        given = inspect.signature(getattr(session, name))
        assert list(given.parameters) == list(wanted.parameters), name


def test_the_roles_cover_every_statement_of_the_sessions() -> None:
    """A statement no role declares is one no consumer can reach through its role."""
    declared = set().union(*(members(role) for role in store.ROLES))
    for session in SESSIONS:
        public = {n for n in dir(session) if not n.startswith("_") and n not in ("store",)}
        assert public - declared == set(), session.__name__


def jobs_protocols() -> list[type]:
    """Every protocol class defined in a module of ``pigeon.jobs``."""
    found = []
    for info in pkgutil.walk_packages(pigeon.jobs.__path__, "pigeon.jobs."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == info.name and getattr(cls, "_is_protocol", False):
                found.append(cls)
    return found


def test_no_protocol_of_the_jobs_component_asks_for_more_than_a_role() -> None:
    """``JobSession``, the 55-method protocol every consumer took, is gone, and no
    protocol like it comes back (in store.py, beside a consumer, or made of roles)."""
    assert not hasattr(store, "JobSession")
    found = jobs_protocols()
    assert set(store.ROLES) <= set(found)
    wide = {cls.__qualname__: len(members(cls)) for cls in found}
    assert {name: n for name, n in wide.items() if n > MAX_METHODS} == {}
    assert "JobSession" not in wide


def test_the_scans_can_fail() -> None:
    class Wide(Protocol):
        def a(self) -> None: ...

        def b(self) -> None: ...

    class Narrow(Wide, Protocol):
        def c(self) -> None: ...

    assert members(Narrow) == {"a", "b", "c"}
    assert store.LeaseSession in jobs_protocols()


def test_the_import_scan_sees_type_only_and_late_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pigeon.jobs import ledger\n"
        "def f():\n    import pigeon.jobs._db\n"
    )
    assert imported(module) == {"typing", "pigeon.jobs", "pigeon.jobs._db"}


# What the store layer (the roles, the rows, the implementations) may import of
# pigeon.jobs: itself, the job model and the wakeup. A store that imported a consumer
# (the ledger, the manager, ``_db``) closed a circle: the consumers import the stores.
STORE_LAYER = ("pigeon.jobs.store", "pigeon.jobs.rows", "pigeon.jobs.stores")
BENEATH = ("pigeon.jobs.job", "pigeon.jobs.wakeup")


def imported(path: Path) -> set[str]:
    """Every module ``path`` imports, type-only and function-level imports included."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_the_store_layer_imports_no_consumer() -> None:
    jobs = Path(pigeon.jobs.__file__).parent
    layer = [jobs / "store.py", jobs / "rows.py", *sorted((jobs / "stores").glob("*.py"))]
    layer += [jobs / "job.py", jobs / "wakeup.py"]
    allowed = STORE_LAYER + BENEATH
    found = {
        path.name: sorted(
            name
            for name in imported(path)
            if name.startswith("pigeon.jobs") and not name.startswith(allowed)
        )
        for path in layer
    }
    assert {name: up for name, up in found.items() if up} == {}
