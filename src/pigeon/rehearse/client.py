"""The rehearsal's client: one request sent as a device's queue would send it, again and
again under its one key until it has a final answer.

Final: a 2xx, or a 4xx other than those the protocol says to send again (408, 425, 429,
and 409 "key in progress"). Sent again: no answer (the server is down or was killed), a
5xx, those 4xx. A retry waits a little longer each time (capped), as the edge's backoff
does, honouring a ``Retry-After`` of a few seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx

from pigeon.core import wire
from pigeon.rehearse.makers import Planned

RETRIED = frozenset({408, 425, 429})
REPLAYED = "idempotent-replayed"


@dataclass(frozen=True)
class Answer:
    """A final answer (``status`` None: none came before the deadline)."""

    status: int | None
    body: bytes = b""
    replayed: bool = False
    attempts: int = 0

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    def json(self) -> Any:
        return httpx.Response(self.status or 0, content=self.body).json()


def in_progress(response: httpx.Response) -> bool:
    """409 "key in progress": by its problem type, or untyped with a Retry-After."""
    if response.status_code != 409:
        return False
    try:
        kind = response.json().get("type")
    except (ValueError, AttributeError):
        kind = None
    if kind is not None:
        return bool(kind == wire.PROBLEM_KEY_IN_PROGRESS)
    return "retry-after" in response.headers


def final(response: httpx.Response) -> bool:
    status = response.status_code
    if status >= 500 or status in RETRIED:
        return False
    return not in_progress(response)


class Client:
    """httpx against one server (``url``); ``timeout`` per attempt (long: on a loaded
    machine a slow answer is no lost one)."""

    def __init__(self, url: str, *, timeout: float = 30.0) -> None:
        self.http = httpx.Client(base_url=url, timeout=timeout)

    def close(self) -> None:
        self.http.close()

    def send(
        self, planned: Planned, extra: dict[str, str] | None = None, *, content: bytes | None = None
    ) -> httpx.Response | None:
        """One attempt (``extra``: headers for this attempt alone; ``content``: these bytes
        as the body instead of the request's JSON); None: no answer."""
        request = planned.request
        headers = planned.headers | (extra or {})
        if content is not None:
            headers |= {"Content-Type": "application/json"}
        body = {"json": request.body} if content is None else {"content": content}
        for again in (True, False):
            try:
                return self.http.request(request.method, request.path, headers=headers, **body)
            except (httpx.ReadError, httpx.RemoteProtocolError):
                # A kept-alive connection the server closed meanwhile (after a 500, say):
                # once more on a new one, as any client would; the key makes it safe.
                if not again:
                    return None
            except httpx.TransportError:
                return None
        return None

    def settle(
        self,
        planned: Planned,
        *,
        deadline: float = 60.0,
        attempts: int = 0,
        first: dict[str, str] | None = None,
    ) -> Answer:
        """Send ``planned`` until a final answer, or ``deadline`` seconds have passed;
        ``first``: headers of the first attempt alone (a test hook); ``attempts``: how
        many the caller made already."""
        end = time.monotonic() + deadline
        pause = 0.05
        while True:
            response = self.send(planned, first if attempts == 0 else None)
            attempts += 1
            if response is not None and final(response):
                return Answer(
                    response.status_code,
                    response.content,
                    response.headers.get(REPLAYED) == "true",
                    attempts,
                )
            if time.monotonic() + pause > end:
                return Answer(None, attempts=attempts)
            time.sleep(_wait(response, pause))
            pause = min(pause * 2, 1.0)


def _wait(response: httpx.Response | None, pause: float) -> float:
    after = None if response is None else response.headers.get("retry-after", "")
    if after and after.isdigit():
        return min(float(after), 5.0)
    return pause
