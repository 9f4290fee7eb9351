"""pigeon's log output: text or structured (one JSON object a line), redacted.

``pigeon serve`` and ``pigeon worker`` install it (``--log-format text|json``,
``--log-redact NAME``, or ``PIGEON_LOG_REDACT=a,b``); an application embedding pigeon can
use `configure` or put `JsonFormatter` / `TextFormatter` on its own handlers.

What is never written, whatever the caller logged:

* a field whose name contains an entry of the redaction list (`DEFAULT_REDACT`: the
  Authorization header, cookies, tokens, the operator token, passwords, secrets, API keys,
  payloads and bodies; plus the configured names), at any depth of a structured value;
* the same names as ``name=value`` / ``name: value`` / ``"name": "value"`` inside a message
  (a query string, a header dump; the listed word within `MAX_NAME_TAIL` characters of the
  name's end), and ``Bearer``/``Basic`` credentials anywhere;
* the message of an exception, unless its type is one whose message pigeon writes about
  infrastructure (`SAFE_MESSAGES`: a store, the configuration, the OS). An application's
  exception (a request handler's, a task's, a hook's) may quote the data it failed on, so
  its type and traceback are logged, its message is not.

Every pattern runs in linear time on whatever it is given, and a record's message is cut
short (`MAX_LOGGED_ARGUMENT`, `MAX_LOGGED_MESSAGE`) before anything reads it: the text is
often a request's, and it is formatted on the server's event loop.

pigeon's own log calls are written not to need this (they name ids, never payloads or
tokens: see the log test); this is the net under them, and under the applications and
libraries (uvicorn's access log) whose records share the handler.
"""

from __future__ import annotations

import json
import logging
import logging.config
import os
import re
import time
import traceback
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pigeon.exceptions import ConfigurationError, JobTimeout, StoreError
from pigeon.storage.errors import SAFE_DRIVER_MESSAGES
from pigeon.urls import redact_urls

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")
REDACT_ENV = "PIGEON_LOG_REDACT"
REDACTED = "[redacted]"
DEFAULT_REDACT = (
    "authorization",
    "cookie",
    "token",  # access_token, operator_token, X-Pigeon-Operator-Token, ...
    "password",
    "passwd",
    "secret",
    "api_key",
    "apikey",
    "credential",
    "private_key",
    "payload",
    "body",
)
# Exceptions whose messages are about infrastructure, written by pigeon, the OS or the
# database drivers' connection layer: kept (still passed through the redactor).
SAFE_MESSAGES: tuple[type[BaseException], ...] = (
    StoreError,
    ConfigurationError,
    JobTimeout,
    OSError,
    *SAFE_DRIVER_MESSAGES,  # SQLite's OperationalError
)
# What a LogRecord has of its own: anything else on it came from ``extra=`` (a field).
_STANDARD = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", (), None)).keys() | {"message", "asctime"}
)
# Every pattern here runs on text an outsider controls (a request line, a header), on the
# event loop: none may backtrack. Each runs on the text lower-cased (`_lower`: a search
# for literal words then skips ahead in C, where (?i) tried every position), starts at a
# literal word, and takes what follows with possessive quantifiers (``++``, ``*+``), which
# never give back what they took: linear. tests/test_hostile_input.py feeds each 1 MiB of
# hostile text; keep any pattern added here the same.
_CREDENTIAL = re.compile(r"\b(?:bearer|basic)(\s++[^\s,;\"']++)")
_SCHEMES = ("bearer", "basic")
# A name's listed word is at most this many characters from the end of the name
# (``token`` in ``x-pigeon-operator-token``, ``secret`` in ``client_secret_value``): the
# bound keeps a run of listed words (``tokentoken...``) from being scanned once per word.
MAX_NAME_TAIL = 32
# What a record's message is cut to before anything reads it: each string argument
# (uvicorn's access line: the request target), then the whole message. A request of
# megabytes must not be redacted, escaped and written on the event loop.
MAX_LOGGED_ARGUMENT = 4096
MAX_LOGGED_MESSAGE = 16384
# A text line's message keeps to one line: a CR/LF (or another control character) taken
# from a request would otherwise forge a log line of its own. JSON escapes them anyway.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# Fields some libraries add for their own formatters (uvicorn: the message with ANSI colours).
_DROPPED = frozenset({"color_message"})


def redaction_list(
    extra: Iterable[str] = (), *, env: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    """`DEFAULT_REDACT`, the names in ``$PIGEON_LOG_REDACT`` (comma-separated) and
    ``extra``, lower-cased, without repeats."""
    from_env = (env if env is not None else os.environ).get(REDACT_ENV, "")
    names = [*DEFAULT_REDACT, *from_env.split(","), *extra]
    return tuple(dict.fromkeys(n.strip().lower() for n in names if n.strip()))


class Redactor:
    """Applies a redaction list to field names, structured values and free text."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self.names = redaction_list(names)
        words = "|".join(re.escape(n) for n in sorted(self.names, key=len, reverse=True))
        # name=value, name: value, "name": "value", 'name'='value'; the name may be part
        # of a longer one (X-Operator-Token, access_token) as for fields. A match starts at
        # the listed word (what precedes it in the name is kept anyway). A quoted value
        # that never closes is scanned to the end once at most: any later value's opening
        # quote follows ':', '=' or a space, never a backslash, so that scan stopped at it.
        # A value already hidden is taken whole: text redacted twice (a job's error, when
        # it is recorded and when it is shown) reads as once, not "[redacted]]".
        self._pairs = re.compile(
            rf"""(?x)
            (?:{words})[\w.-]{{0,{MAX_NAME_TAIL}}}+["']?+\s*+[:=]\s*+
            ({re.escape(REDACTED)}|"(?:[^"\\]|\\.)*+"|'(?:[^'\\]|\\.)*+'|[^\s,;&}}\]]++)
            """
        )

    def hides(self, name: str) -> bool:
        lowered = name.lower()
        return any(n in lowered for n in self.names)

    def text(self, value: str) -> str:
        """``value`` with ``Bearer``/``Basic`` credentials and listed ``name=value``
        pairs redacted. Linear in the length of ``value``, whatever it holds."""
        value = redact_urls(value)  # a URL's password (a broker's, a DSN's): pigeon.urls
        lowered = _lower(value)
        if any(scheme in lowered for scheme in _SCHEMES):
            value = _spliced(value, _CREDENTIAL.finditer(lowered), " " + REDACTED)
            lowered = _lower(value)
        if any(name in lowered for name in self.names):
            value = _spliced(value, self._pairs.finditer(lowered), REDACTED)
        return value

    def value(self, value: Any, depth: int = 0) -> Any:
        """A structured value with every hidden field's value replaced, and text redacted."""
        if depth > 20:
            return REDACTED
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {
                str(k): REDACTED if self.hides(str(k)) else self.value(v, depth + 1)
                for k, v in value.items()
            }
        if isinstance(value, list | tuple | set | frozenset):
            return [self.value(v, depth + 1) for v in value]
        if value is None or isinstance(value, bool | int | float):
            return value
        return self.text(str(value))

    def exception(self, exc: BaseException) -> str:
        """The traceback of ``exc`` and its causes, each message kept only for a type in
        `SAFE_MESSAGES` (and redacted even then)."""
        chain: list[BaseException] = []
        seen: set[int] = set()
        current: BaseException | None = exc
        while current is not None and id(current) not in seen:
            seen.add(id(current))
            chain.append(current)
            current = current.__cause__ or (
                None if current.__suppress_context__ else current.__context__
            )
        parts: list[str] = []
        for error in reversed(chain):
            if parts:
                parts.append("\nwhich led to:\n")
            if error.__traceback__ is not None:
                parts.append("Traceback (most recent call last):\n")
                parts.extend(traceback.format_tb(error.__traceback__))
            kind = type(error)
            name = kind.__qualname__
            if kind.__module__ not in ("builtins", "__main__"):
                name = f"{kind.__module__}.{name}"
            if isinstance(error, SAFE_MESSAGES):
                parts.append(f"{name}: {self.text(str(error))}")
            else:
                parts.append(f"{name}: [message not logged]")
        return "".join(parts)

    def message(self, record: logging.LogRecord) -> str:
        """The record's message, its string arguments and then itself cut short
        (`MAX_LOGGED_ARGUMENT`, `MAX_LOGGED_MESSAGE`) before it is redacted."""
        args: Any = record.args
        if isinstance(args, Mapping):  # logging's one-mapping form: "%(name)s"
            args = {k: bounded(v, MAX_LOGGED_ARGUMENT) for k, v in args.items()}
        elif args:
            args = tuple(bounded(v, MAX_LOGGED_ARGUMENT) for v in args)
        try:
            text = str(record.msg) % args if args else str(record.msg)
        except Exception:  # a bad format string: the template, not a crash in logging
            text = str(record.msg)
        return self.text(bounded(text, MAX_LOGGED_MESSAGE))

    def fields(self, record: logging.LogRecord) -> dict[str, Any]:
        """The record's ``extra=`` fields, redacted."""
        return {
            key: REDACTED if self.hides(key) else self.value(value)
            for key, value in vars(record).items()
            if key not in _STANDARD and key not in _DROPPED and not key.startswith("_")
        }


def bounded(value: Any, limit: int) -> Any:
    """A string cut to ``limit`` characters, saying how many were left out; any other
    value as it is. Cut before redaction: a cut name or value is hidden all the same."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]}...[{len(value) - limit} more characters]"
    return value


def _lower(text: str) -> str:
    """``text`` lower-cased character for character, so that offsets in it are offsets in
    ``text``: ``str.lower`` makes two characters of one, 'İ' (U+0130, the only one)."""
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text.replace("\u0130", "i").lower()


def _spliced(text: str, matches: Iterable[re.Match[str]], filler: str) -> str:
    """``text`` with the span of each match's first group replaced by ``filler``."""
    parts: list[str] = []
    done = 0
    for match in matches:
        start, end = match.span(1)
        parts += (text[done:start], filler)
        done = end
    if not parts:
        return text
    parts.append(text[done:])
    return "".join(parts)


_DEFAULT = Redactor()


class TextFormatter(logging.Formatter):
    """``time level logger message [field=value ...]``, redacted."""

    def __init__(self, redact: Iterable[str] = ()) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")
        self.redactor = Redactor(redact)

    def format(self, record: logging.LogRecord) -> str:
        message = _CONTROL.sub(lambda m: ascii(m.group())[1:-1], self.redactor.message(record))
        line = f"{self.formatTime(record)} {record.levelname} {record.name} {message}"
        fields = self.redactor.fields(record)
        logged = fields.pop("exception", None)  # from `failure`: a traceback, for reading
        if fields:
            line += " " + " ".join(f"{k}={json.dumps(v, default=str)}" for k, v in fields.items())
        if isinstance(logged, str):
            line += "\n" + logged
        if record.exc_info and record.exc_info[1] is not None:
            line += "\n" + self.redactor.exception(record.exc_info[1])
        if record.stack_info:
            line += "\n" + record.stack_info
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ``time`` (ISO 8601, UTC), ``level``, ``logger``,
    ``message``, ``process``, ``thread``, the record's ``extra=`` fields, and
    ``exception`` (type and traceback, see `Redactor.exception`), all redacted."""

    def __init__(self, redact: Iterable[str] = ()) -> None:
        super().__init__()
        self.redactor = Redactor(redact)

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        entry: dict[str, Any] = {
            "time": f"{stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": self.redactor.message(record),
            "process": record.process,
            "thread": record.threadName,
        }
        for key, value in self.redactor.fields(record).items():
            entry.setdefault(key, value)  # a field never overwrites the record's own
        if record.exc_info and record.exc_info[1] is not None:
            entry["exception"] = self.redactor.exception(record.exc_info[1])
        return json.dumps(entry, ensure_ascii=False, default=str)


def summary(exc: BaseException) -> str:
    """``exc`` for a log line's text: its type, and its message only for a type in
    `SAFE_MESSAGES` (a publisher's or task's exception may quote the data it failed on)."""
    if isinstance(exc, SAFE_MESSAGES):
        return f"{type(exc).__name__}: {_DEFAULT.text(str(exc))}"
    return type(exc).__name__


def failure(
    logger: logging.Logger,
    msg: str,
    *args: object,
    exc: BaseException,
    level: int = logging.ERROR,
    error_id: str | None = None,
) -> None:
    """Log that application code (a hook, a callback, a publisher) raised ``exc``: its type
    in the message, its traceback (messages redacted, see `Redactor.exception`) in the
    record's ``exception`` field, and its message nowhere. Not ``exc_info``: a handler
    with another formatter (the embedding app's, pytest's) would print the message.
    ``error_id``: the id an answer gave the client for this failure, in the message and
    in an ``error_id`` field, so the one line is found from the answer."""
    extra: dict[str, object] = {"exception": _DEFAULT.exception(exc)}
    if error_id is not None:
        msg += f" [error {error_id}]"
        extra["error_id"] = error_id
    logger.log(level, msg + " (%s)", *args, summary(exc), extra=extra, stacklevel=2)


def redact_text(text: str | None) -> str | None:
    """``text`` with what the logs hide hidden (`DEFAULT_REDACT` and ``$PIGEON_LOG_REDACT``
    as ``name=value`` pairs, ``Bearer``/``Basic`` credentials): for error text that is
    shown or exported elsewhere (a failed job's error on the page, in the CLI, in the
    dashboard's JSON and metrics), so that no view shows what the logs leave out."""
    return None if text is None else _DEFAULT.text(text)


def formatter(fmt: LogFormat = "text", redact: Iterable[str] = ()) -> logging.Formatter:
    if fmt not in LOG_FORMATS:
        raise ConfigurationError(f"log format must be one of {', '.join(LOG_FORMATS)}, not {fmt!r}")
    return JsonFormatter(redact) if fmt == "json" else TextFormatter(redact)


def dict_config(
    fmt: LogFormat = "text", level: str | int = "INFO", redact: Iterable[str] = ()
) -> dict[str, Any]:
    """A ``logging.config.dictConfig`` mapping: one stderr handler with pigeon's formatter
    for the root logger, and uvicorn's loggers sent to it (``uvicorn.Config(log_config=)``
    takes this, in every worker process it starts)."""
    formatter(fmt)  # refuses an unknown format now, not in a worker process
    level = logging.getLevelName(level) if isinstance(level, int) else level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "pigeon": {"()": "pigeon.logs.formatter", "fmt": fmt, "redact": list(redact)}
        },
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "pigeon",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"handlers": ["stderr"], "level": level},
        "loggers": {
            name: {"handlers": [], "propagate": True, "level": level}
            for name in ("uvicorn", "uvicorn.error", "uvicorn.access")
        },
    }


def configure(
    fmt: LogFormat = "text", level: str | int = "INFO", redact: Iterable[str] = ()
) -> None:
    """Send this process's logs to stderr through pigeon's formatter."""
    logging.config.dictConfig(dict_config(fmt, level, redact))
