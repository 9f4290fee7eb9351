import ast
import math
from pathlib import Path

import pytest

import pigeon
from pigeon.checks import is_finite, is_int, is_int_in, is_number


@pytest.mark.parametrize(
    ("value", "integer", "number", "finite"),
    [
        (3, True, True, True),
        (True, False, False, False),
        (False, False, False, False),
        (2.5, False, True, True),
        (math.nan, False, True, False),
        (math.inf, False, True, False),
        ("3", False, False, False),
        (None, False, False, False),
    ],
)
def test_a_bool_is_not_a_number_here(
    value: object, integer: bool, number: bool, finite: bool
) -> None:
    assert (is_int(value), is_number(value), is_finite(value)) == (integer, number, finite)


def test_is_int_in_includes_both_ends() -> None:
    assert is_int_in(1, 1, 16) and is_int_in(16, 1, 16) and is_int_in(10**9, 1)
    assert not is_int_in(0, 1, 16) and not is_int_in(17, 1, 16) and not is_int_in(True, 1)


# --- one set of checks: no hand-written guard left in the source -------------------------

SOURCE = Path(pigeon.__file__).parent

# Places that may still write the "int but not bool" guard or ``math.isfinite`` themselves, each
# because the meaning there is not "is this caller's value a number" (a list that may only
# shrink: an entry whose file no longer needs it fails `test_the_allow_list_has_no_stale_entry`).
GUARD_ALLOWED = {
    # The JSON parser's range check on a float it just made with float(text): "1e999" is
    # inf, beyond a double. The value can never be a bool, and this runs once per number
    # of every request body.
    "core/strictjson.py": "parses a float's range, not a caller's value",
    # Retry-After parsing: a header's text read as float; an unreadable or infinite one
    # means "no header".
    "sync/classify.py": "Retry-After header parsing",
}


def _isinstance_names(node: ast.AST) -> set[str]:
    """The type names an ``isinstance(x, ...)`` call (or ``not`` of one) tests for."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        node = node.operand
    if not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "isinstance"
        and len(node.args) == 2
    ):
        return set()
    return {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}


def _is_bool_guard(node: ast.AST) -> bool:
    """The hand-written "a number, but not a bool" guard: one ``and``/``or`` chain that
    tests ``isinstance(x, int/float)`` and ``isinstance(x, bool)`` (either negated). A
    lone ``isinstance(x, bool)`` asks whether a flag is a flag, another meaning."""
    if not isinstance(node, ast.BoolOp):
        return False
    tested = [_isinstance_names(value) for value in node.values]
    return any(
        "bool" in a and b & {"int", "float"} for i, a in enumerate(tested) for b in tested[i + 1 :]
    ) or any(
        "bool" in b and a & {"int", "float"} for i, a in enumerate(tested) for b in tested[i + 1 :]
    )


def _is_isfinite(node: ast.AST) -> bool:
    """``math.isfinite`` (or ``from math import isfinite``)."""
    if isinstance(node, ast.Attribute):
        return node.attr == "isfinite" and isinstance(node.value, ast.Name)
    if isinstance(node, ast.ImportFrom):
        return node.module == "math" and any(a.name == "isfinite" for a in node.names)
    return False


def hand_written_guards() -> dict[str, list[int]]:
    """Per source file (relative to the package), the lines of each guard found."""
    found: dict[str, list[int]] = {}
    for path in sorted(SOURCE.rglob("*.py")):
        rel = path.relative_to(SOURCE).as_posix()
        if rel == "checks.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if _is_bool_guard(node) or _is_isfinite(node):
                found.setdefault(rel, []).append(node.lineno)
    return found


def test_no_hand_written_bool_or_finite_guard_outside_checks() -> None:
    stray = {f: lines for f, lines in hand_written_guards().items() if f not in GUARD_ALLOWED}
    assert not stray, (
        "use pigeon.checks (is_int / is_number / is_finite / is_int_in) instead of "
        f"isinstance(x, bool) or math.isfinite: {stray}"
    )


def test_the_allow_list_has_no_stale_entry() -> None:
    found = hand_written_guards()
    stale = sorted(f for f in GUARD_ALLOWED if f not in found)
    assert not stale, f"no guard left in {stale}: take it off GUARD_ALLOWED"


def test_the_scan_finds_what_it_looks_for() -> None:
    # The scan itself can fail: each form it must catch, caught.
    for text in (
        "isinstance(x, int) and not isinstance(x, bool)",
        "not isinstance(x, int) or isinstance(x, bool) or x < 1",
        "isinstance(x, int | float) and not isinstance(x, bool) and x > 0",
        "math.isfinite(x)",
        "from math import isfinite",
    ):
        assert any(_is_bool_guard(n) or _is_isfinite(n) for n in ast.walk(ast.parse(text))), text
    for text in ("isinstance(x, bool)", "isinstance(x, bool | int) or x is None"):
        assert not any(_is_bool_guard(n) for n in ast.walk(ast.parse(text))), text
