"""The operations figures, from one place: the page (``/pigeon/``), ``/metrics``,
``pigeon jobs stats`` and ``GET /pigeon/v1/dashboard`` all read ``overview`` and nothing
else, so the four cannot disagree.

What it answers (the 9 a.m. question):

- records received in a window and how many are complete;
- per obligation kind: pending (its job waits), in progress (its job is reserved),
  completed, failed, cancelled, and the age of the oldest still owed (pending, in progress
  or failed) since its record was accepted;
- per queue: ready, delayed, reserved, stuck, the oldest *ready* job's age against the
  freshness objective, workers busy (reserved jobs) against the queue's budget, and the
  last hour's attempts (per minute, durations);
- the failed store grouped by owner, queue and error class (the exception's type, the text
  before the first ``:`` of the error), each with its latest jobs and their attempts;
- reconciliation for the window: obligations created vs completed, effects recorded,
  outbox notifications created vs confirmed by the broker, and obligations or records
  that no job will ever settle (must be zero);
- the relay's lag (``pigeon.jobs.stats.relay_lag``) and the operator action log;
- lifecycle events counted (``pigeon.lifecycle``): workers recycled, relay lock takeovers,
  ``pigeon serve`` workers replaced;
- deploys that change a payload (``pigeon.ops.deploys``): the live workers and the payload
  versions they run, and per task the jobs waiting for a newer worker.

Cost. Every figure is read through an index and none scans a large table: counts of live
states use the claim indexes; on PostgreSQL, once ``pigeon_jobs`` holds more than
``LARGE_TABLE`` rows (the planner's estimate), a count reads at most ``cap`` index
entries and, past that, is the planner's estimate (``EXPLAIN``), named in
``overview()["estimated"]`` and shown as ``≈`` on the page. SQLite counts exactly.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from pigeon.jobs._db import reading
from pigeon.jobs.app import App
from pigeon.jobs.rows import loads
from pigeon.jobs.stats import DEFAULT_OBJECTIVE, is_breach, percentiles, ready_age, relay_lag
from pigeon.lifecycle import KINDS
from pigeon.logs import redact_text
from pigeon.ops.deploys import deploy_view
from pigeon.ops.reader import OPS, Reader
from pigeon.storage.base import Database
from pigeon.storage.sealed import ATTEMPT_ERROR, JOB_ERROR

DEFAULT_WINDOW = 24 * 3600.0
WINDOWS = {"1h": 3600.0, "24h": DEFAULT_WINDOW, "7d": 7 * 24 * 3600.0}
LARGE_TABLE = 100_000  # rows of pigeon_jobs (PostgreSQL's estimate) before counts are capped
CAP = 10_000  # index entries a capped count reads at most
HOUR = 3600.0
DURATION_SAMPLE = 1_000  # latest successful attempts behind a queue's percentiles
GROUP_JOBS = 5  # latest jobs shown per failed group
FAILED_ROWS = 20_000  # latest failed jobs grouped by error class
OLDER = "(older)"  # the class of failed jobs past FAILED_ROWS
UNJOBBED_EXAMPLES = 20
ACTION_LOG = 20
# Bucket bounds (seconds) of the attempt duration histogram.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
JOB_STATES = ("ready", "delayed", "reserved", "stuck", "failed", "succeeded", "cancelled")
OBLIGATION_STATES = ("pending", "in_progress", "completed", "failed", "cancelled")


def error_class(error: str | None) -> str:
    """The failed store's grouping of an error: the exception's type name (``ProviderDown``
    of ``attempts exhausted (5 of 5); last error: app.ProviderDown: 503``), or pigeon's own
    reason where no exception was raised (``lease expired on its last attempt``)."""
    if not error:
        return "-"
    text = error.rsplit("; last error: ", 1)[-1]
    text = text.removeprefix("permanent error: ")
    head = text.split(":", 1)[0].strip()
    # A sentence, not a type: without its counts "(3 of 3)"; a type: without its module.
    sentence = " " in head or not head
    label = (_without_counts(head) if sentence else head.rsplit(".", 1)[-1])[:80]
    # A label on the page, in the JSON and in the metrics: hidden as the logs hide it.
    return redact_text(label) or "-"


def _without_counts(head: str) -> str:
    r"""``head`` without a trailing parenthesis (from its first '(' on, if it ends in ')').
    No pattern: the text is a job's error, and r"\s*\(.*\)\s*$" was quadratic on it."""
    if not head.endswith(")"):
        return head
    start = head.find("(")
    return head if start < 0 else head[:start].rstrip()


def window_bounds(now: float, window: float) -> tuple[float, float]:
    return now - window, now + 1e-6  # until is exclusive: a record of this very instant is in


def overview(
    db: Database,
    app: App | None = None,
    *,
    now: float | None = None,
    window: float = DEFAULT_WINDOW,
    cap: int = CAP,
    large_table: int = LARGE_TABLE,
    history: bool = True,
) -> dict[str, Any]:
    """Every operations figure, read in one read transaction (plus the relay's lag).

    ``window``: seconds of records (and reconciliation) to count back from ``now``.
    ``history``: read the failed jobs' attempts and the action log (the page and the JSON
    endpoint do; the metrics do not need them)."""
    app = app or App()
    now = time.time() if now is None else now
    since, until = window_bounds(now, window)
    estimated: list[str] = []
    with reading(db) as tx:
        size_row = OPS.run(tx, "table_size", {"table": "pigeon_jobs"}).fetchone()
        size = size_row["n"] if size_row is not None else None
        capped = size is not None and int(size) > large_table
        if capped:
            # Every query here is written for an index. On a large table the planner may
            # still pick a sequential scan for a LIMITed count, expecting matches to come
            # early; the rows it wants (the open ones) are the newest, at the table's end.
            # (That makes plan costs huge, which would switch JIT compilation on: ~70 ms.)
            tx.sql("SET LOCAL enable_seqscan = off", {})
            tx.sql("SET LOCAL jit = off", {})
        r = Reader(tx, now, capped, cap, estimated)
        win = {"since": since, "until": until}
        received = r.count("records_received", win, "records.received")
        completed = r.count("records_completed", win, "records.completed")
        records = {"received": received, "completed": completed, "open": received - completed}
        obligations = _obligations(r)
        queues = _queues(r, app, now)
        failed = _failed(r, history=history)
        reconciliation = _reconcile(r, win, list(obligations), received)
        actions = _action_log(r) if history else []
        events = _lifecycle(r)
        versions = deploy_view(r, app)
    lag = relay_lag(db, now=now)
    return {
        "at": now,
        "window": {"since": since, "until": now, "seconds": window},
        "estimated": sorted(set(estimated)),
        "records": records,
        "obligations": obligations,
        "queues": queues,
        "failed": failed,
        "failed_by_owner": _by_owner(failed),
        "reconciliation": reconciliation,
        "relay": lag.as_dict(),
        "actions": actions,
        "lifecycle": events,
        "versions": versions,
    }


def _obligations(r: Reader) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = {}
    for row in r.all("obligation_kinds", {}):
        name = row["name"]
        counts = {
            status: r.count(
                "obligations", {"name": name, "status": status}, f"obligations.{name}.{status}"
            )
            for status in ("pending", "completed", "failed", "cancelled")
        }
        running = r.count("obligations_running", {"name": name}, f"obligations.{name}.pending")
        running = min(running, counts["pending"])
        oldest = r.one("oldest_owed", {"name": name})
        owed_since = oldest["at"] if oldest is not None else None
        result[name] = {
            "pending": counts["pending"] - running,  # its job waits
            "in_progress": running,  # its job is reserved by a worker
            "completed": counts["completed"],
            "failed": counts["failed"],
            "cancelled": counts["cancelled"],
            "owed": counts["pending"] + counts["failed"],
            "oldest_owed_age": ready_age(owed_since, r.now),
        }
    return result


def _queues(r: Reader, app: App, now: float) -> list[dict[str, Any]]:
    names = {row["queue"] for row in r.all("queues_seen", {})} | app.queues.keys()
    hour = {"since": now - HOUR}
    by_queue: dict[str, list[dict[str, Any]]] = {}
    for row in r.all("attempts_per_minute", hour):
        by_queue.setdefault(row["queue"], []).append(row)
    result = []
    for queue in sorted(names):
        params = {"queue": queue, "now": now}
        counts = {s: r.count(f"jobs_{s}", params, f"queues.{queue}.{s}") for s in JOB_STATES}
        oldest = r.one("oldest_ready", params)
        age = ready_age(oldest["at"] if oldest is not None else None, now)
        config = app.queues.get(queue)
        objective = config.freshness if config is not None else DEFAULT_OBJECTIVE
        result.append(
            {
                "queue": queue,
                **counts,
                "backlog": counts["ready"] + counts["reserved"] + counts["stuck"],
                "oldest_ready_age": age,
                "objective": objective,
                "breach": is_breach(age, objective),
                "workers": {
                    "busy": counts["reserved"],
                    "budget": config.max_workers if config is not None else None,
                },
                "last_hour": _last_hour(r, queue, by_queue.get(queue, []), now),
            }
        )
    return result


def _last_hour(r: Reader, queue: str, rows: list[dict[str, Any]], now: float) -> dict[str, Any]:
    """Attempts finished in the last hour, per minute (oldest first) and in all; the
    durations of the successful ones: histogram, sum, mean, and percentiles of the latest
    ``DURATION_SAMPLE``."""
    per_minute = [0] * 60
    failed_per_minute = [0] * 60
    succeeded = failed = 0
    seconds = 0.0
    buckets = [0] * len(DURATION_BUCKETS)
    for row in rows:
        minute = min(59, max(0, int(row["minute"])))
        n = int(row["n"])
        if row["ok"]:
            per_minute[minute] += n
            succeeded += n
            seconds += float(row["seconds"] or 0.0)
            for i in range(len(DURATION_BUCKETS)):
                buckets[i] += int(row[f"le_{i}"] or 0)
        else:
            failed_per_minute[minute] += n
            failed += n
    sample: list[float] = []
    if succeeded:
        params = {"since": now - HOUR, "queue": queue, "limit": DURATION_SAMPLE}
        sample = [max(0.0, float(x["seconds"])) for x in r.all("durations_sample", params)]
    histogram = {f"{b:g}": buckets[i] for i, b in enumerate(DURATION_BUCKETS)}
    histogram["+Inf"] = succeeded
    return {
        "succeeded": succeeded,
        "failed": failed,  # attempts that did not succeed (retried, failed or lost)
        "per_minute": per_minute,
        "failed_per_minute": failed_per_minute,
        "durations": percentiles(sample),
        "duration_mean": seconds / succeeded if succeeded else None,
        "duration_sum": seconds,
        "histogram": histogram,
    }


def _failed(r: Reader, *, history: bool) -> dict[str, Any]:
    """Groups of (owner, queue, error class), largest first, from the latest
    ``FAILED_ROWS`` failed jobs; older ones (a failed store larger than that) are counted
    per owner and queue in a group of class ``(older)``."""
    counts = {(row["owner"], row["queue"]): int(row["n"]) for row in r.all("failed_counts", {})}
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    opened = r.tx.cipher.open  # errors are sealed at rest when the server has keys
    for job in r.all("failed_rows", {"limit": FAILED_ROWS}):
        # Redacted as the logs redact (errors recorded by older versions were not).
        job["last_error"] = redact_text(opened(job["last_error"], *JOB_ERROR.ad, str(job["id"])))
        key = (job["owner"], job["queue"], error_class(job["last_error"]))
        group = groups.get(key)
        if group is None:
            group = groups[key] = {
                "owner": key[0],
                "queue": key[1],
                "error_class": key[2],
                "count": 0,
                "latest": job["finished_at"],
                "jobs": [],
            }
        group["count"] += 1
        if history and len(group["jobs"]) < GROUP_JOBS:
            group["jobs"].append(_failed_job(r, job))
    for (owner, queue), n in counts.items():
        seen = sum(g["count"] for k, g in groups.items() if k[:2] == (owner, queue))
        if n > seen:
            groups[(owner, queue, OLDER)] = {
                "owner": owner,
                "queue": queue,
                "error_class": OLDER,
                "count": n - seen,
                "latest": None,
                "jobs": [],
            }
    ordered = sorted(
        groups.values(), key=lambda g: (-g["count"], g["owner"], g["queue"], g["error_class"])
    )
    return {"total": sum(counts.values()), "groups": ordered}


def _failed_job(r: Reader, job: dict[str, Any]) -> dict[str, Any]:
    """A failed job of a group, with its attempts, their errors opened and redacted."""
    attempts = r.all("attempts_of", {"job_id": job["id"]})
    for a in attempts:
        ad = (*ATTEMPT_ERROR.ad, str(job["id"]), str(a["attempt"]))
        a["error"] = redact_text(r.tx.cipher.open(a["error"], *ad))
    return {
        "job_id": job["id"],
        "task": job["task"],
        "attempts": job["attempts"],
        "error": job["last_error"],
        "failed_at": job["finished_at"],
        "record_id": job["record_id"],
        "obligation": job["obligation"],
        "history": attempts,
    }


def _group_key(group: Mapping[str, Any]) -> dict[str, Any]:
    return {k: group[k] for k in ("owner", "queue", "error_class")}


def _by_owner(failed: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The failed store by owner (the shape the JSON endpoint has always had)."""
    owners: dict[str, dict[str, Any]] = {}
    for group in failed["groups"]:
        entry = owners.setdefault(group["owner"], {"failed": 0, "queues": {}, "recent": []})
        entry["failed"] += group["count"]
        entry["queues"][group["queue"]] = entry["queues"].get(group["queue"], 0) + group["count"]
        for job in group["jobs"]:
            entry["recent"].append({"queue": group["queue"], **job})
    for entry in owners.values():
        entry["recent"].sort(key=lambda j: (-(j["failed_at"] or 0), -j["job_id"]))
        del entry["recent"][GROUP_JOBS:]
        for job in entry["recent"]:
            job.pop("history", None)
    return owners


def _reconcile(
    r: Reader, win: Mapping[str, float], kinds: list[str], received: int
) -> dict[str, Any]:
    """Obligations created (and completed) for the records of the window: one exact
    GROUP BY (an index probe per obligation), or on a large table with more than
    ``cap / 4`` records in the window, the planner's estimate per kind."""
    created: dict[str, int] = {}
    completed: dict[str, int] = {}
    if r.capped and received > r.cap // 4:
        for name in kinds:
            params = {**win, "name": name}
            n = r.estimate(r.sql("rows_reconcile_created"), params)
            done = r.estimate(r.sql("rows_reconcile_completed"), params)
            if n:
                created[name] = n
                completed[name] = min(done, n)
                r.estimated += [
                    f"reconciliation.created.{name}",
                    f"reconciliation.completed.{name}",
                ]
        if created:
            r.estimated += ["reconciliation.created_total", "reconciliation.completed_total"]
    else:
        for row in r.all("reconcile_obligations", win):
            created[row["name"]] = created.get(row["name"], 0) + int(row["n"])
            if row["status"] == "completed":
                completed[row["name"]] = int(row["n"])
    effects = r.one("reconcile_effects", win)
    outbox = r.one("reconcile_outbox", win) or {}
    unjobbed: list[dict[str, Any]] = []
    for name in kinds:
        # Each pending obligation has its own job, queued or reserved: when the two counts
        # (both from indexes) agree, none is without one, and the join is not needed.
        if f"obligations.{name}.pending" not in r.estimated:
            pending = r.count("obligations", {"name": name, "status": "pending"}, "-")
            live = r.count("obligations_live_jobs", {"name": name}, "-")
            if pending == live:
                continue
        unjobbed += r.all("owed_without_job", {"name": name, "limit": UNJOBBED_EXAMPLES})
    for row in r.all("records_without_obligation", {**win, "limit": UNJOBBED_EXAMPLES}):
        unjobbed.append({"record_id": row["record_id"], "name": None})
    return {
        "obligations_created": created,
        "obligations_completed": completed,
        "created_total": sum(created.values()),
        "completed_total": sum(completed.values()),
        "effects_recorded": int(effects["n"]) if effects is not None else 0,
        "notifications": {
            "created": int(outbox.get("created") or 0),
            "confirmed": int(outbox.get("confirmed") or 0),
        },
        "without_job": {"count": len(unjobbed), "examples": unjobbed[:UNJOBBED_EXAMPLES]},
    }


def _action_log(r: Reader) -> list[dict[str, Any]]:
    rows = r.all("action_log", {"limit": ACTION_LOG})
    for row in rows:
        row["selection"] = loads(row["selection"])
    return rows


def _lifecycle(r: Reader) -> dict[str, dict[str, Any]]:
    """Lifecycle events counted (``pigeon.lifecycle``), every kind (0 if never seen)."""
    events = {kind: {"count": 0, "last_at": None, "last_detail": None} for kind in KINDS}
    for row in r.all("lifecycle_counts", {}):
        events[row["kind"]] = {
            "count": int(row["count"]),
            "last_at": row["last_at"],
            "last_detail": row["last_detail"],
        }
    return events


__all__ = ["DEFAULT_WINDOW", "WINDOWS", "error_class", "overview", "window_bounds"]
