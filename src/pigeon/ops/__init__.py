"""Operations: the 9 a.m. page, its figures (one query module for the page, ``/metrics``,
``pigeon jobs stats`` and the JSON endpoint) and the operator's actions.

    from starlette.routing import Mount
    from pigeon.ops import dashboard_app
    from pigeon.server.access import OperatorToken

    routes = [Mount("/ops", dashboard_app(db, jobs_app, operator=OperatorToken(token)))]

The names below load their modules on first use: ``pigeon jobs stats`` reads the figures
(`pigeon.ops.queries`) without the page's web app.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pigeon.lazy import lazy_names
from pigeon.ops import _extra  # noqa: F401  (first: one line naming the extra)

if TYPE_CHECKING:
    from pigeon.ops.dashboard import dashboard_app
    from pigeon.ops.queries import overview

# Each public name and the module that defines it.
_LAZY = {"dashboard_app": "pigeon.ops.dashboard", "overview": "pigeon.ops.queries"}

__all__ = ["dashboard_app", "overview"]

__getattr__, __dir__ = lazy_names(globals(), _LAZY)
