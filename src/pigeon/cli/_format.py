"""How the CLI's tables write a number of seconds."""

from __future__ import annotations


def duration(seconds: float | None, *, switch: float = 1.0) -> str:
    """``seconds`` in the largest unit of d/h/m it reaches ``switch`` times ("1.5h", or
    with ``switch=2`` "90.0m" until two hours), else in seconds; "-" for None."""
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= switch * size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"
