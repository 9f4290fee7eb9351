"""Rows of benchmark results and how they are printed."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

Row = dict[str, Any]


def row(
    benchmark: str,
    pigeon: float,
    baseline: float,
    *,
    unit: str,
    baseline_name: str,
    target: str,
    ok: bool,
    higher_is_better: bool = True,
) -> Row:
    """One comparison. ``ratio`` is pigeon / baseline when more is better (throughput),
    baseline / pigeon when less is better (latency), so above 1 always means pigeon wins."""
    ratio = pigeon / baseline if higher_is_better else baseline / pigeon
    return {
        "benchmark": benchmark,
        "pigeon": round(pigeon, 2),
        "baseline": round(baseline, 2),
        "baseline_name": baseline_name,
        "unit": unit,
        "ratio": round(ratio, 2),
        "target": target,
        "ok": ok,
    }


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def print_rows(rows: list[Row], console: Console | None = None) -> None:
    table = Table(title="pigeon benchmarks")
    for column in ("benchmark", "pigeon", "baseline", "ratio", "target", "ok"):
        table.add_column(column, justify="left" if column == "benchmark" else "right")
    for r in rows:
        table.add_row(
            r["benchmark"],
            f"{r['pigeon']:,} {r.get('unit', '')}".strip(),
            f"{r['baseline']:,} ({r.get('baseline_name', '')})",
            f"{r['ratio']}x",
            str(r["target"]),
            "yes" if r.get("ok") else "NO",
        )
    (console or Console()).print(table)


def dump(rows: list[Row], path: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(rows, fh, indent=2)
