"""A notes server that SIGKILLs itself right after committing a chosen key, before answering.

Run as ``python crashing_server.py DB_PATH [KEY]``; prints ``port N`` once listening.
"""

from __future__ import annotations

import os
import signal
import sys

import uvicorn

from pigeon.cli.listeners import listen_socket
from pigeon.reference.notes import create_notes_app
from pigeon.storage.server import open_server_db


def main() -> None:
    path, die_on = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else None)

    def after_commit(keys: list[str]) -> None:
        if die_on in keys:
            os.kill(os.getpid(), signal.SIGKILL)

    app = create_notes_app(open_server_db(path), after_commit=after_commit)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
    sock = listen_socket("127.0.0.1", 0)
    print(f"port {sock.getsockname()[1]}", flush=True)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
