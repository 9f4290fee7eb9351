"""Default routes: plain entity names go into the path as they are, others percent-encoded."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pigeon.edge.validate import encode_payload, route


@pytest.mark.parametrize(
    ("entity", "path"),
    [
        ("note:42", "/notes/42"),
        ("note:a-b_c.d~e", "/notes/a-b_c.d~e"),
        ("note:a/b", "/notes/a%2Fb"),
        ("note:é", "/notes/%C3%A9"),
        ("my note:1", "/my%20notes/1"),
        ("note:x:y", "/notes/x%3Ay"),
    ],
)
def test_default_update_route(entity: str, path: str) -> None:
    assert route("update", entity, None, None) == (path, "PUT")


@given(st.text(min_size=1), st.text(min_size=1))
def test_the_shortcut_quotes_exactly_like_quote(kind: str, ident: str) -> None:
    if ":" in kind:
        return
    expected = f"/{quote(kind, safe='')}s/{quote(ident, safe='')}"
    assert route("delete", f"{kind}:{ident}", None, None) == (expected, "DELETE")


def test_payload_text_is_compact_and_keeps_unicode() -> None:
    assert encode_payload({"a": [1, "é"]}, 100) == '{"a":[1,"é"]}'
