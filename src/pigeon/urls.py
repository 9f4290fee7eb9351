"""The password part of a URL, hidden wherever a URL may be shown.

A broker URL (``redis://:PW@host``), a database DSN (``postgresql://user:PW@host/db``,
``...?password=PW``) or a NATS token (``nats://TOKEN@host``) carries its credential in
the URL itself, and every error that quotes the URL would print it. `redact_urls` hides
the credentials of every URL inside a text (a message, an exception, a log line):

* the user-info: ``user:PW@`` becomes ``user:***@``, a lone ``TOKEN@`` becomes ``***@``;
* the value of a query parameter named like a secret (``password``, ``sslpassword``,
  ``token``, ``secret``, ``key``...).

Written as scans, each a single character class repeated (no pattern that can
backtrack): it runs on text an outsider may control (a log line, an exception quoting a
request), and each character is looked at a bounded number of times.

`url_secrets` lists the credentials of one URL as they may appear *without* the URL
around them (a driver quoting the bad part of a DSN: ``invalid percent-encoded token:
"PW%zz"``), for callers that know the URL and can hide those strings too.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

MASK = "***"
SECRET_PARAMS = ("pass", "pwd", "secret", "token", "key", "auth", "credential")
# The user-info of a URL: from "://" to its last '@' before anything user-info never
# holds ('/', whitespace, quotes...). The characters RFC 3986 allows there, and a raw '?'
# or '#' a careless password has, do not end it: a cut must not leave half a password.
# Each pattern is character classes that cannot overlap, then '@': a failed try gives
# back at most its own run, and runs never overlap (each ends at the '/' of the next
# "://"), so the cost is linear in the text.
_NOT_INFO = r"\s\"<>`{}|\\^/\[\]"
_USER_PASSWORD = re.compile(rf"://([^{_NOT_INFO}:@]*):[^{_NOT_INFO}]*@")  # keeps the user
_TOKEN = re.compile(rf"://[^{_NOT_INFO}:]*@")  # no ':': the whole user-info is a token
# A query parameter anywhere in the text whose name says secret, and its value. Linear:
# a name is tried only after '?', '&' or ';', which end every run before it; the
# lookahead scans that run once for a word, and the possessive runs never give back.
_NAME = r"[^=&?;\s\"'<>`]"
_WORDS = "|".join(SECRET_PARAMS)
_SECRET_PARAM = re.compile(rf"(?i)([?&;](?={_NAME}*?(?:{_WORDS})){_NAME}*+)=([^&;\s\"'<>`#]*+)")


def redact_urls(text: str) -> str:
    """``text`` with the credentials of every ``scheme://...`` URL in it hidden."""
    if "://" in text:
        # Functions, not templates: Python 3.11 expands a template with a group in Python,
        # at twice the cost, and a megabyte of "?password=&" is 100,000 matches.
        text = _USER_PASSWORD.sub(lambda m: f"://{m[1]}:{MASK}@", text)
        text = _TOKEN.sub(f"://{MASK}@", text)
    # The patterns only where they can match (plain scans first): a log line of '&' and
    # '=' without a secret's name costs a pass of str.find, not a regex try per '&'.
    if "=" in text:
        lowered = text.lower()
        if any(word in lowered for word in SECRET_PARAMS):
            text = _SECRET_PARAM.sub(lambda m: f"{m[1]}={MASK}", text)
    return text


def redact_url(url: str) -> str:
    """``url`` with its credentials hidden (`redact_urls` of the one URL)."""
    return redact_urls(url)


def url_secrets(url: str) -> tuple[str, ...]:
    """The credentials in ``url`` (password or token, secret query values), as written
    and percent-decoded: strings that must not be shown even without the URL."""
    found: list[str] = []
    for pattern in (_USER_PASSWORD, _TOKEN):
        info = pattern.search(url)
        if info is not None:
            user, colon, password = info.group(0)[3:-1].partition(":")
            found.append(password if colon else user)
            break
    found += [value for _name, value in _SECRET_PARAM.findall(url)]
    secrets = {s for f in found for s in (f, unquote(f)) if len(s) >= 3}
    return tuple(sorted(secrets, key=len, reverse=True))
