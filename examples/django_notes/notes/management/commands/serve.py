"""``python manage.py serve``: migrate, then serve the project on uvicorn (Django's ASGI
application). Prints ``pigeon serving on URL (pid N)`` once it listens."""

from __future__ import annotations

import os
import socket
from typing import Any

import uvicorn
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from pigeon.orphans import adopt_parent_from_env


class Command(BaseCommand):
    help = "Migrate, then serve the notes on uvicorn."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)

    def handle(self, *args: Any, **options: Any) -> None:
        adopt_parent_from_env()  # started by a pigeon process (a test): end with it
        call_command("migrate", verbosity=0)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart after a kill
        sock.bind((options["host"], options["port"]))
        host, port = sock.getsockname()[:2]
        config = uvicorn.Config(
            "notes_project.asgi:application", log_level="warning", lifespan="off"
        )
        print(f"pigeon serving on http://{host}:{port} (pid {os.getpid()})", flush=True)
        uvicorn.Server(config).run(sockets=[sock])
