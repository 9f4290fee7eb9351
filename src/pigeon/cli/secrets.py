"""The secrets the CLI takes: database URLs, broker URLs, tokens.

An argument is in ``ps`` for every user of the machine, so each such option also comes
from an environment variable (``PIGEON_DB``, ``PIGEON_RELAY_TO``, ``PIGEON_JWT_SECRET``,
``PIGEON_OPERATOR_TOKEN``) and, on the command line or in that variable, as ``@FILE``: the
value is read from FILE, which only its owner may read (mode 0600 or 0400, as ssh asks of
a private key; a file open to the group or others is refused, saying how to fix it).

What the CLI prints never shows them: every error line passes through `scrub`, which
hides the credentials of any URL in it (`pigeon.urls.redact_urls`) and any credential
this process was given, wherever it appears on its own (a driver quoting the bad part of a
DSN without the rest of it).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import typer

from pigeon.urls import MASK, redact_urls, url_secrets

FILE_MARK = "@"
FILE_HELP = "@FILE reads it from FILE (mode 0600)"
_given: set[str] = set()


def read_secret_file(path: str) -> str:
    """The text of ``path``, stripped; a file the group or others can use, or one that
    cannot be read, is a usage error saying why."""
    try:
        mode = os.stat(path).st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise typer.BadParameter(
                f"{path} is open to group or others (mode {stat.S_IMODE(mode):04o}): a file "
                f"holding a secret must be readable by its owner only; run: chmod 600 {path}"
            )
        text = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise typer.BadParameter(f"{path} is not UTF-8 text") from None
    if not text:
        raise typer.BadParameter(f"{path} is empty")
    return text


def _resolved(value: str) -> str:
    return read_secret_file(value[len(FILE_MARK) :]) if value.startswith(FILE_MARK) else value


def secret_url(value: str | None) -> str | None:
    """typer callback of an option holding a URL with credentials (a database or a
    broker): ``@FILE`` read, and its credentials remembered for `scrub`."""
    if value is None:
        return None
    value = _resolved(value)
    _given.update(url_secrets(value))
    return value


def secret_token(value: str | None) -> str | None:
    """typer callback of an option that is a secret whole (a token, a key)."""
    if value is None:
        return None
    value = _resolved(value)
    if len(value) >= 4:
        _given.add(value)
    return value


def scrub(text: str) -> str:
    """``text`` with every URL's credentials and every secret given to this process hidden."""
    text = redact_urls(text)
    for secret in sorted(_given, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text
