"""Input checks shared by every part of pigeon: what counts as an integer, a number, a
finite number. One place for the rule that a bool is not a number here (Python says
``True`` is the integer 1; a caller who passed ``pipeline=True`` made a mistake), so each
check reads as what it means.

Predicates only: the caller raises its own error (``ConfigurationError`` for settings,
``InvalidOperation`` for an operation's fields) with its own message, since what was
wrong is best named where the value came in.
"""

from __future__ import annotations

import math
from typing import TypeGuard


def is_int(value: object) -> TypeGuard[int]:
    """An ``int``, not a ``bool``."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[int | float]:
    """An ``int`` or a ``float`` (NaN and infinities included), not a ``bool``."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_finite(value: object) -> TypeGuard[int | float]:
    """A number that is neither NaN nor infinite."""
    return is_number(value) and math.isfinite(value)


def is_int_in(value: object, low: int, high: float = math.inf) -> TypeGuard[int]:
    """An integer from ``low`` to ``high``, both included."""
    return is_int(value) and low <= value <= high
