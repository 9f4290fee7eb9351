"""pigeon's log output: text or structured (one JSON object a line), redacted.

``pigeon serve`` and ``pigeon worker`` install it (``--log-format text|json``,
``--log-redact NAME``, or ``PIGEON_LOG_REDACT=a,b``); an application embedding pigeon can
use `configure` or put `JsonFormatter` / `TextFormatter` on its own handlers.

What is never written, whatever the caller logged:

* a field whose name contains an entry of the redaction list (`DEFAULT_REDACT`: the
  Authorization header, cookies, tokens, the operator token, passwords, secrets, API keys,
  payloads and bodies; plus the configured names), at any depth of a structured value;
* the same names as ``name=value`` / ``name: value`` / ``"name": "value"`` inside a message
  (a query string, a header dump), and ``Bearer``/``Basic`` credentials anywhere;
* the message of an exception, unless its type is one whose message pigeon writes about
  infrastructure (`SAFE_MESSAGES`: a store, the configuration, the OS). An application's
  exception (a request handler's, a task's, a hook's) may quote the data it failed on, so
  its type and traceback are logged, its message is not.

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
_CREDENTIAL = re.compile(r"(?i)\b(bearer|basic)\s+[^\s,;\"']+")
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
        # of a longer one (X-Operator-Token, access_token) as for fields.
        self._pairs = re.compile(
            rf"""(?ix)
            (["']?[\w.-]*(?:{words})[\w.-]*["']?\s*[:=]\s*)
            ("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^\s,;&}}\]]+)
            """
        )

    def hides(self, name: str) -> bool:
        lowered = name.lower()
        return any(n in lowered for n in self.names)

    def text(self, value: str) -> str:
        value = redact_urls(value)  # a URL's password (a broker's, a DSN's): pigeon.urls
        value = _CREDENTIAL.sub(lambda m: f"{m.group(1)} {REDACTED}", value)
        return self._pairs.sub(lambda m: m.group(1) + REDACTED, value)

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
        try:
            text = record.getMessage()
        except Exception:  # a bad format string: the template, not a crash in logging
            text = str(record.msg)
        return self.text(text)

    def fields(self, record: logging.LogRecord) -> dict[str, Any]:
        """The record's ``extra=`` fields, redacted."""
        return {
            key: REDACTED if self.hides(key) else self.value(value)
            for key, value in vars(record).items()
            if key not in _STANDARD and key not in _DROPPED and not key.startswith("_")
        }


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
    logger: logging.Logger, msg: str, *args: object, exc: BaseException, level: int = logging.ERROR
) -> None:
    """Log that application code (a hook, a callback, a publisher) raised ``exc``: its type
    in the message, its traceback (messages redacted, see `Redactor.exception`) in the
    record's ``exception`` field, and its message nowhere. Not ``exc_info``: a handler
    with another formatter (the embedding app's, pytest's) would print the message."""
    logger.log(
        level,
        msg + " (%s)",
        *args,
        summary(exc),
        extra={"exception": _DEFAULT.exception(exc)},
        stacklevel=2,
    )


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
