import math

import pytest

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
