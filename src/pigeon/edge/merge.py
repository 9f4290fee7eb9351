"""Three-way merges of an entity's state: base (what both sides started from), local (what
this device wants), remote (what the server holds). Pure code, JSON values in and out.

`field_merge` keeps every edit that only one side made, field by field (nested objects
field by field too); a field both sides changed differently goes to the tie-break: keep
``"local"``, keep ``"remote"``, or ask a function. `notes_merge` is the shipped example of a
custom merge: like `field_merge`, but two rival edits of one text field are both kept,
local first, joined by `SEPARATOR` so the user sees there was a clash and can tidy it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from pigeon.exceptions import InvalidOperation

SEPARATOR = "\n<<<<<<< other device >>>>>>>\n"

# (field name, base value or MISSING, local value, remote value) -> the value to keep
TieBreak = Literal["local", "remote"] | Callable[[str, Any, Any, Any], Any]
MergeFunction = Callable[[Any, Any, Any], Any]


class _Missing:
    """A field absent on one side (distinct from a field whose value is null)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


def field_merge(
    base: Mapping[str, Any] | None,
    local: Mapping[str, Any],
    remote: Mapping[str, Any],
    tie: TieBreak = "remote",
) -> dict[str, Any]:
    """Merge objects field by field. A field removed on one side and untouched on the
    other stays removed; a field both sides set to the same value is simply kept."""
    if not isinstance(local, Mapping) or not isinstance(remote, Mapping):
        raise InvalidOperation(
            "field merge needs JSON objects on both sides, not "
            f"{type(local).__name__} and {type(remote).__name__}"
        )
    if tie not in ("local", "remote") and not callable(tie):
        raise InvalidOperation(f"tie must be 'local', 'remote' or a function, not {tie!r}")
    base = base if isinstance(base, Mapping) else {}
    merged: dict[str, Any] = {}
    for name in sorted({*base, *local, *remote}):
        was, mine, theirs = (
            base.get(name, MISSING),
            local.get(name, MISSING),
            remote.get(name, MISSING),
        )
        value = _field(name, was, mine, theirs, tie)
        if value is not MISSING:
            merged[name] = value
    return merged


def _field(name: str, was: Any, mine: Any, theirs: Any, tie: TieBreak) -> Any:
    if mine == theirs:
        return mine
    if mine == was:
        return theirs
    if theirs == was:
        return mine
    if isinstance(mine, Mapping) and isinstance(theirs, Mapping):
        return field_merge(was if isinstance(was, Mapping) else None, mine, theirs, tie)
    if tie == "local":
        return mine
    if tie == "remote":
        return theirs
    assert callable(tie)
    return tie(name, was, mine, theirs)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396 JSON merge patch: objects merge, ``null`` removes, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = merge_patch(result.get(name), value)
    return result


def join_texts(name: str, was: Any, mine: Any, theirs: Any) -> Any:
    """Tie-break of `notes_merge`: two rival texts are both kept; anything else, local."""
    if isinstance(mine, str) and isinstance(theirs, str):
        return f"{mine}{SEPARATOR}{theirs}"
    return theirs if mine is MISSING else mine


def notes_merge(base: Any, local: Any, remote: Any) -> Any:
    """The notes example of a custom 3-way merge: no text edit of either device is lost."""
    return field_merge(base, local, remote, tie=join_texts)
