"""The Django notes example's settings, and a death right after the commit of the key
named in NOTES_DIE_ON, before the answer (the crash test's gap)."""

from __future__ import annotations

import os
import signal

from notes_project.settings import *  # noqa: F403
from notes_project.settings import PIGEON

PIGEON = {**PIGEON, "AFTER_COMMIT": "tests.integrations.django_crash_settings.die_after"}


def die_after(keys: list[str]) -> None:
    if os.environ.get("NOTES_DIE_ON") in keys:
        os.kill(os.getpid(), signal.SIGKILL)
