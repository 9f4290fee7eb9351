"""Deploys that change a payload, as the operations figures show them: the live workers
with the payload version of each task they run (``pigeon.jobs.registry``), and per
versioned task the jobs that wait for a newer worker: due, of a payload version newer
than any live worker of the task's queue runs. The claim leaves those alone (never run
wrongly, never failed); this is where they are seen.

A task whose queue has no live worker is not listed: its jobs wait for any worker, which
the queue's ready count and age already say."""

from __future__ import annotations

from typing import Any

from pigeon.jobs.app import App
from pigeon.jobs.registry import LIVE_FOR, LiveWorker, newest_known
from pigeon.jobs.stores import session_for
from pigeon.ops.reader import Reader


def deploy_view(r: Reader, app: App) -> dict[str, Any]:
    """``{"workers": [live worker, ...], "waiting": [per versioned task, ...]}``; each
    task's entry: its queue, the newest version its queue's live workers run (``known``),
    the newest version among its live jobs and how many jobs wait for a newer worker."""
    rows = session_for(r.tx).workers_seen(r.now - LIVE_FOR)
    workers = [LiveWorker.from_row(row) for row in rows]
    waiting = []
    for row in r.all("versioned_tasks", {}):
        task = row["task"]
        queue = app.tasks[task].queue if task in app.tasks else row["queue"]
        known = newest_known(workers, queue, task)
        if known is None:
            continue
        params = {"task": task, "known": known, "now": r.now}
        n = r.count("jobs_newer", params, f"versions.{task}.waiting")
        waiting.append(
            {"task": task, "queue": queue, "known": known, "newest": int(row["newest"]),
             "waiting": n}
        )  # fmt: skip
    return {"workers": [w.as_dict() for w in workers], "waiting": waiting}


__all__ = ["deploy_view"]
