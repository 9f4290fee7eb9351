"""The reference application, outside the library's core: what ``pigeon serve`` and
``pigeon demo`` run, and what the end-to-end tests drive.

- ``notes``: versioned notes behind the intake, each write in the effect ledger;
- ``answers``: ``POST /answers``, a record with obligations, jobs and an outbox message;
- ``lww`` / ``crdt`` and ``conflicts``: collections whose conflicts the server settles
  (last write wins by trusted hybrid clocks, CRDT documents merged with pycrdt);
- ``jobs``: the worker's tasks for the answers (grading, notify);
- ``faultproxy``: the fault-injecting proxy of the demo and the chaos tests.

An application builds on ``pigeon.server`` (the intake, the app factory, middleware,
auth) and ``pigeon.jobs``; nothing there imports this package.

The names below load their modules on first use: the worker's tasks (``jobs``) and the
app's tables (``schema``) come without the web app (``pigeon worker``, ``pigeon serve
--app``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pigeon.lazy import lazy_names

if TYPE_CHECKING:
    from pigeon.reference.notes import create_notes_app
    from pigeon.reference.notes_reads import read_ledger

# Each public name and the module that defines it.
_LAZY = {
    "create_notes_app": "pigeon.reference.notes",
    "read_ledger": "pigeon.reference.notes_reads",
}

__all__ = ["create_notes_app", "read_ledger"]

__getattr__, __dir__ = lazy_names(globals(), _LAZY)
