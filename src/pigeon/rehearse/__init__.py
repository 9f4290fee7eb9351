"""``pigeon rehearse``: the failure list, run against an application's own server, jobs
and configuration, on a throwaway database with real processes, and reconciled.

A guarantee nobody has rehearsed is a hope. Each scenario (`pigeon.rehearse.scenarios`)
does to the app what production will one day do to it — a server killed before its
commit, copies of one request at once, bodies its schema refuses, a principal revoked
while its jobs wait, a peak of several times the normal rate — and then counts what the
app left in the database against what the same requests left without the fault
(`pigeon.rehearse.stage.twins`): duplicates and losses are named, table by table.

    from pigeon.rehearse import RehearsalHooks, Request   # the app's own request makers
    from pigeon.rehearse.runner import RehearseOptions, run_rehearsal
"""

from __future__ import annotations

from pigeon.rehearse.hooks import RehearsalHooks, Request

__all__ = ["RehearsalHooks", "Request"]
