"""One name, one meaning: a public class name is defined in one module of pigeon only.

Two classes of one name mean two things a reader has to tell apart by their import line
(``Timeouts`` was a job's deadlines in pigeon.jobs and a connection's in pigeon.server).
A name re-exported by another module (a package's ``__init__``, a deprecated shim) is an
import, not a definition, and does not count.
"""

from __future__ import annotations

import ast
import importlib
from collections import defaultdict
from pathlib import Path

import pytest

import pigeon

SOURCE = Path(pigeon.__file__).parent

# Names that may be defined in more than one module, each with why both mean the same
# thing. A list that may only shrink (a stale entry fails `test_the_allow_list_is_current`).
SHARED_NAMES: dict[str, str] = {}


def public_class_definitions() -> dict[str, list[str]]:
    """Each public module-level class name, with the modules that define it."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(SOURCE.rglob("*.py")):
        module = ".".join(("pigeon", *path.relative_to(SOURCE).with_suffix("").parts))
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                found[node.name].append(module.removesuffix(".__init__"))
    return found


def test_a_public_class_name_is_defined_once() -> None:
    twice = {
        name: modules
        for name, modules in public_class_definitions().items()
        if len(modules) > 1 and name not in SHARED_NAMES
    }
    assert not twice, f"one name, several classes (rename one, say what it is): {twice}"


def test_the_allow_list_is_current() -> None:
    found = public_class_definitions()
    stale = sorted(name for name in SHARED_NAMES if len(found.get(name, ())) < 2)
    assert not stale, f"defined once now: take {stale} off SHARED_NAMES"


def test_the_scan_sees_the_package() -> None:
    found = public_class_definitions()
    assert found["ConnectionTimeouts"] == ["pigeon.server.timeouts"]
    assert found["Timeouts"] == ["pigeon.jobs.timeouts"]
    assert len(found) > 100


@pytest.mark.parametrize(
    ("module", "old", "new"),
    [
        ("pigeon.server.timeouts", "Timeouts", "ConnectionTimeouts"),
        ("pigeon.server.access", "refusal", "auth_refusal"),
        ("pigeon.server.access", "describe", "describe_route"),
        ("pigeon.server.replay", "refusal", "claim_refusal"),
        ("pigeon.server.app", "render", "render_result"),
    ],
)
def test_a_renamed_name_still_resolves_with_a_deprecation_warning(
    module: str, old: str, new: str
) -> None:
    loaded = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=new):
        assert getattr(loaded, old) is getattr(loaded, new)
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = loaded.no_such_name
