"""Run every ``bench/*_bench.py`` module and print one table: ``python -m bench``."""

from __future__ import annotations

import argparse
import json
import pkgutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench._condition import measure
from bench._report import Row, dump, print_rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, about a minute")
    parser.add_argument("--only", action="append", default=[], help="module name, repeatable")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    folder = Path(__file__).parent
    names = sorted(m.name for m in pkgutil.iter_modules([str(folder)]) if m.name.endswith("_bench"))
    if args.only:
        names = [n for n in names if n in args.only or n.removesuffix("_bench") in args.only]
    print("measuring the machine's condition ...", file=sys.stderr, flush=True)
    condition = measure()
    rows: list[Row] = []
    for name in names:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        rows.extend(isolated(f"bench.{name}", quick=args.quick))
    print(condition.markdown(), flush=True)
    print_rows(rows)
    if args.json:
        dump(rows, args.json)
    return 0 if all(r.get("ok", True) for r in rows) else 1


def isolated(module: str, *, quick: bool = False) -> list[Row]:
    """The rows of the benchmark ``module``, run in an interpreter of its own
    (`bench._one`)."""
    with tempfile.TemporaryDirectory(prefix="pigeon-bench-") as tmp:
        path = Path(tmp) / "rows.json"
        command = [sys.executable, "-m", "bench._one", module, str(path)]
        subprocess.run([*command, *(["--quick"] if quick else [])], check=True)
        rows: list[Row] = json.loads(path.read_text(encoding="utf-8"))
        return rows


if __name__ == "__main__":
    sys.exit(main())
