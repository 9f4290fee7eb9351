"""Deploys that change a payload or the tasks, as the operations figures show them: the
live workers with the payload version of each task they run (``pigeon.jobs.registry``),
and per task the jobs that wait for a newer worker: due, and of a payload version newer
than any live worker of the task's queue runs, or of a task none of them knows (one a
deploy still under way adds, or one it removed: its jobs wait until a worker knows it
again, or an operator cancels them). The claim leaves those alone (never run wrongly,
never failed); this is where they are seen.

A task whose queue has no live worker is not listed: its jobs wait for any worker, which
the queue's ready count and age already say."""

from __future__ import annotations

import json
from typing import Any

from pigeon.jobs.app import App
from pigeon.jobs.registry import LIVE_FOR, LiveWorker, known_tasks, newest_known
from pigeon.jobs.stores import session_for
from pigeon.ops.reader import Reader


def deploy_view(r: Reader, app: App) -> dict[str, Any]:
    """``{"workers": [live worker, ...], "waiting": [per task, ...]}``; each task's entry:
    its queue, the newest version its queue's live workers run (``known``, 0: none of them
    knows the task), the newest version among its live jobs and how many jobs wait for a
    newer worker. Listed: every task with live jobs of a version above 1, and every task
    with due jobs that no live worker of their queue knows."""
    rows = session_for(r.tx).workers_seen(r.now - LIVE_FOR)
    workers = [LiveWorker.from_row(row) for row in rows]
    waiting: dict[tuple[str, str], dict[str, Any]] = {}
    for row in r.all("versioned_tasks", {}):
        task = row["task"]
        queue = app.tasks[task].queue if task in app.tasks else row["queue"]
        known = newest_known(workers, queue, task)
        if known is None:
            continue
        params = {"task": task, "known": known, "now": r.now}
        n = r.count("jobs_newer", params, f"versions.{task}.waiting")
        waiting[task, queue] = {
            "task": task, "queue": queue, "known": known, "newest": int(row["newest"]),
            "waiting": n,
        }  # fmt: skip
    _count_unknown(r, workers, waiting)
    entries = sorted(waiting.values(), key=lambda e: (e["task"], e["queue"]))
    return {"workers": [w.as_dict() for w in workers], "waiting": entries}


def _count_unknown(
    r: Reader, workers: list[LiveWorker], waiting: dict[tuple[str, str], dict[str, Any]]
) -> None:
    """Add to ``waiting`` the due version-1 jobs of each task that no live worker of its
    queue knows (a version above 1 is counted with the versioned tasks)."""
    for queue, tasks in sorted(known_tasks(workers).items()):
        params = {"queue": queue, "known": json.dumps(sorted(tasks)), "now": r.now}
        for row in r.all("unknown_tasks", {**params, "scan": r.cap}):
            task = row["task"]
            entry = waiting.setdefault(
                (task, queue),
                {"task": task, "queue": queue, "known": 0, "newest": 1, "waiting": 0},
            )
            entry["waiting"] += int(row["n"])
            if row["full"]:  # the head read was cut: a floor, shown as not exact
                r.estimated.append(f"versions.{task}.waiting")


__all__ = ["deploy_view"]
