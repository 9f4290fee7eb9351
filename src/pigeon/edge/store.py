"""Deprecated: the edge's SQLite store moved to `pigeon.edge.sqlite` (``EdgeStore``,
``APPLICATION_ID``, ``PAGE_SIZE``; ``NewOp`` and ``Built`` to `pigeon.edge.queue_store`).
The old names keep working for one release, with a DeprecationWarning."""

from __future__ import annotations

import importlib
import warnings
from typing import Any

_MOVED = {
    "EdgeStore": "pigeon.edge.sqlite.store",
    "APPLICATION_ID": "pigeon.edge.sqlite.file",
    "PAGE_SIZE": "pigeon.edge.sqlite.file",
    "RECOVER_EVERY": "pigeon.edge.sqlite.file",
    "init_state": "pigeon.edge.sqlite.file",
    "NewOp": "pigeon.edge.queue_store",
    "Built": "pigeon.edge.queue_store",
    "to_operation": "pigeon.edge.sqlite.rows",
    "require": "pigeon.edge.sqlite.rows",
    "was_sent": "pigeon.edge.sqlite.rows",
}


def __getattr__(name: str) -> Any:
    home = _MOVED.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"pigeon.edge.store is deprecated and will be removed in the next release: "
        f"import {name} from {home}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(home), name)
