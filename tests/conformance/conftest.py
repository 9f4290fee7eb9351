"""The servers the one conformance suite checks: ``pigeon serve``'s reference notes app,
the FastAPI + SQLAlchemy example (examples/fastapi_orders) and the Django example
(examples/django_notes, a process of its own), each on a real uvicorn over loopback, on
each backend. A server is a base URL: the suite speaks HTTP only."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import pytest
from examples.fastapi_orders.app import create_app as create_orders_app
from examples.fastapi_orders.app import migrate

from pigeon.demo.processes import serve_in_thread
from pigeon.reference.notes import create_notes_app
from pigeon.server.auth_options import AuthOptions
from pigeon.server.options import ServerOptions
from pigeon.storage.server import open_server_db
from tests.integrations.django_notes import DjangoNotes
from tests.integrations.orders_app import sqlalchemy_url

SERVERS = ["reference", "fastapi_orders", "django_notes"]


@pytest.fixture(params=SERVERS)
def notes_server(request: pytest.FixtureRequest, server_db_url: str) -> Iterator[str]:
    """The base URL of a server of the notes contract (anonymous callers allowed)."""
    with ExitStack() as stack:
        if request.param == "django_notes":
            server = DjangoNotes(server_db_url, allow_anonymous=True).start()
            stack.callback(server.stop)
            yield server.url
            return
        if request.param == "reference":
            db = open_server_db(server_db_url)
            stack.callback(db.close)
            anonymous = ServerOptions(auth=AuthOptions(allow_anonymous=True))
            app = create_notes_app(db, anonymous, purge_interval=None)
        else:
            app = create_orders_app(sqlalchemy_url(server_db_url))
            migrate(app.state.engine)
            stack.callback(app.state.engine.dispose)
        yield stack.enter_context(serve_in_thread(app))
