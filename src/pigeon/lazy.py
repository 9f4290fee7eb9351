"""A package's public names loaded on first use (PEP 562): ``import pigeon`` and the
packages an application imports for one name do not load every module behind the others
(the edge's queue without the sync engine's HTTP client, a worker's tasks without the web
app)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(
    namespace: dict[str, Any], modules: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the package whose globals are ``namespace``:
    each name of ``modules`` (name -> the module that defines it) imported on first use,
    then kept in ``namespace``, so the next access is a plain attribute."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(modules))

    return __getattr__, __dir__
