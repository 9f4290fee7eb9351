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
"""

from __future__ import annotations

from pigeon.reference.notes import create_notes_app
from pigeon.reference.notes_reads import read_ledger

__all__ = ["create_notes_app", "read_ledger"]
