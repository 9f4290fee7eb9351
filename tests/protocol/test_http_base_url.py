"""HttpTransport refuses a base URL it could never send to when it is built."""

from __future__ import annotations

import httpx
import pytest

from pigeon.exceptions import ConfigurationError, PermanentError
from pigeon.protocol.http import HttpTransport
from tests.protocol.test_http import op
from tests.protocol.wire_app import LiveServer, WireState


@pytest.mark.parametrize(
    "url", ["not a url", "ftp://x", "localhost:8000", "/api", "http://", "https:///notes"]
)
def test_a_base_url_that_is_not_http_or_https_with_a_host_is_refused(url: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        HttpTransport(url)
    assert repr(url) in str(raised.value) and "http://" in str(raised.value)


def test_a_client_with_a_bad_base_url_is_refused() -> None:
    with (
        httpx.Client(base_url="ftp://x") as client,
        pytest.raises(ConfigurationError, match="client's base_url 'ftp://x'"),
    ):
        HttpTransport(client=client)


@pytest.mark.parametrize(
    "url", ["http://localhost:8000", "https://api.example/v1/", "HTTP://[::1]:9/", "http://a"]
)
def test_good_base_urls_and_a_client_without_one_are_accepted(url: str) -> None:
    HttpTransport(url).close()
    with httpx.Client(base_url=url) as client:
        HttpTransport(client=client).close()
    with httpx.Client() as bare:  # its routes may give whole URLs: checked when sent
        HttpTransport(client=bare).close()


def test_an_operation_whose_own_endpoint_is_no_http_url_is_its_own_permanent_error(
    server: LiveServer, state: WireState
) -> None:
    bad, good = op("a", endpoint="ftp://elsewhere/things/a"), op("b")
    with HttpTransport(server.url) as transport:
        exchange = transport.send([bad, good])
    [(_, refused), (_, sent)] = exchange.replies
    assert isinstance(refused.error, PermanentError)
    assert "ftp://elsewhere/things/a" in str(refused.error)
    assert sent.status == 201 and len(state.effects("b")) == 1


def test_a_client_without_a_base_url_answers_with_the_url_error(server: LiveServer) -> None:
    with httpx.Client() as bare, HttpTransport(client=bare) as transport:
        [(_, reply)] = transport.send([op("a")]).replies
    assert isinstance(reply.error, httpx.UnsupportedProtocol)
