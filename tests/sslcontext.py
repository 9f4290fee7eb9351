"""One default SSL context for every httpx client a test process makes.

httpx builds a fresh default context for each client, and so for each ``httpx.get``:
parsing certifi's bundle, 0.03-0.15 s of CPU on this machine, paid thousands of times by
tests that poll a server or walk a route matrix. The default context is not changed once
made (the tests talk plain HTTP on loopback), so sharing it changes no request; any other
``verify`` or ``cert`` still goes to httpx as given. tests/conftest.py loads this plugin.
"""

from __future__ import annotations

import functools
import ssl
from typing import Any

import pytest
from httpx._transports import default

_create = default.create_ssl_context


@functools.cache
def _default_context(trust_env: bool) -> ssl.SSLContext:
    return _create(verify=True, cert=None, trust_env=trust_env)


def shared_ssl_context(verify: Any = True, cert: Any = None, trust_env: bool = True) -> Any:
    """httpx's ``create_ssl_context``, made once per process for the default arguments."""
    if verify is True and cert is None:
        return _default_context(trust_env)
    return _create(verify=verify, cert=cert, trust_env=trust_env)


def pytest_configure(config: pytest.Config) -> None:
    default.create_ssl_context = shared_ssl_context
