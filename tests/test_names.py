"""One name, one meaning: a public class or module-level function name is defined in one
module of pigeon only.

Two classes of one name mean two things a reader has to tell apart by their import line
(``Timeouts`` was a job's deadlines in pigeon.jobs and a connection's in pigeon.server);
two functions of one name are two things (``configure`` set up the logs in pigeon.logs
and glibc's allocator in pigeon.server.memory) or two copies of one helper
(``path_segment``). A name re-exported by another module (a package's ``__init__``) is
an import, not a definition, and does not count. Nor do the CLI's
command functions: each is named for its command (``pigeon queue dead``,
``pigeon plan``), which says what it is where it is used.
"""

from __future__ import annotations

import ast
import inspect
from collections import defaultdict
from pathlib import Path
from urllib.parse import quote

from hypothesis import given
from hypothesis import strategies as st

import pigeon

SOURCE = Path(pigeon.__file__).parent

# Names that may be defined in more than one module, each with why both mean the same
# thing. A list that may only shrink (a stale entry fails `test_the_allow_list_is_current`).
SHARED_NAMES: dict[str, str] = {
    "Migration": "Django finds each migration of an app by this name, one per module of "
    "pigeon.integrations.django.migrations: one meaning, a step of the Django app's schema",
}
# The same for module-level functions.
SHARED_FUNCTIONS: dict[str, str] = {
    "defer": "enqueue a pigeon job in the web framework's open transaction, with the "
    "handler's writes (pigeon.integrations.fastapi: the SQLAlchemy session's; "
    "pigeon.integrations.django: the database alias's): one meaning, each framework's own",
    "from_url": "each broker publisher's constructor from its URL (pigeon.jobs.publishers."
    "amqp / nats / redis), the one way a publisher is made: one meaning, three brokers",
    "loads": "a JSON document's value, as json.loads: strictjson's refuses what the wire "
    "protocol forbids (at the trust boundary), jobs.rows' lets a NULL column through; "
    "the jobs' one could say so in its name (loads_column), a jobs/ change left to it",
}


def _definitions(kinds: tuple[type[ast.AST], ...]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(SOURCE.rglob("*.py")):
        module = ".".join(("pigeon", *path.relative_to(SOURCE).with_suffix("").parts))
        for node in ast.parse(path.read_text(), str(path)).body:
            name = getattr(node, "name", "_")
            if isinstance(node, kinds) and not name.startswith("_"):
                found[name].append(module.removesuffix(".__init__"))
    return found


def public_class_definitions() -> dict[str, list[str]]:
    """Each public module-level class name, with the modules that define it."""
    return _definitions((ast.ClassDef,))


def cli_commands() -> set[tuple[str, str]]:
    """The (module, function) of every command of the ``pigeon`` CLI, in every group."""
    from tests.cli.commands import leaves

    found = set()
    for _, command in leaves():
        callback = inspect.unwrap(command.callback) if command.callback else None
        if callback is not None:
            found.add((callback.__module__, callback.__name__))
    return found


def public_function_definitions() -> dict[str, list[str]]:
    """Each public module-level function name, with the modules that define it, leaving
    out the CLI's command functions."""
    commands = cli_commands()
    found = _definitions((ast.FunctionDef, ast.AsyncFunctionDef))
    kept = {
        name: [m for m in modules if (m, name) not in commands] for name, modules in found.items()
    }
    return {name: modules for name, modules in kept.items() if modules}


def test_a_public_class_name_is_defined_once() -> None:
    twice = {
        name: modules
        for name, modules in public_class_definitions().items()
        if len(modules) > 1 and name not in SHARED_NAMES
    }
    assert not twice, f"one name, several classes (rename one, say what it is): {twice}"


def test_a_public_function_name_is_defined_once() -> None:
    twice = {
        name: modules
        for name, modules in public_function_definitions().items()
        if len(modules) > 1 and name not in SHARED_FUNCTIONS
    }
    assert not twice, (
        f"one name, several functions (one helper, or a name that says what each is): {twice}"
    )


def test_the_allow_list_is_current() -> None:
    found = public_class_definitions()
    stale = sorted(name for name in SHARED_NAMES if len(found.get(name, ())) < 2)
    assert not stale, f"defined once now: take {stale} off SHARED_NAMES"
    functions = public_function_definitions()
    stale = sorted(name for name in SHARED_FUNCTIONS if len(functions.get(name, ())) < 2)
    assert not stale, f"defined once now: take {stale} off SHARED_FUNCTIONS"


def test_the_scan_sees_the_package() -> None:
    found = public_class_definitions()
    assert found["ConnectionTimeouts"] == ["pigeon.server.options"]
    assert found["Timeouts"] == ["pigeon.jobs.timeouts"]
    assert len(found) > 100
    functions = public_function_definitions()
    assert functions["configure"] == ["pigeon.logs"]
    assert functions["merge"] == ["pigeon.reference.crdt"]
    assert len(functions) > 300
    # The CLI's commands are found (and left out), in groups too.
    assert {("pigeon.cli.plan_cmd", "plan"), ("pigeon.cli.queue_cmd", "dead")} <= cli_commands()
    assert functions["plan"] == ["pigeon.jobs.planner"]
    assert functions["dead"] == ["pigeon.edge.owners"]


def test_one_path_segment_helper_for_the_edge_and_the_server() -> None:
    from pigeon.core.identifiers import path_segment as edge
    from pigeon.server.identifiers import path_segment as server

    assert server is edge


@given(st.text())
def test_the_one_path_segment_answers_as_the_servers_copy_did(value: str) -> None:
    """The server's copy was ``quote(value, safe="")``; the edge's skips quote() for a
    plain segment (its hot path), which must change nothing."""
    from pigeon.core.identifiers import path_segment

    assert path_segment(value) == quote(value, safe="")


# Before the first tagged release a rename fixes its callers: no module keeps an old name
# alive (a DeprecationWarning, a module that replaces itself in sys.modules; a module
# ``__getattr__`` only loads names lazily, as pigeon's own does).
SHIM_ALLOWED: set[str] = set()


def _shims(tree: ast.Module) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "DeprecationWarning":
            found.append("DeprecationWarning")
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Subscript) and ast.unparse(t.value) == "sys.modules"
            for t in node.targets
        ):
            found.append("sys.modules[...] =")
    return found


def test_no_module_keeps_an_old_name_alive() -> None:
    shims = {}
    for path in sorted(SOURCE.rglob("*.py")):
        relative = str(path.relative_to(SOURCE.parent))
        found = _shims(ast.parse(path.read_text()))
        if found and relative not in SHIM_ALLOWED:
            shims[relative] = found
    assert shims == {}
