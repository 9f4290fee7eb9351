"""``pigeon keys``: make encryption keys, see which key seals what, rotate to a new key.

Keys come from ``--keys-file`` or, without it, from the environment (``PIGEON_KEYS``, or
``PIGEON_KEYS_FILE``), as for ``pigeon serve`` and ``pigeon worker``. A key is never
printed except by ``generate`` without ``--file`` (for the caller to put somewhere safe).
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer
from rich.console import Console

from pigeon.cli._db import open_db
from pigeon.cli._format import titled_table
from pigeon.cli.options import DbOption, KeysFileOption, load_keyring
from pigeon.exceptions import ConfigurationError
from pigeon.storage.crypto import Keyring, generate_key, key_entry, new_kid
from pigeon.storage.files import write_private
from pigeon.storage.rotate import CLEAR, DEFAULT_BATCH, ColumnReport, rotate, status

app = typer.Typer(help="Encryption keys: generate, status, rotate.", no_args_is_help=True)
console = Console()


@app.command()
def generate(
    key_id: Annotated[
        str | None, typer.Option("--id", help="Key id (default: k<UTC time>-<random>).")
    ] = None,
    file: Annotated[
        str | None,
        typer.Option(
            "--file",
            help="Add the key to this key file as the current one (created 0600 if new); "
            "without it the key is printed.",
        ),
    ] = None,
    staged: Annotated[
        bool,
        typer.Option(
            "--staged",
            help="With --file: add the key last, opening only, not sealing; make it "
            "current with 'pigeon keys use' once every process has it.",
        ),
    ] = False,
) -> None:
    """A new 256-bit AES-GCM key."""
    kid = key_id or new_kid()
    new = (kid, generate_key())
    try:
        if file is None:
            Keyring((new,))  # the id checked as a keyring would
            sys.stdout.write(key_entry(*new) + "\n")
            return
        old = Keyring.from_file(file) if os.path.exists(file) else None
        if old is not None and kid in old.ids:
            raise ConfigurationError(f"key id {kid!r} is already in {file}")
        keys = () if old is None else old.keys
        _write(file, (*keys, new) if staged and keys else (new, *keys))
    except ConfigurationError as exc:
        raise typer.BadParameter(str(exc)) from exc
    role = "staged (opens, does not seal yet)" if staged and old else "the current key"
    typer.echo(f"key {kid} added to {file}: {role}")


@app.command()
def use(
    key_id: Annotated[str, typer.Argument(metavar="KID", help="The key to seal with from now.")],
    file: Annotated[str, typer.Option("--file", help="The key file.")],
) -> None:
    """Make a key of the file the current one (first), the others kept for opening."""
    try:
        ring = Keyring.from_file(file)
        if key_id not in ring.ids:
            raise ConfigurationError(f"{file} has no key {key_id!r} (it has {list(ring.ids)})")
        _write(file, tuple(sorted(ring.keys, key=lambda k: k[0] != key_id)))
    except ConfigurationError as exc:
        raise typer.BadParameter(str(exc)) from exc
    typer.echo(f"key {key_id} is now the current key of {file}")


def _write(file: str, keys: tuple[tuple[str, bytes], ...]) -> None:
    Keyring(keys)  # refused before anything is written
    write_private(file, "".join(key_entry(k, key) + "\n" for k, key in keys))


@app.command("status")
def status_cmd(db: DbOption, keys_file: KeysFileOption = None) -> None:
    """Sealed values per key id in each encrypted column."""
    keyring = load_keyring(keys_file)
    database = open_db(db, keyring=keyring)
    try:
        found = status(database)
    finally:
        database.close()
    known = set() if keyring is None else set(keyring.ids)
    table = titled_table("values per key")
    for column in ("column", "key", "values", "note"):
        table.add_column(column, justify="right" if column == "values" else "left")
    for name, counts in found.items():
        for kid, n in sorted(counts.items()):
            note = ""
            if keyring is not None and kid == keyring.current:
                note = "current"
            elif kid != CLEAR and kid not in known:
                note = "NOT IN KEYRING: unreadable"
            elif kid == CLEAR and keyring is not None:
                note = "rotate to seal"
            table.add_row(name, kid, str(n), note)
    console.print(table)


@app.command("rotate")
def rotate_cmd(
    db: DbOption,
    keys_file: KeysFileOption = None,
    batch: Annotated[
        int, typer.Option(min=1, help="Rows per transaction (each one short).")
    ] = DEFAULT_BATCH,
) -> None:
    """Re-seal every value not under the current key (the first of the keyring), in
    batches, while the server runs; run again to resume."""
    keyring = load_keyring(keys_file)
    if keyring is None:
        raise typer.BadParameter("no keys: give --keys-file, PIGEON_KEYS or PIGEON_KEYS_FILE")
    database = open_db(db, keyring=keyring)
    try:
        reports = rotate(database, batch=batch)
    finally:
        database.close()
    unreadable = _print(reports, keyring.current)
    if unreadable:
        raise typer.Exit(1)


def _print(reports: dict[str, ColumnReport], current: str) -> int:
    table = titled_table(f"re-sealed under {current}")
    for column in ("column", "re-sealed", "changed meanwhile", "unreadable"):
        table.add_column(column, justify="left" if column == "column" else "right")
    unreadable = 0
    for name, r in reports.items():
        missing = ", ".join(f"{n} under {kid}" for kid, n in sorted(r.missing.items()))
        bad = missing + (f"; {r.invalid} failed authentication" if r.invalid else "")
        unreadable += sum(r.missing.values()) + r.invalid
        table.add_row(name, str(r.resealed), str(r.skipped), bad or "0")
    console.print(table)
    return unreadable
