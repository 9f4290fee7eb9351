"""JSON text from one C encoder built once, for the encodes made per operation.

``json.dumps`` and ``JSONEncoder.encode`` build a new C encoder on every call, each with
a fresh dict of markers for circular references: for a note's body that was 0.9 us of
the 2.1 its encoding cost. ``one_encoder(reference)`` builds the C encoder once, without
markers, so it keeps nothing between calls and any thread may share it. A value it cannot
finish (a loop, which no marker sees now, or nesting past the recursion limit) goes to
``reference.encode``, whose verdict (ValueError, RecursionError) the caller gets, as before.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json import encoder as json_encoder
from typing import Any

__all__ = ["one_encoder"]

# The C encoder JSONEncoder.encode builds for each call (None on a Python without _json).
_make_encoder: Any = getattr(json_encoder, "c_make_encoder", None)


def one_encoder(reference: json.JSONEncoder) -> Callable[[Any], str]:
    """``reference.encode``: the same text and the same refusals, from one C encoder."""
    indent: object = reference.indent  # typeshed leaves None out
    if _make_encoder is None or indent is not None:  # pragma: no cover
        return reference.encode  # the C encoder writes no indentation
    strings = (
        json_encoder.encode_basestring_ascii
        if reference.ensure_ascii
        else json_encoder.encode_basestring
    )
    # (markers, default, encoder, indent, key and item separators, sort_keys, skipkeys,
    # allow_nan): what JSONEncoder.iterencode passes, but no markers.
    encode = _make_encoder(
        None,
        reference.default,
        strings,
        None,
        reference.key_separator,
        reference.item_separator,
        reference.sort_keys,
        reference.skipkeys,
        reference.allow_nan,
    )

    def text(value: Any) -> str:
        try:
            return "".join(encode(value, 0))
        except RecursionError:
            return reference.encode(value)  # a loop or a value nested too deep: its verdict

    return text
