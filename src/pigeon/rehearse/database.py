"""The rehearsal's database: a throwaway one, or one the user vouches for.

- none given: a SQLite file in a temporary folder, removed with it;
- a SQLite path or a ``postgresql://`` URL naming a database that does not exist: made
  (`pigeon.storage.scratch`) and removed or dropped at the end;
- one that exists and is empty (pigeon's schema bookkeeping aside): used, and left;
- one that holds data: refused, naming what it holds, unless ``i_know``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from types import TracebackType

from pigeon.exceptions import ConfigurationError
from pigeon.storage import scratch
from pigeon.urls import redact_url

BOOKKEEPING = frozenset({"pigeon_schema"})  # rows that say which migrations ran, no data
SHOWN = 5


class DatabaseHoldsData(ConfigurationError):
    """The database given holds data and ``--i-know`` was not given."""


def _holding(url: str) -> dict[str, int]:
    return {t: n for t, n in scratch.holdings(url).items() if t not in BOOKKEEPING}


def refusal(url: str, held: dict[str, int]) -> str:
    biggest = sorted(held.items(), key=lambda item: (-item[1], item[0]))
    named = ", ".join(f"{table} ({n:,} rows)" for table, n in biggest[:SHOWN])
    more = f" and {len(held) - SHOWN} more tables" if len(held) > SHOWN else ""
    return (
        f"{redact_url(url)} holds data: {named}{more}. A rehearsal writes its own requests "
        "and jobs there and kills processes working on it: give a database that does not "
        "exist yet (it is made and dropped), or --i-know to run on this one anyway"
    )


class Throwaway:
    """``with Throwaway(url, i_know=False) as url: ...``: the database to rehearse on."""

    def __init__(self, url: str | None, *, i_know: bool = False) -> None:
        self.given = url
        self.i_know = i_know
        self.created = False
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        self.url = ""

    def __enter__(self) -> str:
        if self.given is None:
            self._folder = tempfile.TemporaryDirectory(prefix="pigeon-rehearse-db-")
            self.url = str(Path(self._folder.name) / "rehearsal.db")
            return self.url
        self.url = self.given
        if not scratch.exists(self.url):
            scratch.create(self.url)
            self.created = True
            return self.url
        held = _holding(self.url)
        if held and not self.i_know:
            raise DatabaseHoldsData(refusal(self.url, held))
        return self.url

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._folder is not None:
            self._folder.cleanup()
        elif self.created:
            scratch.discard(self.url)

    @property
    def kept(self) -> bool:
        """Is the database left where it was when the run ends?"""
        return self._folder is None and not self.created
