"""The sync package calls its queue through a declared, typed protocol (`SyncQueue`):
nothing in it looks at a queue's signature or attributes at run time, and no type check
is switched off. A scan of the source keeps it that way."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pigeon.sync
from pigeon.edge.queue import OfflineQueue
from pigeon.sync.engine import SyncEngine

SYNC = Path(pigeon.sync.__file__).parent
FORBIDDEN = {
    "import inspect": re.compile(r"^\s*(import inspect|from inspect import)", re.M),
    "getattr(": re.compile(r"\bgetattr\("),
    "hasattr(": re.compile(r"\bhasattr\("),
    "type: ignore": re.compile(r"type:\s*ignore"),
    "isinstance(..., OfflineQueue)": re.compile(r"isinstance\([^)]*OfflineQueue"),
}


def test_sync_source_has_no_run_time_probing_or_ignored_types() -> None:
    found = [
        f"{path.name}:{text[: m.start()].count(chr(10)) + 1}: {what}"
        for path in sorted(SYNC.glob("*.py"))
        for text in [path.read_text()]
        for what, pattern in FORBIDDEN.items()
        for m in pattern.finditer(text)
    ]
    assert found == []


def test_engine_enqueue_has_the_queue_signature() -> None:
    engine = inspect.signature(SyncEngine.enqueue).parameters
    queue = inspect.signature(OfflineQueue.enqueue).parameters
    assert [(p.name, p.kind, p.default) for p in engine.values()] == [
        (p.name, p.kind, p.default) for p in queue.values()
    ]
