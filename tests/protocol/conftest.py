from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.protocol.wire_app import LiveServer, WireState, live_server


@pytest.fixture
def state() -> WireState:
    return WireState()


@pytest.fixture
def server(state: WireState) -> Iterator[LiveServer]:
    with live_server(state) as running:
        yield running
