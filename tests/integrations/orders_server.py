"""The orders app of the integration tests on a real uvicorn, SIGKILLing itself right after
committing a chosen key, before answering.

Run as ``python -m tests.integrations.orders_server URL sync|async [KEY]``; prints
``port N`` once listening.
"""

from __future__ import annotations

import os
import signal
import sys

import uvicorn

from pigeon.cli.listeners import listen_socket
from tests.integrations.orders_app import create_app


def main() -> None:
    url, mode = sys.argv[1], sys.argv[2]
    die_on = sys.argv[3] if len(sys.argv) > 3 else None

    def after_commit(keys: list[str]) -> None:
        if die_on in keys:
            os.kill(os.getpid(), signal.SIGKILL)

    app = create_app(url, asynchronous=mode == "async", after_commit=after_commit)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
    sock = listen_socket("127.0.0.1", 0)
    print(f"port {sock.getsockname()[1]}", flush=True)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
