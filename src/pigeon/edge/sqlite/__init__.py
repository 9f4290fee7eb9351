"""The edge queue's SQLite store: everything of the edge that speaks SQLite is in this
package (a seam test keeps it so). `EdgeStore` implements `pigeon.edge.queue_store.QueueStore`
over one file: `file` opens it (locks, owners, recovery, transactions), `append` is the
enqueue's transaction, `moves` the other state changes, `rows` turns rows into
Operations, `stamps` keeps the clock's floor in the file, `stats` counts."""

from __future__ import annotations

from pigeon.edge.sqlite.file import APPLICATION_ID, PAGE_SIZE
from pigeon.edge.sqlite.store import EdgeStore
from pigeon.storage.sqlite import SQLiteTx

__all__ = ["APPLICATION_ID", "PAGE_SIZE", "EdgeStore", "SQLiteTx"]
