"""``pigeon.lazy``: a package's names loaded on first use, kept once loaded."""

from __future__ import annotations

from typing import Any

import pytest

from pigeon.lazy import lazy_names


def test_a_name_loads_its_module_once_and_an_unknown_one_is_named() -> None:
    namespace: dict[str, Any] = {"__name__": "pkg"}
    getattr_, dir_ = lazy_names(namespace, {"dumps": "json"})
    assert "dumps" in dir_() and "loads" not in dir_()
    dumps = getattr_("dumps")
    assert dumps([1]) == "[1]"
    assert namespace["dumps"] is dumps  # kept: the next access is a plain attribute
    with pytest.raises(AttributeError, match="module 'pkg' has no attribute 'loads'"):
        getattr_("loads")
